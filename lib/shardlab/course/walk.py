"""Stage 1's walk of the sampler: one record per batch, and its check against arithmetic and the JAX idiom."""

import numpy as np

from shardlab.core.sampler import epoch_batches
from shardlab.verify import oracle


def walk(impl, seed, data, batch_size, batches, mesh) -> list[dict]:
    """Draw `batches` batches from `impl.initial`; per batch: ids, size, valid rows per device, key, cursor, step.

    The valid rows are read from the placed mask's shards (not computed), and every call
    must leave the caller's state exactly as it was.
    """
    state, records = impl.initial(seed, data, mesh), []
    for _ in range(batches):
        snapshot = {name: np.array(value) for name, value in state.items()}
        new_state, batch = impl.next_batch(state, data, batch_size, mesh)
        for name, value in snapshot.items():
            np.testing.assert_array_equal(np.asarray(state[name]), value, err_msg=f"next_batch changed {name}")
        shards = sorted(batch.mask.addressable_shards, key=lambda s: s.index[0].start or 0)
        records.append(
            {
                "ids": np.asarray(batch.ids).tolist(),
                "size": len(batch.ids),
                "device_counts": [int(np.asarray(s.data).sum()) for s in shards],
                "key": np.asarray(new_state["key"]).tolist(),
                "cursor": int(new_state["cursor"]),
                "step": int(new_state["step"]),
            }
        )
        state = new_state
    return records


def check_walk(records, seed, num_examples, batch_size, num_devices) -> list[bool]:
    """Raise AssertionError unless the walk covers every epoch, pads as arithmetic says and replays the idiom.

    Returns the per-epoch coverage flags (every ID exactly once).
    """
    per_epoch = epoch_batches(num_examples, batch_size)
    epochs = len(records) // len(per_epoch)
    assert [r["size"] for r in records] == per_epoch * epochs, "batch lengths"
    for r in records:
        assert r["device_counts"] == oracle.device_counts(r["size"], num_devices), f"padding of {r['size']} rows"
        assert r["step"] == 0, "next_batch must not change step"
    coverage = oracle.epoch_coverage([r["ids"] for r in records], num_examples, batch_size)
    assert all(coverage), f"epoch coverage {coverage}"
    expected = oracle.idiom_epochs(seed, num_examples, epochs + 1)
    ids = np.concatenate([r["ids"] for r in records])
    np.testing.assert_array_equal(
        ids, np.concatenate([e["order"] for e in expected[:epochs]]), err_msg="ids vs the idiom"
    )
    keys = [r["key"] for r in records]
    n = len(per_epoch)
    lazy = [expected[i // n]["key"] for i in range(len(records))]  # the next epoch drawn when the next call needs it
    eager = [expected[(i + 1) // n]["key"] for i in range(len(records))]  # drawn as soon as the epoch is used up
    assert keys in (lazy, eager), "saved keys vs the idiom: the key changes only where a new permutation is drawn"
    return coverage
