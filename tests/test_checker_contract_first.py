"""Contract first, also for a file too large for the expected experiment: its contract is read (bounded) and
compared before the size is refused. A larger experiment's checkpoint is another experiment's
(ContractMismatchError); a file of the expected experiment that is too large is corrupt."""

import zipfile

import numpy as np
import pytest

import shardlab as sl
from shardlab.core import archive
from shardlab.core.fixtures import Dataset
from shardlab.errors import ContractMismatchError, CorruptCheckpointError

pytestmark = pytest.mark.stage3
ROWS = 32768  # the order alone (4 bytes a row) is larger than every member of a 23-row checkpoint together


def _large(rows=ROWS) -> Dataset:
    features = np.random.default_rng(5).normal(size=(rows, 1)).astype(np.float32)
    return Dataset(features, (3 * features[:, 0]).astype(np.float32))


def _saved(path, data, mesh, config):
    contract = sl.contract(data, config)
    sl.save(path, sl.initial(config.seed, data, mesh), contract)
    return contract


def test_a_larger_experiment_s_checkpoint_is_another_experiment_s(tmp_path, data, mesh):
    config = sl.Config(seed=17, batch_size=7)
    big = tmp_path / "big.npz"
    _saved(big, _large(), mesh, config)
    small = sl.contract(data, config)
    # the file is larger than the expected experiment's bound, worked out from its arrays: 4 bytes per row of
    # the order, so the size alone would refuse it
    assert big.stat().st_size > 4 * ROWS > sum(archive.member_bytes(small).values()) + 1024 * len(archive.MEMBERS)
    with pytest.raises(ContractMismatchError):
        sl.restore(big, small, mesh)


def test_a_file_of_the_same_experiment_that_is_too_large_is_corrupt(tmp_path, data, mesh):
    """The same contract, with an extra member of 200 kB: corrupt, and refused unread."""
    config = sl.Config(seed=17, batch_size=7)
    good = tmp_path / "good.npz"
    contract = _saved(good, data, mesh, config)
    grown = tmp_path / "grown.npz"
    grown.write_bytes(good.read_bytes())
    with zipfile.ZipFile(grown, "a") as handle:
        handle.writestr("padding.npy", b"\0" * 200_000)
    with pytest.raises(CorruptCheckpointError, match="bytes"):
        sl.restore(grown, contract, mesh)


def test_a_large_file_without_a_readable_contract_is_corrupt(tmp_path, data, mesh):
    """No zip, or a zip whose end record claims a huge central directory: refused for its size, nothing else."""
    contract = sl.contract(data, sl.Config(seed=17, batch_size=7))
    noise = tmp_path / "noise.npz"
    noise.write_bytes(np.random.default_rng(1).bytes(300_000))
    forged = tmp_path / "forged.npz"  # an end record whose central directory would be 1 GB
    forged.write_bytes(b"\0" * 300_000 + b"PK\x05\x06" + b"\0" * 8 + (2**30).to_bytes(4, "little") + b"\0" * 6)
    for path in (noise, forged):
        with pytest.raises(CorruptCheckpointError, match="bytes"):
            sl.restore(path, contract, mesh)
