"""Attacks on `shardlab grade`: hostile submissions graded beside honest ones, each with its expected outcome.

`python -m rig.grade_attacks --out DIR` builds the submissions in DIR/submissions, grades them in a
bubblewrap sandbox into DIR/grades, then grades the honest files alone into DIR/alone, and writes
DIR/attacks.json: one row per attack with what was expected, what was observed and whether it held.
A row whose `expected` is `open` is a known limit the grader does not contain (stated in docs/handin.md);
it is listed so that its observed outcome is recorded, and it never counts as held.
"""
