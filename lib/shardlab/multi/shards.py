"""What every controller adds to the course pipeline: agreement on the batch, and a blocking update.

The pipeline itself is the course's (`sl.initial`, `sl.next_batch`) with `put=put_shards`:
each controller holds the same host values and places only the slices its devices hold.
The update is stage 2's `make_step` on the global mesh.
"""

import hashlib

import jax

from shardlab.core.batch import Batch
from shardlab.core.schema import digests
from shardlab.core.state import updated
from shardlab.verify.step_fingerprint import batch_hash


def sampler_digest(state: dict) -> str:
    """sha256 of key, order and cursor (16 hex digits): equal on every controller or an error."""
    digest = hashlib.sha256()
    for name, value in digests(state).items():
        if name in ("key", "order", "cursor"):
            digest.update(f"{name}:{value['sha256']}".encode())
    return digest.hexdigest()[:16]


def agreement(state: dict, data, ids) -> str:
    """What controllers compare before a step: the batch hash and the sampler digest."""
    return f"{batch_hash(data, ids)}|{sampler_digest(state)}"


def apply(state: dict, batch: Batch, step) -> tuple[dict, float]:
    """Run the global update on a placed batch; return (new state, pre-update loss)."""
    weights, momentum, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    jax.block_until_ready((weights, momentum, loss))
    return updated(state, weights, momentum), float(loss)
