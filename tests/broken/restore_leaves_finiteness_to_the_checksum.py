"""Mistake: restore checks the contract, the checksum, every dtype, shape, permutation and bound, but not that
weights and momentum are finite. Its save writes whatever state it is given (the course's rules let a save write a
diverged state) with a checksum of those values, so a copy damaged after the save is refused by the checksum, while
a diverged state this save wrote comes back.

Both are the course's save and restore with their field check replaced by one without the finiteness test."""

import types

import numpy as np

from shardlab.core import checkpoint, schema
from shardlab.learner.reference import *  # noqa: F403

FINITE = ()  # the fields whose finiteness the check tests: none (the mistake; other planted files set their own)


def _fields_but_finite(arrays, expected, where):
    """The course's field check with each float field outside FINITE replaced by zeros of its dtype and shape."""
    zeros = {name: np.zeros_like(arrays[name]) for name in schema.DEVICE if name in arrays and name not in FINITE}
    schema.check({**arrays, **zeros}, expected["num_features"], expected["features_shape"][0], where)


def _with_the_check(function):
    scope = {**function.__globals__, "_check_fields": lambda *args: _fields_but_finite(*args)}
    return types.FunctionType(function.__code__, scope, function.__name__, function.__defaults__)


_save, _restore = _with_the_check(checkpoint.save), _with_the_check(checkpoint.restore)


def save(path, state, contract):
    return _save(path, state, contract)


def restore(path, expected_contract, mesh):
    return _restore(path, expected_contract, mesh)
