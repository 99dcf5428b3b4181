"""Mistake: restore compares the contracts with every float rounded to 4 significant digits."""

import json

import numpy as np

from shardlab.core.checkpoint import restore as reference_restore
from shardlab.errors import ContractMismatchError
from shardlab.learner.reference import *  # noqa: F403


def _rounded(contract_):
    return {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in contract_.items()}


def restore(path, expected_contract, mesh):
    with np.load(path, allow_pickle=False) as npz:
        found = json.loads(str(npz["contract"][()]))
    if _rounded(found) != _rounded(expected_contract):
        raise ContractMismatchError(f"{path} belongs to another experiment")
    return reference_restore(path, found, mesh)  # the saved contract: its fields, checksum and sampler
