"""shardlab: resume and profile a sharded JAX training run, on four logical CPU devices.

Import order matters once: call `setup_devices` before anything creates a JAX array.
"""

from shardlab import errors
from shardlab.core import batch, checkpoint, config, devices, fixtures, sampler, schema, state, update
from shardlab.core.batch import Batch, device_counts, next_batch, pad, padded_length, place
from shardlab.core.checkpoint import contract, restore, save
from shardlab.core.config import Config
from shardlab.core.devices import make_mesh, setup_devices
from shardlab.core.fixtures import Dataset, check_dataset, teaching_fixture, timing_fixture
from shardlab.core.sampler import advance, epoch_batches, initial_sampler
from shardlab.core.state import FIELDS, host_copy, initial, replicate, transition
from shardlab.core.update import count_all_reduce, make_single_device_step, make_step, stablehlo
from shardlab.course import results
from shardlab.learner import implementation

__all__ = [
    "batch",
    "checkpoint",
    "config",
    "devices",
    "fixtures",
    "sampler",
    "schema",
    "state",
    "update",
    "Batch",
    "Config",
    "Dataset",
    "FIELDS",
    "advance",
    "check_dataset",
    "contract",
    "count_all_reduce",
    "device_counts",
    "epoch_batches",
    "errors",
    "host_copy",
    "implementation",
    "results",
    "initial",
    "initial_sampler",
    "make_single_device_step",
    "make_mesh",
    "make_step",
    "next_batch",
    "pad",
    "padded_length",
    "place",
    "replicate",
    "restore",
    "save",
    "setup_devices",
    "stablehlo",
    "teaching_fixture",
    "timing_fixture",
    "transition",
]
