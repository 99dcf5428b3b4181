"""The reduced torture campaign (`make torture` with fewer trials, same categories)."""

import json
import os
import signal
import tempfile

import numpy as np
import pytest
from budget import examples
from conftest import npz_members
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardlab as sl
from rig.torture import REDUCED, badparams, command, corrupt, edges, fuzz, killsave, multi, outcome, subjects
from shardlab import process_group
from shardlab.errors import CheckpointError, CorruptCheckpointError
from shardlab.multi.drills import SAVE_EVERY

ZERO = outcome.FAILURES
# after these landings the final name exists: it is created by os.link, after the fsync
PUBLISHED = {"linked_or_failed", "temp_removed", "returned", "not_killed"}


@pytest.fixture(scope="module")
def states(mesh):
    return subjects.trajectory(REDUCED["kill_trials"] + 1, mesh)


@pytest.fixture(scope="module")
def contract():
    return subjects.experiment()[2]


@pytest.fixture(scope="module")
def good(tmp_path_factory, states, contract):
    path = tmp_path_factory.mktemp("good") / "good.npz"
    sl.save(path, states[-1], contract)
    return path, path.read_bytes()


def identical(restored, expected):
    host = sl.host_copy(restored)
    return all(np.asarray(host[n]).tobytes() == np.asarray(expected[n]).tobytes() for n in sl.FIELDS)


@pytest.mark.slow  # two zygotes, each importing JAX
def test_the_zygote_leads_its_own_group_and_none_of_it_outlives_close(monkeypatch):
    zygote = killsave.Zygote()
    assert os.getpgid(zygote.proc.pid) == zygote.proc.pid
    zygote.close()  # stdin closed: it exits by itself
    assert zygote.proc.returncode == 0 and zygote.proc not in process_group.LIVE
    with pytest.raises(ProcessLookupError):
        os.killpg(zygote.proc.pid, 0)
    monkeypatch.setattr(killsave, "CLOSE_TIMEOUT", 0.0)
    stuck = killsave.Zygote()
    os.kill(stuck.proc.pid, signal.SIGSTOP)  # cannot exit: its group is killed once the bound has passed
    stuck.close()
    assert stuck.proc.returncode == -signal.SIGKILL and stuck.proc not in process_group.LIVE


@pytest.mark.slow  # saves killed in child processes: make test's, not the inner loop's
def test_a_killed_save_leaves_the_old_checkpoint_or_nothing_never_a_wrong_state(tmp_path, states, contract, mesh):
    trials = REDUCED["kill_trials"]
    result = killsave.run(trials, tmp_path, states, contract, mesh, seed=0)
    assert result["trials"] == trials and all(result[k] == 0 for k in ZERO), result["failures"]
    assert result["refused"] + result["restored_exact"] == trials
    for record in result["details"]["trials"]:
        if record["kill"].startswith("stop_at:"):
            target = record["kill"].split(":", 1)[1]
            assert record["landed"] == ("mid_write" if target.startswith("write:") else target)
        assert record["outcome"] == ("exact" if record["landed"] in PUBLISHED else "refused"), record
        assert set(record["temp_files"]) <= {"exact", "refused"}
    assert {"mid_write", "written", "fsynced", "linked_or_failed"} <= set(result["details"]["kill_landed_after"])
    # read back with numpy alone: the accepted checkpoint is untouched, and every retried save holds its own state
    for name in sl.FIELDS:
        np.testing.assert_array_equal(npz_members(tmp_path / "accepted.npz")[name], states[0][name])
    for index in range(trials):
        saved = npz_members(tmp_path / f"trial-{index:03d}.npz")
        for name in sl.FIELDS:
            np.testing.assert_array_equal(saved[name], states[index + 1][name])
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_every_kind_of_corrupted_file_is_refused_or_restored_bit_identical(tmp_path, states, contract, mesh):
    foreign = subjects.experiment(seed=29, batch_size=10)[2]
    result = corrupt.run(REDUCED["corrupt_scale"], tmp_path, states, contract, foreign, mesh, seed=1)
    assert all(result[k] == 0 for k in ZERO), result["failures"]
    kinds = result["details"]["by_kind"]
    assert set(kinds) == set(corrupt.KINDS) and all(k["trials"] >= 1 for k in kinds.values())
    assert sum(k["trials"] for k in kinds.values()) == result["trials"] >= 30
    for kind in ("repack_value", "wrong_dtype", "listed_damage", "path_traversal", "huge_shape", "invalid_state_saved"):
        assert kinds[kind]["refused"] == kinds[kind]["trials"], kind


def test_a_plausible_edit_passes_every_field_check_and_only_the_checksum_refuses_it(
    tmp_path, good, states, contract, mesh
):
    members = npz_members(good[0])
    order = members["order"].copy()
    order[[0, 1]] = order[[1, 0]]
    corrupt.pack(str(tmp_path / "edited.npz"), {**members, "order": order})
    edited = npz_members(tmp_path / "edited.npz")
    assert sorted(edited["order"].tolist()) == list(range(23))  # still a permutation, same dtype and shape
    assert edited["order"].dtype == np.int32 and not np.array_equal(edited["order"], states[-1]["order"])
    with pytest.raises(CorruptCheckpointError, match="integrity checksum"):
        sl.restore(tmp_path / "edited.npz", contract, mesh)


@settings(
    max_examples=examples(150),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(1, 255)), max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 1 << 20)),
)
def test_any_byte_edit_or_truncation_is_refused_or_harmless(good, states, contract, mesh, flips, cut):
    path, raw = good
    data = bytearray(raw)
    for offset, mask in flips:
        data[offset % len(data)] ^= mask
    if cut is not None:
        data = data[: cut % len(data)]
    with tempfile.TemporaryDirectory() as folder:
        target = os.path.join(folder, "edited.npz")
        with open(target, "wb") as handle:
            handle.write(bytes(data))
        try:
            restored = sl.restore(target, contract, mesh)
        except CheckpointError:
            return
    assert identical(restored, states[-1]), (flips, cut)


@pytest.mark.notebooks  # its runner cases execute small notebooks (a previous run, a raising one)
def test_bad_parameters_raise_their_own_errors_and_leave_earlier_files_alone(tmp_path, states, mesh):
    data, config, contract = subjects.experiment()
    result = badparams.run(tmp_path, data, config, contract, states[-1], mesh, full=False)
    assert result["refused"] == result["trials"] and all(result[k] == 0 for k in ZERO), result["failures"]
    names = [c["case"] for c in result["details"]["cases"]]
    for needle in ("batch_size=0", "batch_size=-7", "empty dataset", "NaN", "num_devices=0", "3-device mesh"):
        assert any(needle in n for n in names), needle
    for needle in ("previous run without --replace", "raising notebook", "did not write", "check --"):
        assert any(needle in n for n in names), needle
    previous = tmp_path / "runner" / "previous"  # what badparams.previous_run wrote, read back directly
    assert sorted(p.relative_to(previous).as_posix() for p in previous.rglob("*")) == [
        ".shardlab-manifest.json",
        "failed",  # the raising run's partly executed notebook, published as its own manifest section
        "failed/raises.ipynb",
        "results",
        "results/stage1_batches.json",
        "stage1_batches.ipynb",
    ]
    assert sorted(json.loads((previous / ".shardlab-manifest.json").read_text())["commands"]) == ["run", "run-failed"]
    listed = json.loads((previous / ".shardlab-manifest.json").read_text())["commands"]["run"]["files"]
    assert sorted(listed) == ["results/stage1_batches.json", "stage1_batches.ipynb"]
    assert json.loads((previous / "results" / "stage1_batches.json").read_text()) == {"coverage": True}
    assert (tmp_path / "runner" / "foreign" / "notes.txt").read_text() == "a learner's notes\n"
    assert not [p for p in (tmp_path / "runner").rglob("*") if "staging" in p.name or ".old-" in p.name]
    assert any("path instead of a name" in n for n in names)


def test_the_command_writes_torture_json_with_the_counts_per_category(tmp_path, capsys):
    out = tmp_path / "out"
    code = command(["--reduced", "--only", "corrupted_files", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "torture.json").read_text())
    counts = report["categories"]["corrupted_files"]
    assert {"trials", "refused", "restored_exact", *ZERO} <= set(counts)
    assert counts["trials"] == counts["refused"] + counts["restored_exact"] and report["ok"] is True
    printed = capsys.readouterr().out
    assert "corrupted_files" in printed and "OK" in printed


def test_each_category_has_its_own_name():
    from rig.torture import categories

    assert len(set(categories.NAMES)) == len(categories.CATEGORIES) > 1  # --only picks one category by its name


@pytest.mark.controllers
@pytest.mark.long  # a controller group per kill trial: make test-long's
def test_killing_a_multi_process_save_never_accepts_a_wrong_step(tmp_path):
    result = multi.run(REDUCED["multi_trials"], tmp_path, seed=0)
    assert result["trials"] == REDUCED["multi_trials"] and all(result[k] == 0 for k in ZERO), result["failures"]
    assert result["refused"] + result["restored_exact"] == result["trials"]
    for record in result["details"]["trials"]:
        assert record["accepted_step"] in (record["interrupted_step"], record["interrupted_step"] - SAVE_EVERY), record
        assert record["drill_passed"], record


@pytest.mark.slow  # the torture run's edge categories: make test's, not the inner loop's
def test_the_edge_categories_count_every_failure_column_as_zero(tmp_path, states, contract, mesh, data):
    other_key = sl.host_copy(sl.initial(18, data, mesh))["key"]
    foreign = subjects.experiment(seed=29, batch_size=10)[2]
    results = {
        "output_folders": edges.output_folders(REDUCED["folder_trials"], tmp_path / "folders", seed=3),
        "hostile_restore": edges.hostile_restore(0.2, tmp_path / "hostile", states[:12], contract, other_key, mesh, 4),
        "save_refusals": edges.save_refusals(tmp_path / "save", states[:12], contract),
        "stale_temporaries": edges.stale_temporaries(2, tmp_path / "stale", states[:12], contract, mesh, seed=5),
        "orbax": edges.orbax(0, tmp_path / "orbax", states, contract, foreign, mesh),
        "fuzz": fuzz.run(REDUCED["fuzz_examples"], tmp_path / "fuzz", states[-1], contract, mesh, seed=6),
    }
    for name, result in results.items():
        assert result["clean"] and all(result[k] == 0 for k in ZERO), (name, result["failures"])
        assert result["trials"] >= 2 and (result["refused"] >= 1 or name == "stale_temporaries"), (name, result)
        assert result["trials"] == result["refused"] + result["restored_exact"], (name, result)
    cases = {c["case"] for c in results["output_folders"]["details"]["cases"]}
    assert {"a person's file in OUT", "SIGTERM during a run", "`bench` into a folder with foreign files"} <= cases
    assert results["hostile_restore"]["details"]["memory_over_bound"] == []
    assert results["fuzz"]["details"]["memory_over_bound"] == []


def test_one_table_names_every_column_the_tally_counts():
    from dataclasses import fields

    counted = [f.name for f in fields(outcome.Tally) if f.type is int]
    assert counted == list(outcome.COLUMNS)
    assert set(ZERO) == {"wrong_accepts", "lost", "unclear_errors", "leaks", "hangs", "writes_outside_out"}
    for name in outcome.OUTCOMES:  # each outcome raises its own column, and only a bad one spoils the tally
        tally = outcome.Tally()
        tally.count(name, "seen")
        assert tally.as_dict()[outcome.COUNTERS[name]] == 1 and tally.clean == (name not in outcome.BAD)


def test_a_wrong_accept_or_a_leak_fails_the_category(tmp_path, states, contract, mesh):
    tally = outcome.Tally()
    tally.attempt("accepts anything", lambda: states[-1], None)
    assert tally.wrong_accepts == 1 and not tally.clean
    tally = outcome.Tally()
    tally.count("leak", "a temporary survived")
    assert not tally.clean and tally.as_dict()["leaks"] == 1
    tally = outcome.Tally()
    tally.attempt("slow", lambda: __import__("time").sleep(0.2), None, bound=0.05)
    assert tally.hangs == 1 and not tally.clean


def test_the_fuzzer_builds_files_restore_must_judge(states, contract, tmp_path, mesh):
    good = sl.save(tmp_path / "good.npz", states[-1], contract)
    members = npz_members(good)
    example = {"contract": None, "edits": [], "deflate": False, "rehash": False, "prefix": b"", "suffix": b""}
    (tmp_path / "same.npz").write_bytes(fuzz.build(example, members))
    assert identical(sl.restore(tmp_path / "same.npz", contract, mesh), states[-1])  # unchanged: restored exactly
    (tmp_path / "deflated.npz").write_bytes(fuzz.build({**example, "deflate": True}, members))
    assert identical(sl.restore(tmp_path / "deflated.npz", contract, mesh), states[-1])
    for edit in ([("momentum", "drop", 0)], [("order", "byteorder", 0)], [("weights", "header", 1)]):
        (tmp_path / "edited.npz").write_bytes(fuzz.build({**example, "edits": edit, "rehash": True}, members))
        with pytest.raises(CheckpointError):
            sl.restore(tmp_path / "edited.npz", contract, mesh)
