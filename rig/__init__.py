"""The rig that attacks and certifies the course: not part of the library, run from the repository root.

`python -m rig.torture --out DIR` (`make torture`) kills, corrupts and misuses the checkpoint path
and the output folders and counts what happened. Nothing under lib/shardlab imports this package
(tests/test_layout.py keeps it so); the rig imports the library the way a learner's command does.
"""
