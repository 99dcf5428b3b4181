"""Stage 5: the completion manifest, the migration contract and the guard (no processes), then
the drills the stage 5 notebook ran once through the launcher (read from its receipts)."""

import hashlib
import json
import os
import threading
import time

import numpy as np
import pytest
from conftest import results

import shardlab as sl
from shardlab.core.errors import (
    CheckpointExistsError,
    ContractMismatchError,
    CorruptCheckpointError,
    HangError,
    IncompleteCheckpointError,
    LostProcessError,
    SamplerMismatchError,
)
from shardlab.multi import guard, manifest, migration

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
def group():
    client, stop, stops = FakeClient(), threading.Event(), []
    watch = guard.Guard(client, 0, 2, timeout=1.0, report=stops.append)
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


# ---- the drills, executed once by the stage 5 notebook in the shared run ----

NOTEBOOK = "stage5_multicontroller"
DRILLS = ["kill_during_save", "kill_during_step", "world_change", "skipped_batch"]


@pytest.fixture(scope="module")
def recorded(run_dir):
    return results(run_dir, NOTEBOOK)


@pytest.fixture(scope="module")
def drills_json(run_dir):
    with open(run_dir / "drills.json") as handle:
        return json.load(handle)


def numpy_weights(data, seed, batch_size, steps):
    """Weights after `steps` updates: the host sampler's IDs and the COURSE.md formulas in float64."""
    state = sl.initial_sampler(seed, len(data.targets))
    w = v = np.zeros(data.features.shape[1])
    for _ in range(steps):
        state, ids = sl.advance(state, batch_size)
        x, y = data.features[ids].astype(np.float64), data.targets[ids].astype(np.float64)
        grad = 2 * x.T @ (x @ w - y) / len(ids)
        v = 0.8 * v + grad
        w = w - 0.03 * v
    return w


@pytest.mark.notebooks
def test_drills_json_has_one_passing_entry_per_drill(drills_json, recorded):
    assert [d["drill"] for d in drills_json["drills"]] == DRILLS
    for drill in drills_json["drills"]:
        assert drill["passed"] is True, drill["drill"]
        assert drill["ids_equal"] is True and drill["max_weight_diff"] <= 1e-5, drill["drill"]
        assert drill["world_sizes"] and all("x" in w for w in drill["world_sizes"])
    assert drills_json["all_passed"] is True and recorded["drills"]["all_passed"] is True
    assert set(recorded["drills"]["rows"]) == set(DRILLS)


@pytest.mark.notebooks
def test_every_final_state_matches_an_independent_numpy_run(drills_json, data):
    expected = numpy_weights(data, drills_json["seed"], drills_json["batch_size"], drills_json["steps"])
    finals = [drills_json["uninterrupted"]["final_weights"]]
    finals += [drills_json["drills"][i]["final_weights"] for i in (0, 1)]
    finals += [run["final_weights"] for run in drills_json["drills"][2]["runs"]]
    assert len(finals) == 6
    for weights in finals:
        np.testing.assert_allclose(weights, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.notebooks
def test_two_controllers_match_one_process(recorded):
    base = recorded["uninterrupted"]
    assert base["passed"] and base["ids_equal"] and base["processes_agree"]
    assert base["world_sizes"] == ["2x2"] and base["complete_steps"] == [3, 6, 9]


@pytest.mark.notebooks
def test_kill_during_save_never_accepts_the_interrupted_step(recorded, drills_json):
    drill = recorded["kill_during_save"]
    assert drill["passed"] and drill["interrupted_step"] == 6 and drill["interrupted_step_accepted"] is False
    assert drill["accepted_step"] == 3 and drill["resumed_from"] == 3 and drill["restored_equals_control"]
    assert "no manifest" in drill["ignored"]["6"] and drill["set_aside"] == ["6"]  # Orbax finished step 6
    assert drill["survivors_named_victim"] and drill["errors"]["0"].startswith("LostProcessError")
    assert "[1]" in drill["errors"]["0"]
    assert drill["detect_s"] <= drills_json["stop_bound_s"]


@pytest.mark.notebooks
def test_kill_during_step_stops_survivors_naming_the_lost_process(recorded, drills_json):
    drill = recorded["kill_during_step"]
    assert drill["passed"] and drill["accepted_step"] == 6 and drill["resumed_from"] == 6
    assert drill["errors"]["0"].startswith("LostProcessError") and "[1]" in drill["errors"]["0"]
    assert drill["detect_s"] <= drills_json["stop_bound_s"]


@pytest.mark.notebooks
def test_world_change_restores_on_other_meshes(recorded):
    drill = recorded["world_change"]
    assert drill["passed"] and drill["world_sizes"] == ["2x2", "1x4", "4x1", "1x2"]
    runs = drill["runs"]
    assert runs["1x2"]["default_contract"].startswith("refuses")
    assert runs["1x4"]["default_contract"] == runs["4x1"]["default_contract"] == "accepts"
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
def test_denominator_is_the_same_for_every_split(recorded):
    split = recorded["denominator"]
    assert [split[n]["valid_per_device"] for n in ("1", "2", "4")] == [[7], [4, 3], [2, 2, 2, 1]]
    means = [split[n]["global_mean"] for n in ("1", "2", "4")]
    np.testing.assert_allclose(means, means[0], rtol=1e-6)
    assert abs(split["4"]["mean_of_device_means"] - means[0]) > 1e-4
