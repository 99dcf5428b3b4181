"""The reference implementation: the names a learner's file must also provide."""

from shardlab.batch import next_batch
from shardlab.checkpoint import contract, restore, save
from shardlab.state import initial, transition
from shardlab.update import make_step

__all__ = ["initial", "next_batch", "make_step", "transition", "contract", "save", "restore"]
