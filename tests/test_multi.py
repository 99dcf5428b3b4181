"""Stage 5: the completion manifest, the migration contract and the guard (no processes), then
the drills the stage 5 notebook ran once through the launcher (read from its receipts)."""

import hashlib
import json
import os
import tempfile
import threading
import time

import numpy as np
import pytest
from conftest import idiom_batches, oracle_path, results

import shardlab as sl
from shardlab.errors import (
    AsyncSaveError,
    BoundedReadError,
    CheckpointExistsError,
    ConfigError,
    ContractMismatchError,
    CorruptCheckpointError,
    HangError,
    IncompleteCheckpointError,
    LaunchError,
    LostProcessError,
    SamplerMismatchError,
)
from shardlab.multi import (
    group_supervisor,
    launcher,
    ledger,
    manifest,
    migration,
    retention,
    runtime,
    store,
    wait_guard,
)
from shardlab.verify import oracle

pytestmark = pytest.mark.stage5

WORLD = {"processes": 2, "local_devices": 2, "devices": 4}


def host_state(step: int) -> dict:
    return {
        "weights": np.full(8, step, np.float32),
        "momentum": np.zeros(8, np.float32),
        "key": np.array([1, step], np.uint32),
        "order": np.arange(23, dtype=np.int32),
        "cursor": 7,
        "step": step,
    }


def write_step(shared, step: int, publish: bool = True) -> dict:
    """An Orbax-like step folder with two pieces, and (optionally) its manifest."""
    folder = manifest.step_dir(shared, step)
    os.makedirs(os.path.join(folder, "d"))
    for name, payload in (("_METADATA", b"meta"), ("d/piece", bytes([step]) * 64)):
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(payload)
    record = manifest.build(step, WORLD, host_state(step), manifest.file_digests(folder), {"num_devices": 4})
    if publish:
        manifest.publish(shared, record)
    return record


def test_manifest_holds_what_a_reader_needs(tmp_path):
    record = write_step(tmp_path, 3)
    read = manifest.read(tmp_path, 3)
    assert read == json.loads(json.dumps(record))
    assert (read["format_version"], read["status"], read["step"]) == (1, "complete", 3)
    assert read["writer_world"] == WORLD
    assert sorted(read["state"]) == sorted(sl.FIELDS)
    assert read["state"]["order"]["shape"] == [23]
    assert read["state"]["weights"]["sha256"] == hashlib.sha256(np.full(8, 3, np.float32).tobytes()).hexdigest()
    piece = read["files"]["d/piece"]
    assert piece == {"bytes": 64, "sha256": hashlib.sha256(bytes([3]) * 64).hexdigest()}


def test_step_without_manifest_is_ignored_and_reader_falls_back(tmp_path):
    write_step(tmp_path, 3)
    write_step(tmp_path, 6, publish=False)  # every piece on disk, manifest never published
    os.makedirs(os.path.join(tmp_path, manifest.ORBAX, "9.orbax-checkpoint-tmp-1700000000"))
    found = manifest.scan(tmp_path)
    assert found["complete"] == [3]
    assert set(found["ignored"]) == {"6", "9.orbax-checkpoint-tmp-1700000000"}
    assert manifest.newest_complete(tmp_path) == 3


def test_newest_step_with_a_changed_piece_falls_back(tmp_path):
    write_step(tmp_path, 3)
    write_step(tmp_path, 6)
    assert manifest.newest_complete(tmp_path) == 6
    with open(os.path.join(manifest.step_dir(tmp_path, 6), "d", "piece"), "r+b") as handle:
        handle.write(b"\xff")
    assert manifest.newest_complete(tmp_path) == 3
    with pytest.raises(CorruptCheckpointError, match="d/piece"):
        manifest.read(tmp_path, 6)


def test_manifest_with_another_status_is_not_complete(tmp_path):
    record = write_step(tmp_path, 3, publish=False)
    manifest.publish(tmp_path, {**record, "status": "writing"})
    assert manifest.scan(tmp_path)["complete"] == []
    with pytest.raises(IncompleteCheckpointError):
        manifest.newest_complete(tmp_path)


def test_published_manifest_is_never_overwritten(tmp_path):
    record = write_step(tmp_path, 3)
    with pytest.raises(CheckpointExistsError):
        manifest.publish(tmp_path, record)


def test_set_aside_keeps_only_complete_steps(tmp_path):
    write_step(tmp_path, 3)
    write_step(tmp_path, 6, publish=False)
    assert manifest.set_aside(tmp_path, keep=3) == ["6"]
    assert sorted(os.listdir(os.path.join(tmp_path, manifest.ORBAX))) == ["3"]
    assert len(os.listdir(os.path.join(tmp_path, manifest.REJECTED))) == 1


def test_restored_state_is_checked_against_manifest(tmp_path):
    record = write_step(tmp_path, 3)
    manifest.check_state(record, host_state(3))
    with pytest.raises(CorruptCheckpointError, match="weights"):
        manifest.check_state(record, {**host_state(3), "weights": np.full(8, 4, np.float32)})


def test_default_contract_refuses_device_change_migration_accepts_only_that(data):
    written = sl.contract(data, sl.Config(num_devices=4))
    two = sl.contract(data, sl.Config(num_devices=2))
    with pytest.raises(ContractMismatchError, match="num_devices"):
        migration.check(written, two)
    record = migration.check(written, two, allow_world_change=True)
    assert (record["from_devices"], record["to_devices"], record["migrated"]) == (4, 2, True)
    with pytest.raises(ContractMismatchError, match="batch_size"):
        migration.check(written, sl.contract(data, sl.Config(batch_size=8, num_devices=2)), allow_world_change=True)


def test_the_compiling_steps_are_the_first_of_each_padded_batch_shape():
    from shardlab.course import drill_records

    for devices in (1, 2, 4):
        shapes = [-(-n // devices) * devices for n in oracle.epoch_batches(23, 7)]  # one epoch: 7, 7, 7, 2 rows
        shapes = (shapes * 3)[:10]  # the sampler's epochs repeat the same batch lengths
        by_hand = [k + 1 for k, shape in enumerate(shapes) if shape not in shapes[:k]]
        assert drill_records.compiling_steps(17, 7, 10, devices) == by_hand, devices
    assert drill_records.compiling_steps(17, 7, 10, 4) == [1, 4]


def test_global_denominator_is_invariant_to_the_split(data):
    ids = np.array([16, 0, 17, 3, 6, 15, 14])
    weights = np.linspace(-1, 1, 8).astype(np.float32)
    split = migration.split_invariance(data, ids, weights, (1, 2, 4))
    residual = data.features[ids].astype(np.float64) @ weights - data.targets[ids]
    for n, expected_counts in ((1, [7]), (2, [4, 3]), (4, [2, 2, 2, 1])):
        assert split[n]["valid_per_device"] == expected_counts
        np.testing.assert_allclose(split[n]["global_mean"], np.mean(residual**2), rtol=1e-5)
    assert abs(split[4]["mean_of_device_means"] - np.mean(residual**2)) > 1e-3


class FakeClient:
    """The key-value store and barrier of the coordination service, in memory."""

    def __init__(self):
        self.kv, self.lock = {}, threading.Lock()

    def key_value_set(self, key, value, allow_overwrite=False):
        with self.lock:
            if key in self.kv and not allow_overwrite:
                raise RuntimeError(f"{key} exists")
            self.kv[key] = value

    def key_value_dir_get(self, prefix):
        with self.lock:
            return [(k, v) for k, v in self.kv.items() if k.startswith(prefix)]

    def blocking_key_value_get(self, key, timeout_in_ms):
        deadline = time.monotonic() + timeout_in_ms / 1000
        while time.monotonic() < deadline:
            with self.lock:
                if key in self.kv:
                    return self.kv[key]
            time.sleep(0.01)
        raise TimeoutError(key)

    def wait_at_barrier(self, name, timeout_in_ms, process_ids=None):
        time.sleep(timeout_in_ms / 1000)
        raise TimeoutError(name)


def pulsing(client, process_id, position, stop):
    """A peer that is alive: its pulse counter advances."""
    count = 0
    while not stop.is_set():
        count += 1
        client.key_value_set(f"shardlab/pulse/{process_id}", f"{count}|{position}", allow_overwrite=True)
        stop.wait(0.1)


@pytest.fixture
def group(monkeypatch):
    # The fake peer pulses every 0.1 s, not every 0.5 s like a controller: a 1 s window still sees ~10 of
    # its pulses, and each diagnosis below waits 0.3 + 1 s instead of the controllers' 1 + 3 s.
    monkeypatch.setattr(wait_guard, "PULSE_WINDOW", 1.0)
    client, stop, stops = FakeClient(), threading.Event(), []
    watch = wait_guard.WaitGuard(client, 0, 2, timeout=0.3, report=stops.append)
    yield client, watch, stop
    stop.set()
    watch.close()


def test_guard_names_a_lost_process(group):
    client, watch, _ = group
    client.key_value_set("shardlab/pulse/1", "5|step 4")  # a pulse that never advances
    with pytest.raises(LostProcessError, match=r"\[1\]") as info:
        watch.agree(4, "abc")
    assert info.value.lost == (1,)


def test_guard_names_the_process_that_skipped_a_step(group):
    client, watch, stop = group
    threading.Thread(target=pulsing, args=(client, 1, "step 3", stop), daemon=True).start()
    for step in (0, 1):
        client.key_value_set(f"shardlab/agree/{step}/1", "same")
        watch.agree(step, "same")
    client.key_value_set("shardlab/agree/3/1", "same")  # process 1 jumped from step 1 to step 3
    with pytest.raises(HangError, match=r"process\(es\) \[1\] skipped step 2"):
        watch.agree(2, "same")


def test_guard_refuses_a_different_sampler(group):
    client, watch, _ = group
    client.key_value_set("shardlab/agree/5/1", "other|digest")
    with pytest.raises(SamplerMismatchError, match=r"\[1\]"):
        watch.agree(5, "mine|digest")


def test_launcher_names_first_step_and_process_that_disagree():
    from shardlab.multi.launcher import divergence

    log = [{"step": s, "batch": f"b{s}", "weights": f"w{s}", "loss": 1.0} for s in (1, 2, 3, 4)]
    late = [dict(e) for e in log]
    late[3]["weights"] = "other"
    early = [dict(e) for e in log]
    early[1]["batch"] = "other"
    reports = {0: {"log": log}, 1: {"log": late}, 2: {"log": early}, 3: {"log": log}}
    assert divergence(reports) == {"step": 2, "fields": ["batch"], "process": 2}
    assert divergence({0: {"log": log}, 1: {"log": log}}) is None


def test_agreement_carries_every_flag_and_compares_only_the_digest(group):
    client, watch, _ = group
    client.key_value_set("shardlab/agree/6/1", "same#PD")
    assert watch.agree(6, "same", flags="D") == {0: "D", 1: "PD"}
    client.key_value_set("shardlab/agree/7/1", "other#D")
    with pytest.raises(SamplerMismatchError, match=r"\[1\]"):
        watch.agree(7, "same", flags="D")


# ---- retention ----


def test_retention_keeps_the_newest_n_and_removes_leftovers(tmp_path):
    for step in (3, 6, 9):
        write_step(tmp_path, step)
    write_step(tmp_path, 4, publish=False)  # an unfinished step older than the newest complete
    os.makedirs(os.path.join(tmp_path, manifest.ORBAX, "5.orbax-checkpoint-tmp-1700000000"))
    os.makedirs(os.path.join(tmp_path, manifest.ORBAX, "12.orbax-checkpoint-tmp-1700000001"))  # maybe in flight
    os.makedirs(os.path.join(tmp_path, manifest.REJECTED, "6.0"))
    done = retention.enforce(tmp_path, keep=2)
    assert done["keep"] == [6, 9] and done["expire"] == [3]
    assert sorted(done["leftovers"]) == ["4", "5.orbax-checkpoint-tmp-1700000000"]
    assert sorted(os.listdir(os.path.join(tmp_path, manifest.ORBAX))) == [
        "12.orbax-checkpoint-tmp-1700000001",
        "6",
        "9",
    ]
    assert sorted(os.listdir(os.path.join(tmp_path, manifest.MANIFESTS))) == ["6.json", "9.json"]
    assert os.listdir(os.path.join(tmp_path, manifest.REJECTED)) == []
    assert manifest.newest_complete(tmp_path) == 9


def test_retention_killed_mid_clean_up_never_loses_the_newest_complete(tmp_path):
    for step in (3, 6, 9):
        write_step(tmp_path, step)

    def killed(phase, step):
        raise KeyboardInterrupt(f"killed at {phase} of step {step}")  # stands in for SIGKILL at that point

    with pytest.raises(KeyboardInterrupt):
        retention.enforce(tmp_path, keep=1, fault=killed)
    found = manifest.scan(tmp_path)
    assert found["complete"] == [6, 9] and "3" in found["ignored"]  # 3 lost its manifest first: no longer counts
    assert manifest.newest_complete(tmp_path) == 9
    retention.enforce(tmp_path, keep=1)  # the next clean-up finishes the job
    assert manifest.scan(tmp_path) == {"complete": [9], "ignored": {}}
    assert sorted(os.listdir(os.path.join(tmp_path, manifest.ORBAX))) == ["9"]


def test_retention_refuses_to_keep_nothing(tmp_path):
    write_step(tmp_path, 3)
    with pytest.raises(ConfigError, match="at least 1"):
        retention.enforce(tmp_path, keep=0)
    assert manifest.newest_complete(tmp_path) == 3


# ---- asynchronous saves ----


class FailingManager:
    """A CheckpointManager whose background write failed (as Orbax reports it: at the next wait or save)."""

    def __init__(self):
        self.waits = 0

    def wait_until_finished(self):
        self.waits += 1
        raise OSError("No space left on device")

    def save(self, step, args=None, force=False):
        raise OSError("No space left on device (previous save)")

    def is_saving_in_progress(self):
        return False

    def check_for_errors(self):  # the failure shows only once waited for
        pass


def test_a_failed_background_save_is_a_named_error_at_the_next_wait_or_save(mesh, data):
    checkpoints = FailingManager()
    with pytest.raises(AsyncSaveError, match="background save of step 6 failed.*No space left"):
        store.finish(checkpoints, 6)
    assert checkpoints.waits == 1
    state = sl.initial(17, data, mesh)
    with pytest.raises(AsyncSaveError, match="saving step 9 failed.*earlier background save"):
        store.save(checkpoints, 9, state, wait=False)
    assert store.in_progress(checkpoints) is False


@pytest.mark.parametrize("surface", ["check", "finish"])
def test_a_real_background_write_failure_travels_orbax_and_is_named(tmp_path, mesh, data, surface):
    """Orbax's own async manager; the writer thread raises ENOSPC: `check` (no wait) or `finish` names it,
    the step is never published, and a relaunched manager saves and restores the next step."""
    import contextlib

    state = sl.initial(17, data, mesh)
    checkpoints = store.manager(tmp_path, 10.0, asynchronous=True)
    store.fail_next_write("test")
    store.save(checkpoints, 3, state, wait=False)
    error, deadline = None, time.monotonic() + 30
    while error is None and time.monotonic() < deadline:
        try:
            store.check(checkpoints, 3) if surface == "check" else store.finish(checkpoints, 3)
        except AsyncSaveError as exc:
            error = str(exc)
        time.sleep(0.02)
    with contextlib.suppress(Exception):  # Orbax may raise its own copy of the error once more here
        checkpoints.close()
    assert error and "background save of step 3 failed (OSError" in error and "No space left" in error
    assert manifest.scan(tmp_path)["complete"] == []  # no manifest: step 3 never counts
    again = store.manager(tmp_path, 10.0, asynchronous=True)  # what a relaunched group opens
    try:
        store.save(again, 6, state)
        back = store.restore(again, 6, state, mesh)
        np.testing.assert_array_equal(np.asarray(back["weights"]), np.asarray(state["weights"]))
    finally:
        again.close()
    assert not store.FAILED and not store.FAIL_NEXT


# ---- supervision: naming, bounds, the stitched path, the ledger ----


def test_supervisor_names_the_cause_of_an_exit():
    assert group_supervisor._cause(-9, None) == "killed (SIGKILL)"
    assert group_supervisor._cause(-6, None).startswith("aborted (SIGABRT")
    report = {"error": {"type": "HangError", "message": "process(es) [1] skipped step 2"}}
    assert (
        group_supervisor._cause(wait_guard.EXIT_STOPPED, report)
        == "named stop: HangError: process(es) [1] skipped step 2"
    )
    assert group_supervisor._cause(1, None) == "crashed (exit code 1)"
    seen = {0: -6, 1: -9}  # JAX aborted process 0 after process 1 was killed, both seen in one poll
    assert min(seen, key=lambda q: (group_supervisor._rank(seen[q]), q)) == 1


def test_a_controller_file_is_read_whole_up_to_its_bound_and_refused_beyond(tmp_path, monkeypatch):
    written = '{"step": 3}\n{"step": 4, "note": "caf\u00e9"}\n'
    (tmp_path / "progress").write_text(written, encoding="utf-8")
    assert launcher.read_text(str(tmp_path / "progress")) == written
    assert launcher.read_text(str(tmp_path / "not_yet")) is None
    monkeypatch.setattr(launcher, "TEXT_BYTES", len(written.encode("utf-8")) - 1)
    with pytest.raises(BoundedReadError, match="more than"):
        launcher.read_text(str(tmp_path / "progress"))
    with pytest.raises(BoundedReadError, match="not a regular file"):
        launcher.read_text(str(tmp_path))


def test_freeze_bound_is_stated_above_the_pulse_and_below_jax_heartbeat():
    bounds = group_supervisor.detection_bounds(10.0)
    assert bounds["freeze_s"] == group_supervisor.FREEZE_S + wait_guard.PULSE + 2 * group_supervisor.POLL
    assert bounds["freeze_s"] < runtime.heartbeat_seconds(10.0)
    assert group_supervisor.FREEZE_S / wait_guard.PULSE >= 5  # several missed pulses, not one late one


def _attempt(launched, steps, restored=None, end=None, detect=None, teardown=0.5, saves=()):
    t = launched + 2.0
    events = [{"event": "ready", "t": t}]
    if restored is not None:
        events.append({"event": "restored", "t": t, "step": restored, "s": 0.25})
    for s in steps:
        t += 1.0
        events.append({"event": "step", "t": t, "step": s, "s": 1.0, "ids": [s], "loss": float(s), "weights": [s]})
    events += [{"event": "saved", "t": t, "step": s, "block_s": 0.125} for s in saves]
    return {
        "launched": launched,
        "progress": {0: events, 1: events},
        "event": {"time": end if end is not None else t, "kind": "failed" if detect is not None else "complete"},
        "detect_s": detect,
        "teardown_s": teardown,
    }


def test_ledger_stitches_attempts_and_splits_the_wall_time():
    # attempt 0 does steps 1-5 and dies; attempt 1 resumes from 3 and does 4-6
    first = _attempt(0.0, [1, 2, 3, 4, 5], end=8.0, detect=0.5, saves=(3,))
    second = _attempt(9.0, [4, 5, 6], restored=3, teardown=0.0)
    result = {"attempts": [first, second]}
    assert [e["step"] for e in ledger.path(result)] == [1, 2, 3, 4, 5, 6]
    assert ledger.wasted_steps(result) == [2]
    reference = {"ids": {s: [s] for s in range(1, 7)}, "losses": {s: float(s) for s in range(1, 7)}}
    reference["states"] = [{"weights": [s]} for s in range(7)]
    assert ledger.against_control(result, reference, 6)["matches"] is True
    reference["ids"][5] = [99]
    assert ledger.against_control(result, reference, 6)["ids_equal"] is False
    parts = ledger.goodput(result)
    # by hand: start-up 2 + 2; compile: the first step of each attempt; wasted: steps 4, 5 of attempt 0;
    # productive: steps 2, 3 of attempt 0 and 5, 6 of attempt 1
    assert (parts["startup"], parts["compile"], parts["wasted"], parts["productive"]) == (4.0, 2.0, 2.0, 4.0)
    assert (parts["restore"], parts["save_block"], parts["detection"], parts["teardown"]) == (0.25, 0.125, 0.5, 0.5)
    assert parts["total"] == pytest.approx((8.0 + 0.5) + (second["event"]["time"] - 9.0))


def test_ledger_splits_other_into_after_the_last_event_and_between_events():
    # ready at 2; steps at 3, 4, 5 of 0.5 s each (0.5 s between them unnamed); the attempt dies, named at 8.0
    # after 0.5 s of detection, then 0.5 s of teardown
    dying = _attempt(0.0, [1, 2, 3], end=8.0, detect=0.5)
    for e in dying["progress"][0]:
        e["s"] = 0.5 if e["event"] == "step" else e.get("s")
    parts = ledger.goodput({"attempts": [dying]})
    # by hand: wall 8.5 = start-up 2 + steps 1.5 + detection 0.5 + teardown 0.5 + other 4.0;
    # after the last event (5.0) until 8.0, less the 0.5 s of detection: 2.5; between events: 4.0 - 2.5 = 1.5
    assert parts["other"] == pytest.approx(4.0)
    assert parts["other_after_last_event"] == pytest.approx(2.5)
    assert parts["other_between_events"] == pytest.approx(1.5)


def test_a_controllers_log_is_compared_with_the_control_as_the_stitched_path_is():
    from shardlab.multi import control

    reference = {"ids": {s: [s] for s in range(1, 4)}, "losses": {s: float(s) for s in range(1, 4)}}
    reference["states"] = [
        {"weights": [float(s)], "momentum": [0.0], **{f: s for f in ("key", "order", "cursor", "step")}}
        for s in range(4)
    ]
    log = [
        {"step": s, "ids": [s], "loss": float(s), "weights": "checksum", "weights_values": [float(s)]}
        for s in (1, 2, 3)
    ]
    final = {**reference["states"][3], "step": 3}
    found = control.compare({"log": log, "final": final}, reference)
    assert (found["matches"], found["ids_equal"], found["steps"], found["max_weight_diff"]) == (True, True, [1, 3], 0.0)
    assert found["final"]["matches"] is True
    assert control.compare({"log": log}, reference)["matches"] is False  # no final state where one is needed
    assert control.compare({"log": log}, reference, need_final=False)["matches"] is True
    # by hand: a weight 1e-3 away is beyond float32 tolerance (1e-5 relative of 2, 1e-6 absolute); a loss too
    log[1] = {**log[1], "weights_values": [2.001]}
    found = control.compare({"log": log, "final": final}, reference)
    assert found["matches"] is False and found["max_weight_diff"] == pytest.approx(1e-3)
    log[1] = {**log[1], "weights_values": [2.0], "loss": 2.5}
    found = control.compare({"log": log, "final": final}, reference)
    assert (found["matches"], found["max_loss_diff"]) == (False, 0.5)
    log[1] = {**log[1], "loss": 2.0, "ids": [9]}
    assert control.compare({"log": log, "final": final}, reference)["ids_equal"] is False
    assert control.compare({"log": []}, reference)["matches"] is False


def _on_four_devices(attempt: dict, seconds: dict | None = None) -> dict:
    """`attempt` on 4 devices of 2 processes, 23 rows in batches of 7: step 4 the short batch of 2 rows; each step's
    time from `seconds` ({step: s}, 0.25 s for the others) when given."""
    for e in attempt["progress"][0]:
        if e["event"] == "ready":
            e["world"] = {"devices": 4, "local_devices": 2, "processes": 2}
        if e["event"] == "step":
            e["ids"] = list(range(2 if e["step"] == 4 else 7))
            e["s"] = e["s"] if seconds is None else seconds.get(e["step"], 0.25)
    return attempt


def test_ledger_counts_the_first_step_of_each_padded_batch_shape_as_compiling():
    # 23 rows in batches of 7 on 4 devices: 7, 7, 7, 2 rows, padded to 8, 8, 8, 4 (ceil(n / 4) * 4)
    parts = ledger.goodput({"attempts": [_on_four_devices(_attempt(0.0, [1, 2, 3, 4, 5, 6]))]})
    # by hand: step 1 meets shape 8, step 4 shape 4; steps 2, 3, 5, 6 are productive (1 s each)
    assert (parts["compile"], parts["productive"]) == (2.0, 4.0)


def test_ledger_pads_for_the_devices_the_attempt_reports():
    # 22 rows in batches of 8 on 4 devices: 8, 8, 6 rows, each padded to 8 (ceil(n / 4) * 4): one shape, so only
    # step 1 compiles; padded for 1 device instead, the short batches (6 rows) would be a second shape
    attempt = _on_four_devices(_attempt(0.0, [1, 2, 3, 4, 5, 6]))
    for e in attempt["progress"][0]:
        if e["event"] == "step":
            e["ids"] = list(range(6 if e["step"] in (3, 6) else 8))
    parts = ledger.goodput({"attempts": [attempt]})
    # by hand: step 1 meets shape 8; steps 2-6 are productive (1 s each)
    assert (parts["compile"], parts["productive"]) == (1.0, 5.0)


def test_ledger_counts_a_recomputed_step_that_compiled_as_compilation():
    # attempt 0: steps 1-5, step 4 the short batch (2 rows, padded to 4) and slow because it compiles; it dies
    # after step 5. Attempt 1 resumes from 3 and redoes 4 (its own compile of shape 4), 5 and 6.
    first = _on_four_devices(_attempt(0.0, [1, 2, 3, 4, 5], end=8.0, detect=0.5), {1: 3.0, 4: 2.0})
    second = _on_four_devices(_attempt(9.0, [4, 5, 6], restored=3, teardown=0.0), {4: 0.75, 5: 0.5})
    parts = ledger.goodput({"attempts": [first, second]})
    # by hand: compile = attempt 0's steps 1 (3.0) and 4 (2.0, recomputed later but still a compile),
    # attempt 1's steps 4 (0.75, shape 4) and 5 (0.5, shape 8 first met there) = 6.25;
    # wasted = attempt 0's step 5 alone = 0.25; productive = attempt 0's 2, 3 and attempt 1's 6 = 0.75
    assert (parts["compile"], parts["wasted"], parts["productive"]) == (6.25, 0.25, 0.75)
    assert parts["redone_compiled"] == 1  # attempt 0's step 4: recomputed, and the first of its shape there


# ---- launch paths ----


def test_slurm_style_environment_is_what_jax_own_detection_reads(monkeypatch):
    from jax._src.clusters import ClusterEnv
    from jax._src.clusters.slurm_cluster import SlurmCluster

    env = launcher.environment(45678, 2, 1, 2, "slurm")
    assert set(runtime.SLURM_VARIABLES) <= set(env) and runtime.COORDINATOR not in env
    for name in [k for k in os.environ if k.startswith(("SLURM_", "SHARDLAB_", "JAX_COORDINATOR", "OMPI_"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert SlurmCluster.is_env_present()
    found = ClusterEnv.auto_detect_unset_distributed_params(None, None, None, None, None, 10)
    assert found[:3] == ("127.0.0.1:45678", 2, 1)
    runtime.check_cluster_environment(env)


def test_incomplete_or_inconsistent_cluster_environment_is_named():
    env = launcher.environment(45678, 2, 1, 2, "slurm")
    with pytest.raises(LaunchError, match=r"missing \['SLURM_NTASKS'\]"):
        runtime.check_cluster_environment({k: v for k, v in env.items() if k != "SLURM_NTASKS"})
    with pytest.raises(LaunchError, match="SLURM_PROCID=2 is outside SLURM_NTASKS=2"):
        runtime.check_cluster_environment({**env, "SLURM_PROCID": "2"})
    with pytest.raises(LaunchError, match="launch must be one of"):
        launcher.environment(45678, 2, 1, 2, "pbs")


def test_a_controller_compiles_alone_unless_its_caller_names_a_compilation_cache(monkeypatch, tmp_path):
    """A cache folder in the caller's environment (a kernel's) never reaches a controller; a named one does,
    with the thresholds that let the course's sub-second programs into it."""
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "the-kernels-cache"))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "7")
    for launch in runtime.LAUNCHES:
        alone = launcher.environment(45678, 2, 1, 2, launch)
        assert not [name for name in alone if "CACHE" in name], launch
        shared = launcher.environment(45678, 2, 1, 2, launch, cache=str(tmp_path / "series"))
        assert shared["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "series")
        assert float(shared["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]) == 0.0
        assert int(shared["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"]) == 0
        assert {k: v for k, v in shared.items() if "CACHE" not in k} == alone  # nothing else differs
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "the-kernels-cache")  # the caller's, untouched


def test_a_coordinator_port_in_use_is_named():
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(LaunchError, match=f"coordinator port {port} on 127.0.0.1 is already in use"):
            runtime.check_port_free(f"127.0.0.1:{port}")
    runtime.check_port_free(f"127.0.0.1:{launcher.free_port()}")


@pytest.mark.controllers
def test_a_controller_with_a_missing_variable_stops_before_initialising_with_a_report(tmp_path):
    import subprocess
    import sys

    env = launcher.environment(launcher.free_port(), 2, 0, 2, "slurm")
    env.pop("SLURM_JOB_ID")
    args = ["--shared", str(tmp_path / "shared"), "--out", str(tmp_path), "--timeout", "3"]
    proc = subprocess.run([sys.executable, "-m", "shardlab.multi.program", *args], env=env, capture_output=True)
    assert proc.returncode == wait_guard.EXIT_STOPPED
    report = json.loads((tmp_path / "process_0.json").read_text())
    message = report["error"]["message"]
    assert report["error"]["type"] == "LaunchError" and "SLURM_JOB_ID" in message
    # the environment check's own message, not one of the two an initialisation wait ends with
    assert "did not assemble" not in message and "did not complete" not in message
    assert not (tmp_path / "shared").exists()  # nothing written where checkpoints go


# ---- launch path (c): mpirun (MPICH's wheel) and JAX's own mpi4py detection ----


def _mpiexec(tmp_path, ranks: int, code: str, env: dict) -> list[dict]:
    """Run `code` in `ranks` processes under mpiexec; each writes what it found to its own JSON file."""
    import subprocess
    import sys

    script = tmp_path / "probe.py"
    save = f"pathlib.Path({str(tmp_path)!r}, f'seen_{{MPI.COMM_WORLD.Get_rank()}}.json').write_text(json.dumps(found))"
    script.write_text(code + "import pathlib\nfrom mpi4py import MPI\n" + save + "\n")
    proc = subprocess.run(
        [launcher.mpiexec(), "-n", str(ranks), sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads((tmp_path / f"seen_{r}.json").read_text()) for r in range(ranks)]


@pytest.mark.controllers
def test_mpirun_environment_is_what_jax_own_mpi4py_detection_reads(tmp_path):
    port = launcher.free_port()
    env = launcher.environment(port, 2, 0, 2, "mpirun")
    assert runtime.COORDINATOR not in env and not any(k.startswith("SLURM_") for k in env)
    code = (
        "import json, socket\n"
        "from jax._src.clusters import ClusterEnv\n"
        "got = ClusterEnv.auto_detect_unset_distributed_params(None, None, None, None, 'mpi4py', 10)\n"
        "found = {'address': got[0], 'count': got[1], 'id': got[2], 'host': socket.gethostname()}\n"
    )
    seen = _mpiexec(tmp_path, 2, code, env)
    assert [s["id"] for s in seen] == [0, 1] and {s["count"] for s in seen} == {2}
    assert {s["address"] for s in seen} == {f"{seen[0]['host']}:{port}"}  # one coordinator, the port we drew


def _group(codes: dict):
    """A stand-in for mpiexec's Popen that has already exited with `codes['group']`."""

    class Group:
        pid, returncode = 0, codes["group"]

        def poll(self):
            return self.returncode

    return Group()


def test_mpirun_names_the_rank_it_reports_and_not_the_ranks_it_ended(tmp_path):
    for rank, os_pid in ((0, 4101), (1, 4102)):
        ready = {"event": "ready", "t": 1.0, "os_pid": os_pid}
        (tmp_path / f"progress_{rank}.jsonl").write_text(json.dumps(ready) + "\n")
    log = "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 4102 RUNNING AT vm\n=   EXIT CODE: 9\n"
    (tmp_path / launcher.MPI_LOG).write_text(
        log + "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n"
    )
    group = _group({"group": 9})
    codes = {r: launcher.MpiRank(group, r, str(tmp_path)).poll() for r in (0, 1)}
    assert codes == {0: launcher.CLEANED_UP, 1: -9}
    assert min(codes, key=lambda q: (group_supervisor._rank(codes[q]), q)) == 1
    assert group_supervisor._cause(codes[1], None) == "killed (SIGKILL)"
    assert "another rank failed" in group_supervisor._cause(codes[0], None)
    (tmp_path / launcher.MPI_LOG).write_text(log.replace("EXIT CODE: 9", "EXIT CODE: 3"))
    assert launcher.MpiRank(_group({"group": 3}), 1, str(tmp_path)).poll() == wait_guard.EXIT_STOPPED
    preempted = {launcher.MpiRank(_group({"group": 4}), r, str(tmp_path)).poll() for r in (0, 1)}
    assert preempted == {4}  # the group's agreed stop, for every rank


@pytest.mark.parametrize(
    "ranks, expected",
    [(3, "mpirun started 3 processes but this launch expects 2"), (0, "not started by an MPI launcher")],
)
@pytest.mark.controllers
def test_a_wrong_mpirun_launch_stops_at_the_launch_check_and_names_the_problem(tmp_path, ranks, expected):
    import subprocess
    import sys

    env = launcher.environment(launcher.free_port(), 2, 0, 2, "mpirun")
    args = [sys.executable, *launcher.PROGRAM, "--shared", str(tmp_path / "shared"), "--out", str(tmp_path)]
    command = [launcher.mpiexec(), "-n", str(ranks), *args] if ranks else args
    proc = subprocess.run([*command, "--timeout", "3"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == wait_guard.EXIT_STOPPED, proc.stdout + proc.stderr
    reports = [json.loads(p.read_text()) for p in tmp_path.glob("process_*.json")]
    assert reports and all(r["error"]["type"] == "LaunchError" for r in reports)
    assert any(expected in r["error"]["message"] for r in reports)
    # each rank stopped at the launch check, none at the end of an initialisation wait
    assert not any("did not assemble" in r["error"]["message"] for r in reports)
    assert not any("did not complete" in r["error"]["message"] for r in reports)
    assert not (tmp_path / "shared").exists()


@pytest.mark.controllers
@pytest.mark.long  # two mpirun launches of a group, one killed: make test-long's
def test_mpirun_launch_is_supervised_and_matches_one_process_and_numpy(tmp_path, data):
    """One group started by mpirun, its process 1 killed mid-step: the supervisor names it, relaunches through
    mpirun, and the stitched path equals one process's run (IDs exact, losses) and the float64 NumPy formulas.
    (`make drills`' launch_paths compares the three launch paths with each other.)"""
    from shardlab.multi import control
    from shardlab.multi.scenarios import kill

    mpi = group_supervisor.supervise(
        tmp_path / "sup",
        tmp_path / "shared",
        steps=8,
        save_every=3,
        timeout=10.0,
        launch="mpirun",
        faults=(kill(1, "update", 5),),
        budget=1,
    )
    assert mpi["completed"] and mpi["restarts"] == 1 and mpi["launch"] == "mpirun"
    failure = mpi["attempts"][0]["event"]
    assert (failure["process"], failure["cause"]) == (1, "killed (SIGKILL)")
    assert mpi["attempts"][1]["resume"] == "latest" and ledger.resumed_from(mpi["attempts"][1]) == 3
    assert len(set(mpi["ports"])) == 2
    reports = mpi["attempts"][-1]["reports"]
    assert {r["launched_by"] for r in reports.values()} == {"mpirun"}
    assert sorted(r["process_id"] for r in reports.values()) == [0, 1]
    mesh = reports[0]["mesh"]
    assert mesh["shape"] == {"data": 4} and [p for _, p in mesh["devices"]] == [0, 0, 1, 1]
    path, reference = ledger.path(mpi), control.run(17, 7, 8)
    assert [e["step"] for e in path] == list(range(1, 9))
    assert [e["ids"] for e in path] == [reference["ids"][e["step"]] for e in path]
    np.testing.assert_allclose([e["loss"] for e in path], [reference["losses"][e["step"]] for e in path], rtol=1e-5)
    final = np.asarray(path[-1]["weights"], np.float64)
    np.testing.assert_allclose(final, numpy_weights(data, 17, 7, 8), rtol=1e-5, atol=1e-6)


@pytest.mark.controllers
@pytest.mark.long  # three controller groups of its own: make test-long's (stage 5a runs the series too)
def test_a_drill_series_shares_compiled_programs_after_its_uninterrupted_group(tmp_path):
    """The uninterrupted group compiles everything itself (its step times show the compiling steps) and leaves
    no cache entry; a later group of the series writes the series' cache, each of its processes its own
    programs, and the one after it loads from it (no process compiles anything new), and both still match the
    single-process control computed here."""
    from shardlab.multi import control, drills

    assert drills.context(tmp_path / "bare").cache is None  # a bare context's groups compile alone
    ctx = drills.begin(timeout=10.0, work=tmp_path / "series")
    base = drills.uninterrupted(ctx)
    assert base["passed"]
    assert not os.path.exists(ctx.cache) or not os.listdir(ctx.cache)  # compiled alone, nothing written
    reference = control.run(17, 7, drills.STEPS)
    for name in ("writes", "loads"):
        outcome = ctx.launch(name, os.path.join(ctx.out, name, "shared"))
        assert outcome["event"]["kind"] == "complete" and outcome["divergence"] is None, outcome["event"]
        log = outcome["reports"][0]["log"]
        assert [e["ids"] for e in log] == [reference["ids"][e["step"]] for e in log]
        np.testing.assert_allclose([e["loss"] for e in log], [reference["losses"][e["step"]] for e in log], rtol=1e-5)
        entries = sorted(os.listdir(ctx.cache))
        assert entries, name  # each process wrote what it compiled (multi.cache: process 1 too)
        if name == "writes":
            written = entries
        else:
            assert entries == written  # the second group compiled nothing new: it loaded every program
    drills.discard(ctx)
    assert not os.path.exists(ctx.cache)


# ---- the drills, executed once by the stage 5 notebook in the shared run ----

NOTEBOOK = "stage5a_protocol"
DRILLS = ["several_failures", "world_change", "skipped_batch"]


@pytest.fixture(scope="module")
def recorded(run_dir):
    return results(run_dir, NOTEBOOK)


@pytest.fixture(scope="module")
def drills_json(run_dir):
    with open(run_dir / "drills.json") as handle:
        return json.load(handle)


def numpy_weights(data, seed, batch_size, steps):
    """Weights after `steps` updates: the oracle's ids and its update in float64."""
    return oracle_path(data, idiom_batches(seed, len(data.targets), batch_size, steps))[1]


@pytest.mark.notebooks
def test_drills_json_has_one_passing_row_per_drill(drills_json, recorded):
    assert [d["drill"] for d in drills_json["drills"]] == DRILLS
    assert [r["drill"] for r in drills_json["table"]] == DRILLS
    for drill in drills_json["drills"]:
        assert drill["passed"] is True, drill["drill"]
        assert drill["ids_equal"] is True and drill["max_weight_diff"] <= 1e-5, drill["drill"]
        assert drill["world_sizes"] and all("x" in w for w in drill["world_sizes"])
    assert drills_json["all_passed"] is True and recorded["drills"]["all_passed"] is True
    assert set(recorded["drills"]["rows"]) == set(DRILLS)
    assert (run_dir_figure := recorded["drills"]["figure"]) == "stage5_goodput.png", run_dir_figure


@pytest.mark.notebooks
def test_every_row_has_one_shape_and_the_table_is_its_projection(drills_json):
    from shardlab.multi import rows

    for row, shown in zip(drills_json["drills"], drills_json["table"]):
        assert set(rows.COLUMNS) <= set(row), row["drill"]
        assert set(shown) == set(rows.TABLE)
        assert {k: shown[k] for k in rows.TABLE if k in rows.COLUMNS} == {
            k: row[k] for k in rows.TABLE if k in rows.COLUMNS
        }
        assert len(shown["what"]) == len(shown["cause"]) == len(row["failures"])


@pytest.mark.notebooks
def test_every_final_state_matches_an_independent_numpy_run(drills_json, data):
    expected = numpy_weights(data, drills_json["seed"], drills_json["batch_size"], drills_json["steps"])
    finals = [drills_json["uninterrupted"]["final_weights"]]
    finals += [run["final_weights"] for run in drills_json["drills"][1]["runs"]]
    assert len(finals) == 3
    for weights in finals:
        np.testing.assert_allclose(weights, expected, rtol=1e-4, atol=1e-5)
    several = drills_json["drills"][0]
    path = several["against_control"]
    assert path["steps"] == [1, drills_json["steps"]] and path["matches"] is True


@pytest.mark.notebooks
def test_two_controllers_match_one_process(recorded):
    base = recorded["uninterrupted"]
    assert base["passed"] and base["ids_equal"] and base["processes_agree"]
    assert base["world_sizes"] == ["2x2"] and base["complete_steps"] == [3, 6, 9]


@pytest.mark.notebooks
def test_process_killed_while_its_background_save_is_written(recorded, drills_json):
    kill = recorded["async_kill"]
    assert (kill["process"], kill["phase"], kill["at_step"], kill["kind"]) == (1, "save-staged", 6, "failed")
    assert kill["cause"] == "killed (SIGKILL)"
    assert kill["resumed_from"] in (0, 3)  # 6 was being written: never "latest"
    assert kill["steps_lost"] == 6 - kill["resumed_from"]  # steps after the resume point, up to the kill
    bounds = drills_json["drills"][0]["failures"][0]
    assert kill["detect_s"] <= bounds["bound_s"]


@pytest.mark.notebooks
def test_coordinator_killed_mid_step_is_restarted_automatically(recorded, drills_json):
    kill = recorded["p0_kill"]
    assert (kill["process"], kill["phase"], kill["at_step"], kill["cause"]) == (0, "update", 8, "killed (SIGKILL)")
    assert kill["resumed_from"] in (3, 6) and kill["steps_lost"] == 8 - kill["resumed_from"]
    ports = [f["port"] for f in drills_json["drills"][0]["failures"]]
    assert len(set(ports)) == len(ports)


@pytest.mark.notebooks
def test_preemption_saves_the_agreed_step_and_loses_nothing(recorded):
    preempt = recorded["preemption"]
    assert (preempt["kind"], preempt["cause"], preempt["resumed_from"], preempt["steps_lost"]) == (
        "preempted",
        "preempted at step 8",
        8,
        0,
    )
    assert 8 % 3 != 0  # step 8 is no scheduled save (every 3 steps): only the preemption saved it


@pytest.mark.notebooks
def test_several_failures_make_one_continuous_run(recorded):
    run = recorded["several_failures"]
    assert run["passed"] and run["restarts"] == 3 and run["fresh_port_every_attempt"]
    assert run["ids_equal"] and run["max_weight_diff"] <= 1e-5
    assert run["resumed_from"][-1] == 8 and run["steps_lost"] >= 3
    goodput = run["goodput"]
    parts = [goodput[p] for p in ledger.PARTS]
    assert all(p >= 0 for p in parts) and sum(parts) == pytest.approx(goodput["total"], abs=0.01)


@pytest.mark.notebooks
def test_world_change_restores_on_other_meshes(recorded):
    drill = recorded["world_change"]
    assert drill["passed"] and drill["world_sizes"] == ["2x2", "1x4", "1x2"]  # make drills adds 4x1
    runs = drill["runs"]
    assert runs["1x2"]["default_contract"].startswith("refuses")
    assert runs["1x4"]["default_contract"] == "accepts"
    for run in runs.values():
        assert run["passed"] and run["ids_equal"] and run["max_loss_diff"] <= 1e-5


@pytest.mark.notebooks
def test_skipped_batch_is_detected_and_named(recorded, drills_json):
    drill = recorded["skipped_batch"]
    assert drill["passed"] and drill["skipper"] == 1 and drill["all_named_skipper"]
    assert set(drill["errors"]) == {"0", "1"}
    for text in drill["errors"].values():
        assert text.startswith("HangError") and "[1] skipped step 2" in text
    assert drill["detect_s"] <= drills_json["stop_bound_s"]


@pytest.mark.notebooks
def test_async_and_sync_saving_are_measured_side_by_side(run_dir):
    cost = results(run_dir, "stage5b_scaling")["async_vs_sync"]
    compiling = {-(-n // 4) * 4 for n in oracle.epoch_batches(23, 7)}  # padded shapes on 4 devices: 8, 4 slots
    for mode in ("sync", "async"):
        assert len(cost["samples"][mode]["save_block_s"]) == 10  # one save per step, every sample kept
        assert len(cost["samples"][mode]["step_s"]) == 10 - len(compiling)  # every compiling step left out
        assert len(cost["samples"][mode]["publish_s"]) == 10  # every saved step published, each timed
        assert cost["median"][mode]["step_s"] == pytest.approx(float(np.median(cost["samples"][mode]["step_s"])))
    ratio = cost["median"]["async"]["save_block_s"] / cost["median"]["sync"]["save_block_s"]
    assert cost["blocking_save_ratio_async_over_sync"] == pytest.approx(ratio, abs=1e-3)
    for mode, parts in cost["spread"].items():  # the table's spreads are the samples' own percentiles
        for what, shown in parts.items():
            q1, med, q3 = np.percentile(cost["samples"][mode][what], [25, 50, 75]) * 1e3
            assert (shown["q1_ms"], shown["median_ms"], shown["q3_ms"]) == pytest.approx((q1, med, q3), abs=1e-3)


@pytest.mark.notebooks
def test_denominator_is_the_same_for_every_split(recorded):
    split = recorded["denominator"]
    assert [split[n]["valid_per_device"] for n in ("1", "2", "4")] == [[7], [4, 3], [2, 2, 2, 1]]
    means = [split[n]["global_mean"] for n in ("1", "2", "4")]
    np.testing.assert_allclose(means, means[0], rtol=1e-6)
    assert abs(split["4"]["mean_of_device_means"] - means[0]) > 1e-4


def test_a_drill_series_removes_only_work_folders_their_process_left(tmp_path):
    """A failed notebook cell leaves its work folder; the next series removes it, and nothing else."""
    import subprocess

    from shardlab.multi import drills

    gone = subprocess.Popen(["true"])
    gone.wait()
    names = {
        f"{drills.WORK_PREFIX}{gone.pid}-a": False,  # its process has ended: removed
        f"{drills.WORK_PREFIX}{os.getpid()}-b": False,  # this process's earlier series (a re-run cell): removed
        f"{drills.WORK_PREFIX}1-c": True,  # a live process's series: kept
        f"{drills.WORK_PREFIX}notapid-d": True,  # not our name: kept
        "my-notes": True,
    }
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "x").write_text("x")
    (tmp_path / f"{drills.WORK_PREFIX}{gone.pid}-file").write_text("a file, not a folder: kept")
    drills._remove_left_work(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {n for n, kept in names.items() if kept} | {
        f"{drills.WORK_PREFIX}{gone.pid}-file"
    }


def test_a_named_stop_counts_only_when_each_report_names_it_and_each_exit_is_a_stop():
    """A peer aborted by JAX after the coordinator stopped still stopped by name; any other exit does not count."""
    import signal

    from shardlab.multi import drills
    from shardlab.multi.wait_guard import EXIT_STOPPED

    error = {"type": "HangError", "message": "process(es) [1] skipped step 2: agreement on step 3"}

    def outcome(codes, times, messages=(error, error)):
        return {
            "processes": 2,
            "event": {"injected": None},
            "exit_codes": dict(enumerate(codes)),
            "exit_times": dict(enumerate(times)),
            "reports": {pid: {"error": m} for pid, m in enumerate(messages)},
        }

    abort = -signal.SIGABRT
    assert drills._named(outcome((EXIT_STOPPED, EXIT_STOPPED), (1.0, 1.1)), "HangError", 1)
    assert drills._named(outcome((EXIT_STOPPED, abort), (1.0, 1.2)), "HangError", 1)  # after the coordinator
    assert not drills._named(outcome((EXIT_STOPPED, abort), (1.3, 1.2)), "HangError", 1)  # before it: a crash
    assert not drills._named(outcome((abort, EXIT_STOPPED), (1.0, 1.2)), "HangError", 1)  # the coordinator aborted
    assert not drills._named(outcome((EXIT_STOPPED, -signal.SIGKILL), (1.0, 1.2)), "HangError", 1)
    other = {"type": "HangError", "message": "process(es) [0] skipped step 2"}
    assert not drills._named(outcome((EXIT_STOPPED, abort), (1.0, 1.2), (error, other)), "HangError", 1)
    assert not drills._named(outcome((EXIT_STOPPED, abort), (1.0, 1.2), (error, None)), "HangError", 1)


def test_a_row_of_several_runs_shows_the_largest_difference_and_whether_every_run_kept_its_ids():
    from shardlab.multi import rows

    one = rows.row("d", True, ["2x2"], compared={"max_weight_diff": 2e-7, "ids_equal": True, "matches": True})
    assert (one["max_weight_diff"], one["ids_equal"]) == (2e-7, True)
    runs = [{"max_weight_diff": 1e-7, "ids_equal": True}, {"max_weight_diff": 3e-7, "ids_equal": False}]
    several = rows.row("d", False, ["2x2"], compared=runs)
    assert (several["max_weight_diff"], several["ids_equal"]) == (3e-7, False)
    stopped = rows.row("d", False, ["2x2"], compared=[runs[0], {"matches": False, "reason": "steps [1, 2]"}])
    assert (stopped["max_weight_diff"], stopped["ids_equal"]) == (None, None)  # no number, never 0 or inf
    assert (rows.row("d", True, ["2x2"])["max_weight_diff"], rows.row("d", True, ["2x2"])["ids_equal"]) == (None, None)


def test_a_failure_row_says_which_steps_its_attempt_saved_and_saw_published():
    """A step saved in the background but killed before its manifest: saved, not published, so not a resume point."""
    from shardlab.course import drill_records
    from shardlab.multi import scenarios

    progress = {
        0: [{"event": "saved", "step": 3}, {"event": "published", "step": 3}, {"event": "saved", "step": 6}],
        1: [{"event": "saved", "step": 3}, {"event": "saved", "step": 6}, {"event": "step", "step": 8}],
    }
    attempt = {"progress": progress}
    assert (scenarios._steps_seen(attempt, "saved"), scenarios._steps_seen(attempt, "published")) == ([3, 6], [3])
    keys = dict.fromkeys(drill_records.FAILURE_KEYS)
    (row,) = drill_records.failures({"failures": [{**keys, "saved": [3, 6], "published": [3]}]})
    assert [n for n in row["saved"] if n not in row["published"]] == [6]
    (old,) = drill_records.failures({"failures": [keys]})  # a row recorded before these fields: empty lists
    assert (old["saved"], old["published"]) == ([], [])


def test_a_finished_series_removes_its_cache_always_and_its_temporary_work_folder_unless_kept(tmp_path):
    from shardlab.multi import drills

    def series(name, temporary):
        ctx = drills.Context(str(tmp_path / name), 17, 7, 10.0, {}, shares_compiled=True, temporary=temporary)
        os.makedirs(ctx.cache)
        (tmp_path / name / "log.txt").write_text("a group's log")
        return ctx

    found = drills.finish(series("kept", True), tmp_path / "out", [], {}, keep=True)
    assert found["all_passed"] is True and (tmp_path / "out" / "drills.json").is_file()
    assert os.listdir(tmp_path / "kept") == ["log.txt"]  # the cache went, the work folder stayed
    drills.finish(series("removed", True), tmp_path / "out", [], {})
    assert not (tmp_path / "removed").exists()
    drills.discard(series("given", False))  # a folder the caller named (work=): only the cache goes
    assert os.listdir(tmp_path / "given") == ["log.txt"]
    drills.discard(series("measured", True))
    assert not (tmp_path / "measured").exists()


def test_a_drill_series_given_no_folder_is_refused_and_writes_nowhere(tmp_path, monkeypatch):
    from shardlab.errors import UsageError
    from shardlab.multi import drills

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where a fallback work folder would have gone
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(UsageError, match="needs a folder"):
        drills.begin(timeout=10.0)
    assert list(tmp_path.iterdir()) == []


def test_the_saving_comparison_keeps_every_step_but_those_of_a_new_batch_shape():
    from shardlab.multi import scenarios

    lengths = oracle.epoch_batches(23, 7) * 3  # ten steps of 23 rows in batches of 7 (the epoch read 7, 7, 7, 2)
    steps = [{"step": n, "ids": list(range(k)), "s": float(n)} for n, k in enumerate(lengths[:10], start=1)]
    kept = scenarios.warm_steps(steps, 4)
    # by hand: 7 rows pad to 8 slots (first at step 1), 2 rows to 4 slots (first at step 4); the rest repeat a shape
    assert kept == [2.0, 3.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert scenarios.warm_steps(steps[:3], 4) == [2.0, 3.0]  # one shape only: all but the first
