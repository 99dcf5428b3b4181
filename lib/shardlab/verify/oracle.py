"""Independent answers the notebooks check against: NumPy formulas, coverage arithmetic, refusals.

Nothing here advances a sampler, pads a batch or runs the sharded update, and nothing imports
the reference implementation (`shardlab.core` beyond the course's two constants): the checker's
expected values must not come from the code they judge. Sums are taken in float64 on the host,
written straight from the course formulas with r_i = x_i.w - y_i:
N = sum m_i, L = sum m_i r_i^2 / N, grad L = 2 sum m_i x_i r_i / N.
"""

import jax
import numpy as np

from shardlab.core.config import DECAY, LEARNING_RATE


def epoch_batches(rows: int, batch_size: int) -> list[int]:
    """Batch lengths of one epoch: full batches, then the remainder (23 rows in 7s -> [7, 7, 7, 2])."""
    lengths, left = [], int(rows)
    while left > 0:
        lengths.append(min(batch_size, left))
        left -= lengths[-1]
    return lengths


def padded_length(rows: int, num_devices: int) -> int:
    """Slots of a batch of `rows` rows: the smallest multiple of the device count that holds them."""
    slots = num_devices
    while slots < rows:
        slots += num_devices
    return slots


def _float64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


def masked_sums(features, targets, mask, weights) -> tuple[float, np.ndarray, float]:
    """(N, gradient numerator, loss numerator) over rows with mask > 0; other rows are skipped."""
    features, targets, weights = _float64(features, targets, weights)
    keep = np.asarray(mask) > 0
    x, y = features[keep], targets[keep]
    r = x @ weights - y
    return float(keep.sum()), 2.0 * x.T @ r, float(r @ r)


def masked_mean(features, targets, mask, weights) -> tuple[float, np.ndarray]:
    """(loss, gradient) of the global masked mean: both numerators divided once by N."""
    count, grad_num, loss_num = masked_sums(features, targets, mask, weights)
    return loss_num / count, grad_num / count


def momentum_step(features, targets, mask, weights, momentum, learning_rate=LEARNING_RATE, decay=DECAY):
    """(weights, momentum, pre-update loss, gradient) after v <- decay*v + g, w <- w - lr*v."""
    loss, grad = masked_mean(features, targets, mask, weights)
    momentum = decay * np.asarray(momentum, np.float64) + grad
    return np.asarray(weights, np.float64) - learning_rate * momentum, momentum, loss, grad


def device_sums(features, targets, mask, weights, num_devices: int) -> dict:
    """Per-device (counts, grad_nums, loss_nums): the padded slots cut into equal contiguous blocks."""
    blocks = zip(*(np.split(np.asarray(a), num_devices) for a in (features, targets, mask)))
    sums = [masked_sums(x, y, m, weights) for x, y, m in blocks]
    return {
        "counts": np.array([s[0] for s in sums]),
        "grad_nums": np.stack([s[1] for s in sums]),
        "loss_nums": np.array([s[2] for s in sums]),
    }


def rebuild(parts: dict) -> tuple[float, np.ndarray]:
    """(loss, gradient) from per-partition pieces: add the numerators and counts, divide once."""
    count = parts["counts"].sum()
    return parts["loss_nums"].sum() / count, parts["grad_nums"].sum(axis=0) / count


def local_means(parts: dict) -> np.ndarray:
    """Each partition's own mean gradient (NaN rows where a partition holds no observation)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return parts["grad_nums"] / parts["counts"][:, None]


def device_counts(rows: int, num_devices: int) -> list[int]:
    """Valid rows per device when `rows` rows fill slots in order, padded to a device multiple."""
    per_device = -(-rows // num_devices)
    return [min(per_device, max(0, rows - d * per_device)) for d in range(num_devices)]


def epoch_coverage(id_batches, num_examples: int, batch_size: int) -> list[bool]:
    """Per epoch: do that epoch's batches hold every id in range(num_examples) exactly once?"""
    per_epoch = len(epoch_batches(num_examples, batch_size))
    epochs = [id_batches[i : i + per_epoch] for i in range(0, len(id_batches), per_epoch)]
    return [sorted(np.concatenate(e).tolist()) == list(range(num_examples)) for e in epochs]


# Threefry-2x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): 20 rounds, these
# rotations, a key schedule with this parity constant, a key injection every four rounds.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def _threefry(key, high, low) -> tuple[np.ndarray, np.ndarray]:
    """The Threefry-2x32 block of the 64-bit counters (high, low) under `key`, in NumPy's wrapping uint32."""
    k0, k1 = (np.uint32(k) for k in np.asarray(key, np.uint32))
    schedule = (k0, k1, k0 ^ k1 ^ np.uint32(_PARITY))
    x0 = np.asarray(high, np.uint32) + schedule[0]
    x1 = np.asarray(low, np.uint32) + schedule[1]
    for block in range(5):
        for rotation in _ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = ((x1 << np.uint32(rotation)) | (x1 >> np.uint32(32 - rotation))) ^ x0
        x0 = x0 + schedule[(block + 1) % 3]
        x1 = x1 + schedule[(block + 2) % 3] + np.uint32(block + 1)
    return x0, x1


def _split(key) -> tuple[np.ndarray, np.ndarray]:
    """`jax.random.split(key)` of a threefry key with partitionable counters: the blocks of counters 0 and 1."""
    x0, x1 = _threefry(key, np.zeros(2, np.uint32), np.arange(2, dtype=np.uint32))
    return np.array([x0[0], x1[0]], np.uint32), np.array([x0[1], x1[1]], np.uint32)


def _permutation(key, n: int) -> np.ndarray:
    """`jax.random.permutation(key, n)`: stable sorts of arange(n) by fresh 32-bit draws, ceil(3 ln n / ln(2^32-1))
    rounds, each round's draws the two words of counter i xored (no compiled program, so no compile per n)."""
    order = np.arange(n, dtype=np.int32)
    for _ in range(int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))):
        key, subkey = _split(key)
        x0, x1 = _threefry(subkey, np.zeros(n, np.uint32), np.arange(n, dtype=np.uint32))
        order = order[np.argsort(x0 ^ x1, kind="stable")]
    return order


def _numpy_recipe() -> bool:
    """True where JAX's default PRNG is the one `_permutation` follows (threefry, partitionable counters)."""
    return jax.config.jax_default_prng_impl == "threefry2x32" and bool(jax.config.jax_threefry_partitionable)


def idiom_epochs(seed: int, num_examples: int, epochs: int) -> list[dict]:
    """Each epoch's saved key and order from the course idiom: key, subkey = split(key); permutation(subkey, n).

    The split and the permutation are computed in NumPy from Threefry's definition (the same numbers as
    JAX's, `tests/test_oracle.py` compares them) where JAX's PRNG is that one; else with JAX's own functions.
    """
    key, found = np.asarray(jax.random.PRNGKey(seed), np.uint32), []
    numpy_recipe = _numpy_recipe()
    for _ in range(epochs):
        if numpy_recipe:
            key, subkey = _split(key)
            order = _permutation(subkey, num_examples)
        else:
            key, subkey = jax.random.split(key)
            order = np.asarray(jax.random.permutation(subkey, num_examples))
        found.append({"key": np.asarray(key, np.uint32).tolist(), "order": order})
    return found


def sampler_after(seed: int, rows: int, batch_size: int, step: int) -> dict:
    """Key, order and cursor (the lazy form) after `step` transitions: the epochs begun are counted, the key split
    that many times and only the last epoch's order drawn, so a step in the millions costs one permutation."""
    per_epoch = len(epoch_batches(rows, batch_size))
    epochs = 1 if step == 0 else (step - 1) // per_epoch + 1
    cursor = 0 if step == 0 else min(((step - 1) % per_epoch + 1) * batch_size, rows)
    key = np.asarray(jax.random.PRNGKey(seed), np.uint32)
    for _ in range(epochs):
        key, subkey = _split(key) if _numpy_recipe() else (np.asarray(k, np.uint32) for k in jax.random.split(key))
    order = _permutation(subkey, rows) if _numpy_recipe() else np.asarray(jax.random.permutation(subkey, rows))
    return {"key": np.asarray(key, np.uint32), "order": order, "cursor": cursor}


def walk(rows: int, seed: int, batch_size: int, calls: int) -> list[dict]:
    """Per next_batch call: the ids, whether it starts an epoch, and the sampler fields after it.

    `after` is the lazy form (the cursor stays at `rows` until the next call draws the new epoch);
    `eager` (at an epoch's last call only) is the equally correct form that draws it at once.
    """
    lengths = epoch_batches(rows, batch_size)
    epochs = idiom_epochs(seed, rows, calls // len(lengths) + 2)
    found = []
    for call in range(calls):
        epoch, index = divmod(call, len(lengths))
        start = sum(lengths[:index])
        end = start + lengths[index]
        here, following = epochs[epoch], epochs[epoch + 1]
        last = index == len(lengths) - 1
        found.append(
            {
                "epoch": epoch,
                "ids": np.asarray(here["order"][start:end]),
                "after": {"cursor": end, "key": np.asarray(here["key"]), "order": np.asarray(here["order"])},
                "eager": {"cursor": 0, "key": np.asarray(following["key"]), "order": following["order"]}
                if last
                else None,
                "new_epoch": index == 0 and epoch > 0,
            }
        )
    return found


def finite(*arrays) -> bool:
    """True if every element of every array is a finite number."""
    return all(bool(np.all(np.isfinite(np.asarray(a, np.float64)))) for a in arrays)
