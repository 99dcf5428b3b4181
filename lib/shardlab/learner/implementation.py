"""Load the implementation a notebook or the checker runs: the reference or a learner's file."""

import importlib.util
import os
import types

from shardlab.core.errors import ConfigError

API = ("initial", "next_batch", "make_step", "transition", "contract", "save", "restore")


def load(spec: str = "reference") -> types.ModuleType:
    """Return the module named by `spec`: 'reference' or a path to a learner's .py file."""
    if spec in ("", "reference", None):
        from shardlab.learner import reference

        return reference
    path = os.path.abspath(os.path.expanduser(spec))
    if not os.path.isfile(path):
        raise ConfigError(f"implementation {spec!r} is neither 'reference' nor an existing .py file")
    module_spec = importlib.util.spec_from_file_location("learner_implementation", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    missing = [name for name in API if not callable(getattr(module, name, None))]
    if missing:
        raise ConfigError(f"{spec} does not define {missing}; start from `python -m shardlab starter FILE`")
    return module
