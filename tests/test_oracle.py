"""The oracle's PRNG recipe in NumPy gives JAX's numbers: the keys of every split and every permutation."""

import jax
import numpy as np
import pytest

from shardlab.verify import oracle

pytestmark = pytest.mark.stage1

# 1 draws no round; up to 1,625 ids one sort; 1,626 and more two (ceil(3 ln n / ln(2^32 - 1)))
SIZES = (1, 2, 3, 7, 23, 100, 1023, 1625, 1626, 4099)
SEEDS = (0, 17, 2**31, 2**32 - 1)


def jax_epochs(seed: int, n: int, epochs: int) -> list[tuple[list, np.ndarray]]:
    """The course's idiom run by JAX itself: key, subkey = split(key); permutation(subkey, n)."""
    key, found = jax.random.PRNGKey(seed), []
    for _ in range(epochs):
        key, subkey = jax.random.split(key)
        found.append((np.asarray(key).tolist(), np.asarray(jax.random.permutation(subkey, n))))
    return found


# each seed compiles JAX's permutation at every size: one seed in the inner loop, all of them in make test
@pytest.mark.parametrize("seed", [pytest.param(s, marks=[pytest.mark.slow] * (s != 17)) for s in SEEDS])
def test_numpy_split_and_permutation_are_jax_s(seed):
    assert oracle._numpy_recipe(), "this JAX's default PRNG is not threefry with partitionable counters"
    key = jax.random.PRNGKey(seed)
    for n in SIZES:
        kept, subkey = jax.random.split(key)
        ours = oracle._split(np.asarray(key))
        assert np.asarray(kept).tolist() == ours[0].tolist() and np.asarray(subkey).tolist() == ours[1].tolist()
        want = np.asarray(jax.random.permutation(subkey, n))
        got = oracle._permutation(ours[1], n)
        assert got.tolist() == want.tolist(), f"seed {seed}, {n} ids"
        key = kept


@pytest.mark.parametrize(("seed", "n"), [(17, 23), (29, 57), (2**32 - 1, 1626)])
def test_idiom_epochs_follow_jax_over_several_epochs(seed, n):
    expected = jax_epochs(seed, n, 4)
    found = oracle.idiom_epochs(seed, n, 4)
    assert [e["key"] for e in found] == [k for k, _ in expected]
    assert [e["order"].tolist() for e in found] == [o.tolist() for _, o in expected]


def test_a_recipe_other_than_threefry_falls_back_to_jax(monkeypatch):
    monkeypatch.setattr(oracle, "_numpy_recipe", lambda: False)
    monkeypatch.setattr(oracle, "_permutation", None)  # the NumPy path would raise TypeError
    found = oracle.idiom_epochs(17, 23, 2)
    assert [e["order"].tolist() for e in found] == [o.tolist() for _, o in jax_epochs(17, 23, 2)]
