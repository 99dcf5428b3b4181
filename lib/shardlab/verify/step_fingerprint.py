"""Per-step fingerprints: compare two runs step by step without keeping their arrays."""

import hashlib

import numpy as np


def batch_hash(data, ids) -> str:
    """sha256 of the batch's ids and the rows and targets they select (16 hex digits)."""
    ids = np.asarray(ids, np.int64)
    digest = hashlib.sha256(ids.tobytes())
    digest.update(np.ascontiguousarray(data.features[ids]).tobytes())
    digest.update(np.ascontiguousarray(data.targets[ids]).tobytes())
    return digest.hexdigest()[:16]


def weights_checksum(weights) -> str:
    """sha256 of the float32 weight bytes (16 hex digits): equal iff bit-identical."""
    return hashlib.sha256(np.asarray(weights, np.float32).tobytes()).hexdigest()[:16]


def entry(step: int, data, ids, weights, loss: float) -> dict:
    """One log line: the step it completes, the batch hash, the weight checksum, the loss."""
    return {
        "step": int(step),
        "batch": batch_hash(data, ids),
        "weights": weights_checksum(weights),
        "loss": float(loss),
    }


def first_divergence(log_a: list[dict], log_b: list[dict]) -> dict | None:
    """The first step where two logs differ, which part differs, or None if they agree."""
    for a, b in zip(log_a, log_b):
        fields = [k for k in ("step", "batch", "weights") if a[k] != b[k]]
        if fields:
            return {"step": a["step"], "fields": fields}
    if len(log_a) != len(log_b):
        shorter = min(len(log_a), len(log_b))
        return {
            "step": (log_a or log_b)[shorter]["step"] if shorter < max(len(log_a), len(log_b)) else None,
            "fields": ["length"],
        }
    return None
