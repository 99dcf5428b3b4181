"""Stage 3: NPZ checkpoints round-trip, refuse everything foreign or damaged, and never overwrite."""

import hashlib
import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile

import jax
import numpy as np
import pytest
from conftest import course_run, npz_members

import shardlab as sl
from shardlab import orbax_io
from shardlab.core import checkpoint
from shardlab.errors import (
    CheckpointExistsError,
    CheckpointWriteError,
    ContractMismatchError,
    CorruptCheckpointError,
)

pytestmark = pytest.mark.stage3


def trained(data, mesh, seed=17, batch_size=7, steps=5):
    return course_run(data, mesh, seed, batch_size, steps)[0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory, data, mesh):
    """A real checkpoint after 5 steps (one batch into epoch 2) and the state it holds."""
    state = trained(data, mesh)
    contract = sl.contract(data, sl.Config(seed=17, batch_size=7))
    path = tmp_path_factory.mktemp("ckpt") / "good.npz"
    sl.save(path, state, contract)
    return path, sl.host_copy(state), contract


def fingerprint(path):
    """Bytes, size and mtime of a file plus its folder's listing."""
    stat = os.stat(path)
    listing = sorted(os.listdir(os.path.dirname(path)))
    return hashlib.sha256(open(path, "rb").read()).hexdigest(), stat.st_size, stat.st_mtime_ns, listing


def write_npz(path, arrays):
    with open(path, "xb") as handle:
        np.savez(handle, **arrays)
    return path


def test_round_trip_restores_every_field_replicated(saved, mesh):
    path, host, contract = saved
    restored = sl.restore(path, contract, mesh)
    assert set(restored) == set(sl.FIELDS)
    for name in sl.FIELDS:
        np.testing.assert_array_equal(sl.host_copy(restored)[name], host[name])
    for name in ("weights", "momentum"):
        assert restored[name].sharding.spec == sl.batch.REPLICATED
        shards = [np.asarray(s.data) for s in restored[name].addressable_shards]
        assert len(shards) == 4 and all(np.array_equal(s, host[name]) for s in shards)
    assert host["step"] == 5 and host["cursor"] == 7


def test_file_is_a_plain_npz_holding_six_fields_and_the_contract(saved):
    path, host, contract = saved
    arrays = npz_members(path)  # allow_pickle=False: would raise on any object array
    assert set(sl.FIELDS) | {"contract"} <= set(arrays)
    assert all(not arr.dtype.hasobject for arr in arrays.values())
    assert json.loads(str(arrays["contract"][()])) == contract
    assert arrays["key"].dtype == np.uint32 and arrays["key"].shape == (2,)
    assert sorted(arrays["order"].tolist()) == list(range(23))


def test_restore_does_not_share_memory_with_later_edits(saved, mesh):
    path, host, contract = saved
    first = sl.restore(path, contract, mesh)
    first["order"][0] = -1
    np.testing.assert_array_equal(sl.restore(path, contract, mesh)["order"], host["order"])


def test_contract_mismatch_names_every_field_and_calls_it_a_new_experiment(saved, mesh):
    path, _, contract = saved
    before = fingerprint(path)
    other = {**contract, "seed": 18, "batch_size": 10, "learning_rate": 0.1}
    with pytest.raises(ContractMismatchError) as info:
        sl.restore(path, other, mesh)
    message = str(info.value)
    for field in ("seed", "batch_size", "learning_rate"):
        assert f"{field}: checkpoint has" in message
    assert "decay" not in message and "new experiment" in message
    assert fingerprint(path) == before


def test_changed_batch_size_alone_is_refused(saved, data, mesh):
    path, _, _ = saved
    with pytest.raises(ContractMismatchError, match="new experiment") as info:
        sl.restore(path, sl.contract(data, sl.Config(seed=17, batch_size=8)), mesh)
    assert "batch_size: checkpoint has 7, this run has 8" in str(info.value)
    # the refusal points to the installed package's own help (a pip install ships no docs/), which resolves
    pointed = re.search(r"help\((shardlab[\w.]*)\)", str(info.value))
    assert pointed and importlib.import_module(pointed.group(1)).__doc__


def test_one_changed_data_value_is_another_experiment(saved, data, mesh):
    path, _, contract = saved
    features = data.features.copy()
    features[22, 7] = np.nextafter(features[22, 7], np.float32(np.inf))  # the smallest possible change
    with pytest.raises(ContractMismatchError, match="data_sha256"):
        sl.restore(path, sl.contract(sl.Dataset(features, data.targets), sl.Config()), mesh)


def test_contract_pins_the_device_count(saved, mesh):
    path, _, contract = saved
    with pytest.raises(ContractMismatchError, match="mesh has 2"):
        sl.restore(path, contract, sl.make_mesh(2))


DAMAGE = {
    "missing momentum": ("momentum", None, "momentum"),
    "duplicate id": ("order", lambda o: np.concatenate([o[:5], o[6:7], o[6:]]), "permutation"),
    "out-of-range id": ("order", lambda o: np.where(o == 22, 23, o).astype(np.int32), "permutation"),
    "negative id": ("order", lambda o: np.where(o == 0, -1, o).astype(np.int32), "permutation"),
    "object weights": ("weights", lambda w: np.array(list(w), dtype=object), "objects"),
    "nan weights": ("weights", lambda w: np.where(np.arange(8) == 3, np.nan, w).astype(np.float32), "non-finite"),
    "inf momentum": ("momentum", lambda m: np.full_like(m, np.inf), "non-finite"),
    "cursor past the end": ("cursor", lambda c: np.asarray(24, np.int64), "outside"),
    "negative cursor": ("cursor", lambda c: np.asarray(-1, np.int64), "outside"),
    "negative step": ("step", lambda s: np.asarray(-3, np.int64), "negative"),
    "key as int32": ("key", lambda k: k.astype(np.int32), "key should be uint32"),
    "key of shape (4,)": ("key", lambda k: np.concatenate([k, k]), "key should be uint32"),
    "float weights of wrong width": ("weights", lambda w: w[:7], "weights should be"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_checkpoint_is_refused_untouched(case, saved, tmp_path, mesh):
    path, _, contract = saved
    field, change, words = DAMAGE[case]
    arrays = npz_members(path)
    if change is None:
        del arrays[field]
    else:
        arrays[field] = change(arrays[field])
    bad = write_npz(tmp_path / "bad.npz", arrays)
    before, original = fingerprint(bad), fingerprint(path)
    with pytest.raises(CorruptCheckpointError, match=words):
        sl.restore(bad, contract, mesh)
    assert fingerprint(bad) == before and fingerprint(path) == original


def test_truncated_and_non_npz_files_are_refused(saved, tmp_path, mesh):
    path, _, contract = saved
    raw = open(path, "rb").read()
    for name, content in (("half.npz", raw[: len(raw) // 2]), ("text.npz", b"not a checkpoint\n"), ("empty.npz", b"")):
        bad = tmp_path / name
        bad.write_bytes(content)
        before = fingerprint(bad)
        with pytest.raises(CorruptCheckpointError, match="not an NPZ"):
            sl.restore(bad, contract, mesh)
        assert fingerprint(bad) == before


def test_extra_member_and_corrupt_member_are_refused(saved, tmp_path, mesh):
    path, _, contract = saved
    extra = write_npz(tmp_path / "extra.npz", {**npz_members(path), "notes": np.zeros(3)})
    with pytest.raises(CorruptCheckpointError, match="unexpected"):
        sl.restore(extra, contract, mesh)
    broken = tmp_path / "broken.npz"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"garbage" if info.filename == "order.npy" else data)
    with pytest.raises(CorruptCheckpointError, match="order"):
        sl.restore(broken, contract, mesh)


def test_existing_path_is_never_overwritten(saved, data, mesh):
    path, _, contract = saved
    before = fingerprint(path)
    other = trained(data, mesh, steps=2)
    with pytest.raises(CheckpointExistsError, match="never overwritten"):
        sl.save(path, other, contract)
    assert fingerprint(path) == before  # bytes, mtime and no temporary file left behind


def test_save_refuses_a_state_restore_would_refuse(data, mesh, tmp_path):
    state = trained(data, mesh, steps=1)
    contract = sl.contract(data, sl.Config())
    bad = {**state, "weights": np.full(8, np.nan, np.float32)}
    with pytest.raises(CorruptCheckpointError, match="non-finite"):
        sl.save(tmp_path / "x.npz", bad, contract)
    with pytest.raises(CorruptCheckpointError, match="lacks field"):
        sl.save(tmp_path / "x.npz", {k: v for k, v in state.items() if k != "momentum"}, contract)
    assert os.listdir(tmp_path) == []


RACER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from shardlab.checker import interrupt
    from shardlab.core import checkpoint
    from shardlab.errors import CheckpointExistsError
    from shardlab.core.sampler import sampler_at

    folder, target, index, racers, contract = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    import json
    contract = json.loads(contract)

    def gate(operation, *_):
        # every racer holds here, after its own exists-check and fsync, until all arrive: the link decides
        if operation != "link":
            return
        open(os.path.join(folder, f"ready-{index}"), "w").close()
        deadline = time.monotonic() + 120
        while sum(n.startswith("ready-") for n in os.listdir(folder)) < racers:
            if time.monotonic() > deadline:
                sys.exit(4)
            time.sleep(0.005)

    interrupt.instrument(gate)
    # a state a run reaches at step `index` (restore refuses sampler fields the step does not imply)
    sampler = sampler_at(17, 23, 7, index)
    state = {"weights": np.full(8, index, np.float32), "momentum": np.zeros(8, np.float32), **sampler, "step": index}
    try:
        checkpoint.save(target, state, contract)
    except CheckpointExistsError:
        sys.exit(3)
    sys.exit(0)
    """
)


@pytest.mark.long  # four racing interpreters: make test-long's
def test_racing_savers_exactly_one_wins(tmp_path, data, mesh):
    racers = 4
    contract = sl.contract(data, sl.Config())
    target = tmp_path / "ckpt" / "race.npz"
    target.parent.mkdir()
    gates = tmp_path / "gates"
    gates.mkdir()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(gates), str(target), str(i + 1), str(racers), json.dumps(contract)],
            env=env,
            stderr=subprocess.PIPE,
        )
        for i in range(racers)
    ]
    codes = [p.wait(timeout=300) for p in procs]
    errors = [p.stderr.read().decode()[-500:] for p in procs]
    assert sorted(codes) == [0] + [3] * (racers - 1), (codes, errors)
    assert len(os.listdir(gates)) == racers  # every racer passed the exists-check before anyone linked
    winner = codes.index(0) + 1
    restored = sl.host_copy(sl.restore(target, contract, mesh))
    np.testing.assert_array_equal(restored["weights"], np.full(8, winner, np.float32))
    assert restored["step"] == winner and restored["cursor"] == min(7 * winner, 23)  # arithmetic of 23 rows in 7s
    assert os.listdir(target.parent) == ["race.npz"]  # no temporary file survived


def test_orbax_round_trip_onto_a_mesh_target(data, mesh, tmp_path):
    state = trained(data, mesh, seed=29, batch_size=10, steps=4)
    contract = sl.contract(data, sl.Config(seed=29, batch_size=10))
    path = orbax_io.save(tmp_path / "orbax", state, contract)
    with pytest.raises(CheckpointExistsError):
        orbax_io.save(path, state, contract)
    restored = orbax_io.restore(path, contract, mesh)
    host = sl.host_copy(state)
    for name in sl.FIELDS:
        got = np.asarray(restored[name])
        assert got.dtype == np.asarray(host[name]).dtype and got.shape == np.shape(host[name]), name
        np.testing.assert_array_equal(got, host[name])
    for name in ("weights", "momentum"):
        assert restored[name].sharding.spec == sl.batch.REPLICATED
        assert restored[name].sharding.mesh.shape == mesh.shape
        assert len(restored[name].addressable_shards) == 4
    # a restored Orbax state continues exactly like the live one
    step = sl.make_step(mesh)
    a, loss_a, ids_a = sl.transition(state, data, 10, step, mesh)
    b, loss_b, ids_b = sl.transition(restored, data, 10, step, mesh)
    assert loss_a == loss_b and np.array_equal(ids_a, ids_b)
    np.testing.assert_array_equal(np.asarray(a["weights"]), np.asarray(b["weights"]))


def test_orbax_restore_uses_the_target_it_is_handed_and_refuses_one_of_other_shapes(data, mesh, tmp_path):
    """A caller's target decides the placement (here cut along 'data', not the default copy per device); a target
    whose leaf has another shape is refused with our own error before Orbax reads anything."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardlab.errors import UsageError

    state = trained(data, mesh, seed=17, batch_size=7, steps=3)
    contract = sl.contract(data, sl.Config(seed=17, batch_size=7))
    path = orbax_io.save(tmp_path / "orbax", state, contract)
    onto = orbax_io.target(state, mesh)
    cut = NamedSharding(mesh, P("data"))
    onto["weights"] = jax.ShapeDtypeStruct(onto["weights"].shape, onto["weights"].dtype, sharding=cut)
    restored = orbax_io.restore(path, contract, mesh, onto=onto)
    assert restored["weights"].sharding.spec == P("data") and restored["momentum"].sharding.spec == P()
    assert [s.data.shape for s in restored["weights"].addressable_shards] == [(2,)] * 4  # 8 values over 4 devices
    np.testing.assert_array_equal(np.asarray(restored["weights"]), np.asarray(state["weights"]))
    wide = {**onto, "weights": jax.ShapeDtypeStruct((9,), np.float32, sharding=cut)}
    with pytest.raises(UsageError, match=r"target's weights is float32\(9,\), the checkpoint holds float32\(8,\)"):
        orbax_io.restore(path, contract, mesh, onto=wide)
    with pytest.raises(UsageError, match="the restore target has fields"):
        orbax_io.restore(path, contract, mesh, onto={k: v for k, v in onto.items() if k != "key"})


def test_each_cursor_case_is_refused_by_the_check_its_label_names(data, mesh, tmp_path):
    """An edited cursor trips the checksum; the same edit with the checksum recomputed trips the sampler check."""
    from rig.torture.corrupt import BEYOND_COURSE
    from shardlab.verify import faults

    state = trained(data, mesh, seed=17, batch_size=7, steps=5)
    contract = sl.contract(data, sl.Config(seed=17, batch_size=7))
    path = sl.save(tmp_path / "c.npz", state, contract)
    for case, words in (
        ("cursor edited after saving", "integrity checksum"),
        ("cursor the step does not imply", "imply"),
    ):
        copy = faults.tampered(path, tmp_path / f"{case.replace(' ', '_')}.npz", BEYOND_COURSE[case])
        with np.load(copy) as npz:
            assert int(npz["cursor"]) == int(state["cursor"]) - 1
            resealed = str(npz["integrity"][()]) == checkpoint.integrity({k: npz[k] for k in npz.files})
        assert resealed == (case == "cursor the step does not imply")
        with pytest.raises(sl.errors.CorruptCheckpointError, match=words):
            sl.restore(copy, contract, mesh)


@pytest.mark.parametrize("failing", ["link", "fsync"])
def test_a_failed_publish_removes_the_folders_the_save_made(saved, tmp_path, monkeypatch, failing):
    _, state, contract = saved
    (tmp_path / "kept").mkdir()
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(CheckpointWriteError, match="nothing was published"):
        sl.save(tmp_path / "a" / "b" / "ck.npz", state, contract)
    with pytest.raises(CheckpointWriteError, match="nothing was published"):
        sl.save(tmp_path / "kept" / "c" / "ck.npz", state, contract)
    monkeypatch.undo()
    assert not (tmp_path / "a").exists()
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before == ["kept"]
    assert sl.save(tmp_path / "a" / "b" / "ck.npz", state, contract)  # the same path saves once the fault is gone


def test_digests_keep_each_field_s_own_shape_and_hash_its_bytes():
    """A manifest's record of a field: its shape as saved (a scalar's is ()), its dtype and the SHA-256 of its bytes."""
    from shardlab.core import schema

    state = {
        "weights": np.arange(3, dtype=np.float32),
        "momentum": np.zeros(3, np.float32),
        "key": np.array([0, 7], np.uint32),
        "order": np.array([2, 0, 1], np.int32),
        "cursor": 2,
        "step": np.int64(5),
    }
    found = schema.digests(state)
    assert found["cursor"]["shape"] == [] and found["step"]["shape"] == []
    assert found["weights"]["shape"] == [3] and found["key"]["shape"] == [2]
    for name, value in schema.to_arrays(state).items():  # the digest is of the bytes a reader gets back
        assert found[name]["sha256"] == hashlib.sha256(np.asarray(value).tobytes()).hexdigest(), name
        assert found[name]["dtype"] == np.asarray(value).dtype.str
