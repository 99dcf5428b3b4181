"""shardlab: resume and profile a sharded JAX training run, on four logical CPU devices.

Import order matters once: call `setup_devices` before anything creates a JAX array.
"""

import importlib

# name -> the module that defines it. Nothing is imported until a name is first used (PEP 562), so a
# process that needs one light module (the checker's supervisor, a command's argument parser) never pays
# for JAX; `import shardlab as sl; sl.next_batch` imports shardlab.core.batch on first use.
_MODULES = {  # each a literal module name: the receipts' import closure (evidence.sources) reads them as strings
    "batch": "shardlab.core.batch",
    "checkpoint": "shardlab.core.checkpoint",
    "config": "shardlab.core.config",
    "devices": "shardlab.core.devices",
    "fixtures": "shardlab.core.fixtures",
    "sampler": "shardlab.core.sampler",
    "schema": "shardlab.core.schema",
    "state": "shardlab.core.state",
    "update": "shardlab.core.update",
    "errors": "shardlab.errors",
    "results": "shardlab.course.results",
    "implementation": "shardlab.learner.implementation",
}
_NAMES = {
    "shardlab.core.batch": "Batch device_counts next_batch pad padded_length place",
    "shardlab.core.checkpoint": "contract restore save",
    "shardlab.core.config": "Config",
    "shardlab.core.devices": "make_mesh setup_devices",
    "shardlab.core.fixtures": "Dataset check_dataset teaching_fixture timing_fixture",
    "shardlab.core.sampler": "advance epoch_batches initial_sampler",
    "shardlab.core.state": "FIELDS host_copy initial replicate transition",
    "shardlab.core.update": "count_all_reduce make_single_device_step make_step",
}
_ATTRIBUTES = {name: module for module, names in _NAMES.items() for name in names.split()}


def __getattr__(name: str):
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _ATTRIBUTES:
        value = getattr(importlib.import_module(_ATTRIBUTES[name]), name)
    else:
        raise AttributeError(f"module 'shardlab' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


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
    "teaching_fixture",
    "timing_fixture",
    "transition",
]
