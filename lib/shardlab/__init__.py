"""shardlab: resume and profile a sharded JAX training run, on four logical CPU devices.

Import order matters once: call `setup_devices` before anything creates a JAX array.
"""

from shardlab import errors, implementation, record
from shardlab.batch import Batch, device_counts, next_batch, pad, padded_length, place
from shardlab.checkpoint import contract, restore, save
from shardlab.config import Config
from shardlab.devices import make_mesh, setup_devices
from shardlab.fixtures import Dataset, check_dataset, teaching_fixture, timing_fixture
from shardlab.sampler import advance, epoch_batches, initial_sampler
from shardlab.state import FIELDS, host_copy, initial, replicate, transition
from shardlab.update import count_all_reduce, make_global_step, make_step, stablehlo

__all__ = [
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
    "record",
    "initial",
    "initial_sampler",
    "make_global_step",
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
