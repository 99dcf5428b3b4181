"""Deterministic datasets: the 23x8 teaching fixture and the 1,023x64 timing fixture."""

from typing import NamedTuple

import numpy as np

from shardlab.core.errors import DataError

TEACHING_SEED = 2024  # numpy Generator seed of the 23x8 teaching fixture
TIMING_SEED = 4096  # numpy Generator seed of the 1,023x64 timing fixture


class Dataset(NamedTuple):
    """Host copy of the data: float32 `features` (n, d) and `targets` (n,)."""

    features: np.ndarray
    targets: np.ndarray


def synthetic(rows: int, num_features: int, seed: int, noise: float = 0.1) -> Dataset:
    """A linear-regression dataset y = x . w_true + noise, drawn from numpy's PCG64."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(rows, num_features)).astype(np.float32)
    w_true = rng.normal(size=num_features).astype(np.float32)
    targets = features @ w_true + noise * rng.normal(size=rows).astype(np.float32)
    return Dataset(features, targets.astype(np.float32))


def teaching_fixture() -> Dataset:
    """23 rows x 8 features: an odd row count so batches of 7 leave a remainder of 2."""
    return synthetic(23, 8, TEACHING_SEED)


def timing_fixture() -> Dataset:
    """1,023 rows x 64 features, the stage 4 timing workload."""
    return synthetic(1023, 64, TIMING_SEED)


def check_dataset(data) -> Dataset:
    """Return `data` as a float32 Dataset, or raise DataError saying what is wrong."""
    try:
        features, targets = data
    except (TypeError, ValueError):
        raise DataError("data must be a (features, targets) pair") from None
    features = np.asarray(features)
    targets = np.asarray(targets)
    if features.ndim != 2:
        raise DataError(f"features must be 2-D (rows, features), got shape {features.shape}")
    if targets.ndim != 1:
        raise DataError(f"targets must be 1-D (rows,), got shape {targets.shape}")
    if features.shape[0] != targets.shape[0]:
        raise DataError(
            f"features have {features.shape[0]} rows but targets have {targets.shape[0]}; "
            "every row needs exactly one target"
        )
    if features.shape[0] == 0 or features.shape[1] == 0:
        raise DataError(f"the dataset is empty (features shape {features.shape})")
    for name, arr in (("features", features), ("targets", targets)):
        if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
            raise DataError(f"{name} must be real numbers, got dtype {arr.dtype}")
        if not np.all(np.isfinite(arr)):
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
            raise DataError(f"{name} hold {bad} non-finite value(s) (NaN or inf); clean the data first")
    return Dataset(features.astype(np.float32), targets.astype(np.float32))
