"""Restore and save under hostile input: every failure is a named shardlab error, in bounded time and memory."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc

import numpy as np
import pytest
from conftest import npz_members
from hypothesis import given, settings
from hypothesis import strategies as st

import shardlab as sl
from rig.torture.edges import CONTRACT_TEXTS, MALFORMED_CONTRACTS, MANIFEST_BODIES, bomb, forged, silent_values
from shardlab import orbax_io
from shardlab.core import checkpoint
from shardlab.errors import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointWriteError,
    ContractMismatchError,
    CorruptCheckpointError,
    IncompleteCheckpointError,
)
from shardlab.multi import manifest

pytestmark = pytest.mark.stage3
ROWS, BATCH = 23, 7
# Tells a call that returns from one that waits. What these tests guard against waits without end (a FIFO
# opened for reading, a zip bomb inflated) or for Orbax's 300 s barrier; a call that returns does so in well
# under a second on a quiet machine and stays far below this on a loaded one. It measures no speed: the
# refusals' costs are asserted as memory and as what is left behind.
RETURNS = 60


@pytest.fixture(scope="module")
def run(data, mesh):
    """The states after steps 0..9 of seed 17, batch 7, and their contract."""
    step = sl.make_step(mesh)
    states = [sl.initial(17, data, mesh)]
    for _ in range(9):
        states.append(sl.transition(states[-1], data, BATCH, step, mesh)[0])
    return [sl.host_copy(s) for s in states], sl.contract(data, sl.Config(seed=17, batch_size=BATCH))


def peak_bytes(call):
    """(exception or None, peak traced bytes) of `call()`."""
    tracemalloc.start()
    try:
        call()
    except Exception as exc:
        error = exc
    else:
        error = None
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return error, peak


def test_declared_sizes_are_refused_before_decompressing(run, tmp_path, mesh):
    states, contract = run
    good = sl.save(tmp_path / "good.npz", states[5], contract)
    members = npz_members(good)
    cases = {"in_size": 1 << 22, "over_size": 1 << 24}  # 16 MB and 64 MB of float32 zeros per deflated member
    legit_error, legit_peak = peak_bytes(lambda: sl.restore(good, contract, mesh))
    assert legit_error is None
    for label, values in cases.items():
        path = tmp_path / f"bomb-{label}.npz"
        bomb(path, members, values, big={"weights", "momentum"})
        started = time.perf_counter()
        error, peak = peak_bytes(lambda p=path: sl.restore(p, contract, mesh))
        seconds = time.perf_counter() - started
        assert isinstance(error, CorruptCheckpointError), error
        words = "member 'momentum' declares" if label == "in_size" else "a checkpoint of this contract has at most"
        assert words in str(error), str(error)  # the zip directory alone refuses it, nothing is inflated
        # two members of 16/128 MB each were *declared*; the refusal costs about the file, never the declaration
        assert peak < legit_peak + os.path.getsize(path) + (1 << 20), (label, peak, legit_peak)
        assert seconds < RETURNS, seconds


def test_a_deeply_nested_contract_is_a_named_refusal(run, tmp_path, mesh):
    states, contract = run
    for depth in (100_000, 3_000):
        members = npz_members(sl.save(tmp_path / f"ok-{depth}.npz", states[5], contract))
        members["contract"] = np.asarray("[" * depth + "]" * depth)
        path = tmp_path / f"nested-{depth}.npz"
        np.savez(path, **members)
        with pytest.raises(CorruptCheckpointError, match="contract"):
            sl.restore(path, contract, mesh)


@pytest.mark.parametrize("text", CONTRACT_TEXTS)
def test_a_saved_contract_of_any_json_shape_is_refused(run, tmp_path, mesh, text):
    states, contract = run
    members = npz_members(sl.save(tmp_path / "ok.npz", states[5], contract))
    members["contract"] = np.asarray(text)
    np.savez(tmp_path / "bad.npz", **members)
    with pytest.raises(CorruptCheckpointError, match="contract"):
        sl.restore(tmp_path / "bad.npz", contract, mesh)


def test_big_endian_weights_are_named_as_such(run, tmp_path, mesh):
    states, contract = run
    members = npz_members(sl.save(tmp_path / "ok.npz", states[5], contract))
    members["weights"] = members["weights"].astype(">f4")
    np.savez(tmp_path / "be.npz", **members)
    with pytest.raises(CorruptCheckpointError) as info:
        sl.restore(tmp_path / "be.npz", contract, mesh)
    assert "big-endian" in str(info.value) and "should be float32(8,)" in str(info.value), str(info.value)


def test_prepended_bytes_are_not_called_pickled_data(run, tmp_path, mesh):
    states, contract = run
    raw = open(sl.save(tmp_path / "ok.npz", states[5], contract), "rb").read()
    (tmp_path / "prefixed.npz").write_bytes(b"#!junk\n" + raw)
    with pytest.raises(CorruptCheckpointError, match=r"a zip starts 7 bytes in \(bytes were prepended\)") as info:
        sl.restore(tmp_path / "prefixed.npz", contract, mesh)
    assert "pickle" not in str(info.value)


def test_a_fifo_or_folder_is_refused_without_blocking(run, tmp_path, mesh):
    _, contract = run
    os.mkfifo(tmp_path / "fifo.npz")
    (tmp_path / "folder.npz").mkdir()
    for name in ("fifo.npz", "folder.npz"):
        started = time.perf_counter()
        with pytest.raises(CorruptCheckpointError, match="not a regular file"):
            sl.restore(tmp_path / name, contract, mesh)
        assert time.perf_counter() - started < RETURNS


def test_states_no_run_reaches_are_refused_even_with_the_checksum_recomputed(run, tmp_path, mesh, data):
    states, contract = run
    other_seed = sl.host_copy(sl.initial(18, data, mesh))
    cases = {
        "step 2**63-1": dict(step=2**63 - 1),
        "step 0 with cursor 7": dict(step=0, cursor=7),
        "cursor 3 with batch 7": dict(cursor=3),
        "identity order": dict(order=np.arange(ROWS)),
        "another seed's key": dict(key=other_seed["key"]),
        "another step's order": dict(order=states[1]["order"]),
        "another step's cursor": dict(cursor=states[4]["cursor"]),
    }
    for label, fields in cases.items():
        path = forged(tmp_path / f"{label.replace(' ', '_')}.npz", states[6], contract, **fields)
        assert npz_members(path)["integrity"] == checkpoint.integrity(npz_members(path)), label  # the checksum matches
        with pytest.raises(CorruptCheckpointError, match="no run") as info:
            sl.restore(path, contract, mesh)
        assert "forged or mixed" in str(info.value) or "epochs" in str(info.value), (label, str(info.value))
    for k, state in enumerate(states):  # and every state a run does reach is accepted
        restored = sl.host_copy(sl.restore(sl.save(tmp_path / f"real-{k}.npz", state, contract), contract, mesh))
        expected_cursor = 0 if k == 0 else min(((k - 1) % 4 + 1) * BATCH, ROWS)  # 23 rows in 7s: 4 batches/epoch
        assert restored["cursor"] == expected_cursor and restored["step"] == k


SILENT = silent_values(ROWS)


@pytest.mark.parametrize("case", sorted(SILENT))
def test_save_refuses_what_it_would_silently_change(case, run, tmp_path):
    states, contract = run
    with pytest.raises(CorruptCheckpointError):
        sl.save(tmp_path / "x.npz", {**states[5], **SILENT[case]}, contract)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", sorted(MALFORMED_CONTRACTS))
def test_save_and_restore_refuse_a_malformed_contract(name, run, tmp_path, mesh):
    states, contract = run
    bad = MALFORMED_CONTRACTS[name](contract)
    with pytest.raises(CorruptCheckpointError, match="contract"):
        sl.save(tmp_path / "x.npz", states[5], bad)
    good = sl.save(tmp_path / "good.npz", states[5], contract)
    with pytest.raises(CorruptCheckpointError, match="contract"):
        sl.restore(good, bad, mesh)


def test_a_parent_that_is_a_file_is_not_called_an_existing_checkpoint(run, tmp_path):
    states, contract = run
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointWriteError, match="cannot write a checkpoint into") as info:
        sl.save(tmp_path / "file" / "x.npz", states[5], contract)
    assert not isinstance(info.value, (CheckpointExistsError, FileExistsError))
    assert (tmp_path / "file").read_text() == "x"


def test_stale_temporaries_of_dead_savers_go_and_published_files_stay(run, tmp_path, mesh):
    states, contract = run
    published = sl.save(tmp_path / "published.npz", states[5], contract)
    before = open(published, "rb").read()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = [tmp_path / f".tmp-{dead.pid}-{n}.npz" for n in ("complete", "empty", "partial", "link")]
    stale[0].write_bytes(before)
    stale[1].write_bytes(b"")
    stale[2].write_bytes(before[:100])
    os.link(published, stale[3])  # killed between the link and the unlink
    live = tmp_path / f".tmp-{os.getpid()}-live.npz"  # a saver that is still running
    live.write_bytes(b"")
    other = tmp_path / ".tmp-notes.npz"  # not our naming (no pid): never touched
    other.write_bytes(b"mine")
    sl.save(tmp_path / "next.npz", states[6], contract)
    assert sorted(os.listdir(tmp_path)) == sorted(["published.npz", "next.npz", live.name, other.name])
    assert open(published, "rb").read() == before and os.stat(published).st_nlink == 1
    assert checkpoint.remove_stale(tmp_path) == [] and sl.host_copy(sl.restore(published, contract, mesh))["step"] == 5


def test_manifests_of_any_json_shape_or_file_type_are_refused_by_name(tmp_path):
    shared = tmp_path / "shared"
    os.makedirs(manifest.step_dir(shared, 3))
    open(os.path.join(manifest.step_dir(shared, 3), "piece"), "w").write("x")
    path = manifest.manifest_path(shared, 3)
    os.makedirs(os.path.dirname(path))
    for body in MANIFEST_BODIES:
        with open(path, "w", encoding="latin-1") as handle:
            handle.write(body)
        with pytest.raises(CorruptCheckpointError):
            manifest.read(shared, 3)
        assert manifest.scan(shared)["complete"] == [] and "3" in manifest.scan(shared)["ignored"]
    os.unlink(path)
    os.mkfifo(path)
    started = time.perf_counter()
    assert "3" in manifest.scan(shared)["ignored"] and time.perf_counter() - started < RETURNS
    with pytest.raises(IncompleteCheckpointError):
        manifest.newest_complete(shared)


ORBAX_CHILD = textwrap.dedent(
    """
    import json, os, resource, signal, sys, time
    import shardlab as sl
    sl.setup_devices(4)
    from shardlab import orbax_io
    from shardlab.errors import CheckpointWriteError
    mesh, data = sl.make_mesh(), sl.teaching_fixture()
    state, contract = sl.initial(17, data, mesh), sl.contract(data, sl.Config())
    if sys.argv[2] == "full":  # writes beyond 300 bytes fail with EFBIG, as on a full file system
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (300, 300))
    started = time.perf_counter()
    try:
        orbax_io.save(sys.argv[1], state, contract)
    except CheckpointWriteError as exc:
        print(json.dumps({"error": str(exc)[:200], "seconds": time.perf_counter() - started}), flush=True)
    """
)


def test_an_orbax_save_under_a_file_fails_at_once_and_starts_no_thread(run, tmp_path):
    import threading

    states, contract = run
    (tmp_path / "file").write_text("x")
    before = set(threading.enumerate())
    started = time.perf_counter()
    with pytest.raises(CheckpointWriteError, match="cannot write an Orbax checkpoint into"):
        orbax_io.save(tmp_path / "file" / "ckpt", states[5], contract)
    assert time.perf_counter() - started < RETURNS and set(threading.enumerate()) <= before  # nothing left to wait for
    assert sorted(os.listdir(tmp_path)) == ["file"]


@pytest.mark.slow  # a fresh interpreter importing Orbax, judged against a bound in seconds
@pytest.mark.parametrize("kind", ["full"])
def test_a_failing_orbax_save_is_fast_named_and_leaves_nothing(tmp_path, kind):
    (tmp_path / "file").write_text("x")
    target = tmp_path / ("file/ckpt" if kind == "parent_is_file" else "ckpt")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", ORBAX_CHILD, str(target), "full" if kind == "full" else "-"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    wall = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    assert json.loads(lines[0])["seconds"] < RETURNS
    assert wall < 2 * RETURNS, wall  # the process exits: no 300 s wait for an Orbax barrier
    assert sorted(os.listdir(tmp_path)) == ["file"]  # no *.orbax-checkpoint-tmp, no staging folder


def test_orbax_restore_checks_the_contract_first(run, tmp_path, mesh, data):
    states, contract = run
    path = orbax_io.save(tmp_path / "orbax", states[5], contract)
    other = sl.contract(data, sl.Config(seed=29, batch_size=10))
    with pytest.raises(ContractMismatchError, match="batch_size"):
        orbax_io.restore(path, other, mesh)
    restored = orbax_io.restore(path, contract, mesh)
    assert all(np.array_equal(np.asarray(restored[n]), states[5][n]) for n in sl.FIELDS)
    contract_file = os.path.join(path, orbax_io.CONTRACT)
    for body in (b"{not json", b"\xff\xfe", b"[1]", b'{"contract": {}, "state": {}}'):
        os.chmod(contract_file, 0o644)
        with open(contract_file, "wb") as handle:
            handle.write(body)
        with pytest.raises(CorruptCheckpointError, match="shardlab.json"):
            orbax_io.restore(path, contract, mesh)
    os.unlink(contract_file)
    with pytest.raises(CorruptCheckpointError, match="without its contract"):
        orbax_io.restore(path, contract, mesh)


def test_damaged_orbax_metadata_is_a_named_refusal(run, tmp_path, mesh):
    states, contract = run
    path = orbax_io.save(tmp_path / "orbax", states[5], contract)
    damaged = 0
    for root, _, names in os.walk(os.path.join(path, orbax_io.STATE)):
        for name in names:
            if "metadata" in name.lower():
                with open(os.path.join(root, name), "wb") as handle:
                    handle.write(b"\xff\xfe{ damaged")
                damaged += 1
    assert damaged
    with pytest.raises(CheckpointError, match=str(path)):
        orbax_io.restore(path, contract, mesh)


@pytest.mark.slow  # processes killed in a loop: make test's, not the inner loop's
def test_a_kill_loop_ends_with_at_most_one_temporary(run, tmp_path):
    states, contract = run
    code = textwrap.dedent(
        """
        import sys, numpy as np, json
        from shardlab.checker import interrupt
        from shardlab.core import checkpoint
        state = {k: np.asarray(v) for k, v in json.loads(sys.argv[2]).items()}
        state["cursor"], state["step"] = int(state["cursor"]), int(state["step"])
        # written, not yet fsynced: hold there (the parent kills the saver)
        hold = lambda op, *_: op == "fsync" and (print("written", flush=True) or __import__("time").sleep(60))
        interrupt.instrument(hold)
        checkpoint.save(sys.argv[1], state, json.loads(sys.argv[3]))
        """
    )
    state = {k: np.asarray(v).tolist() for k, v in states[5].items()}
    state["key"] = [int(x) for x in states[5]["key"]]
    for n in range(4):
        child = subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path / f"c{n}.npz"), json.dumps(state), json.dumps(contract)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        for line in child.stdout:
            if line.strip() == "written":
                break
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    temporaries = [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
    assert len(temporaries) == 1, temporaries  # each saver removed the one its killed predecessor left


@settings(max_examples=6, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 40), batch_size=st.integers(1, 45), steps=st.integers(0, 30))
@pytest.mark.slow  # replays of up to 30 steps: make test's, not the inner loop's
def test_the_sampler_at_any_step_is_the_one_a_replay_reaches(seed, rows, batch_size, steps):
    from shardlab.core.sampler import advance, initial_sampler, sampler_at

    state = initial_sampler(seed, rows)  # the control: the real sampler, advanced one batch at a time
    for _ in range(steps):
        state, _ = advance(state, batch_size)
    implied = sampler_at(seed, rows, batch_size, steps)
    assert implied["cursor"] == state["cursor"]
    np.testing.assert_array_equal(implied["key"], state["key"])
    np.testing.assert_array_equal(implied["order"], state["order"])
