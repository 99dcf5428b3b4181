"""Stage 5's scaling lab and runbook: ratios recomputed from the recorded samples, per-controller step logs,
and every runbook row proved by a passing drill."""

import json

import numpy as np
import pytest
from conftest import REPO, results

from shardlab.multi import drills, group_supervisor, rows, runbook, scenarios
from shardlab.perf import scaling

pytestmark = pytest.mark.stage5
NOTEBOOK = "stage5b_scaling"
COLUMNS = ("failure", "detector", "owner", "mitigation", "stop", "drills")  # the runbook table's, in docs/stage5.md


def runbook_markdown(timeout: float, drills_json: dict | None = None) -> str:
    """The runbook as a Markdown table; with a drills.json, each drill row marked passed, failed or not in it."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    marks = {True: "passed", False: "FAILED", None: "make drills"}
    verdicts = runbook.proof(drills_json) if drills_json else None
    for k, row in enumerate(runbook.rows(timeout)):
        marked = [f"`{d}`" + (f" ({marks[verdicts[k]['drills'][d]]})" if verdicts else "") for d in row["drills"]]
        lines.append("| " + " | ".join([row[c] for c in COLUMNS[:-1]] + [", ".join(marked)]) + " |")
    return "\n".join(lines)


# What drills.run_all runs besides scenarios.FULL (the reduced set is the notebook's first three).
CORE_DRILLS = {
    "several_failures",
    "world_change",
    "skipped_batch",
    "kill_during_save",
    "kill_during_step",
    "named_stop",
}
CLASSES = ("death", "freeze", "skipped batch", "preemption", "write failure", "crash loop")


@pytest.mark.notebooks
def test_efficiency_ratios_recompute_from_the_recorded_samples(run_dir):
    found = results(run_dir, NOTEBOOK)
    table = found["efficiency"]["table"]
    assert [r["devices"] for r in table] == [1, 2, 4]
    per_device = found["efficiency"]["rows_per_device"]
    medians = {r["devices"]: float(np.median(r["samples_ms"])) for r in table}
    for r in table:
        assert r["rows"] == per_device * r["devices"] and len(r["samples_ms"]) == scaling.GRID_SAMPLES
        assert r["median_ms"] == pytest.approx(medians[r["devices"]])
        throughput = r["rows"] / (medians[r["devices"]] / 1e3)
        assert r["rows_per_s"] == pytest.approx(throughput)
        one = table[0]["rows"] / (medians[1] / 1e3)
        assert r["efficiency"] == pytest.approx(throughput / (r["devices"] * one))
        # its range over the middle halves: W's slowest quartile against one device's fastest, and the reverse
        q1, q3 = np.percentile(r["samples_ms"], [25, 75])
        q1_1, q3_1 = np.percentile(table[0]["samples_ms"], [25, 75])
        low, high = (
            (r["rows"] / q3) / (r["devices"] * table[0]["rows"] / q1_1),
            (r["rows"] / q1) / (r["devices"] * table[0]["rows"] / q3_1),
        )
        assert r["efficiency_range"] == pytest.approx([low, high])
        assert low <= r["efficiency"] <= high


@pytest.mark.notebooks
def test_every_controller_logs_data_agreement_and_compute_per_step(run_dir):
    found = results(run_dir, NOTEBOOK)["step_times"]
    drills_json = json.loads((run_dir / "drills.json").read_text())
    assert found["per_rank"] == drills_json["uninterrupted"]["step_times"]
    assert set(found["per_rank"]) == {"0", "1"}
    for rank, records in found["per_rank"].items():
        assert [r["step"] for r in records] == list(range(1, drills_json["steps"] + 1)), rank
        for r in records:
            assert all(r[k] >= 0 for k in ("data_s", "agreement_s", "compute_s")), r
    # 23 rows in batches of 7 on 4 devices: per epoch 7, 7, 7, 2 rows, padded to 8, 8, 8, 4 slots, so the update
    # meets a new shape at step 1 and at step 4 (the first short batch), and compiles there
    lengths = ([7, 7, 7, 2] * 3)[: drills_json["steps"]]
    padded = [-(-n // 4) * 4 for n in lengths]
    compiles = [k + 1 for k, p in enumerate(padded) if p not in padded[:k]]
    assert compiles == [1, 4] and found["compiles"]["compile_steps"] == compiles
    totals = {
        rank: [1e3 * (r["data_s"] + r["agreement_s"] + r["compute_s"]) for r in recs]
        for rank, recs in found["per_rank"].items()
    }
    assert found["compiles"]["min_compile_ms"] == pytest.approx(
        min(t[s - 1] for t in totals.values() for s in compiles)
    )
    rest = [ms for t in totals.values() for k, ms in enumerate(t, start=1) if k not in compiles]
    assert found["compiles"]["max_other_ms"] == pytest.approx(max(rest))
    rows_shown = {(row["process"], row["phase"].split(" ")[0]): row for row in found["spread_after_compiles"]}
    for rank, records in found["per_rank"].items():
        for key in ("data_s", "agreement_s", "compute_s"):
            kept = [r[key] for r in records if r["step"] not in compiles]
            q1, med, q3 = np.percentile(kept, [25, 50, 75]) * 1e3
            row = rows_shown[(rank, key.removesuffix("_s"))]
            assert (row["n"], row["q1_ms"], row["median_ms"], row["q3_ms"]) == pytest.approx(
                (len(kept), q1, med, q3), abs=1e-3
            )
    assert (run_dir / "stage5_step_times.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_death_bound_is_stated_in_polls_and_the_crash_loop_by_its_budgets():
    stops = {row["class"]: row["stop"] for row in runbook.rows(drills.TIMEOUT)}
    polls = round(group_supervisor.DEATH_S / group_supervisor.POLL)  # 0.5 s / 0.05 s: 10, by hand
    assert polls == 10 and f"within {group_supervisor.DEATH_S} s" in stops["death"], stops["death"]
    assert f"every {group_supervisor.POLL} s; the bound allows {polls} polls" in stops["death"], stops["death"]
    budgets = f"({group_supervisor.BUDGET} by default; {scenarios.CRASH_LOOP_BUDGET} in the crash-loop drill"
    assert budgets in stops["crash loop"], stops["crash loop"]


def test_every_runbook_row_names_drill_rows_that_exist_and_says_who_acts():
    names = CORE_DRILLS | {name for name, _ in scenarios.FULL}
    assert [row["class"] for row in runbook.ROWS] == list(CLASSES)
    for row in runbook.rows(drills.TIMEOUT):
        assert row["drills"] and set(row["drills"]) <= names, row["failure"]
        assert all(row[column].strip() for column in COLUMNS[:-1]), row["failure"]
        assert "{" not in row["stop"], row["stop"]  # every bound filled in


@pytest.mark.notebooks
def test_runbook_rows_the_notebook_proves_link_to_passing_drill_rows(run_dir):
    drills_json = json.loads((run_dir / "drills.json").read_text())
    ran = {row["drill"]: row["passed"] for row in drills_json["table"]}
    proved = runbook.proof(drills_json)
    assert results(run_dir, NOTEBOOK)["runbook"] == proved
    for row in proved:
        for name, verdict in row["drills"].items():
            assert verdict is (ran[name] if name in ran else None), (row["class"], name)
    by_class = {row["class"]: row["drills"] for row in proved}
    for failure in ("death", "skipped batch", "preemption"):
        assert any(by_class[failure].values()), failure  # proved in this very run


@pytest.mark.controllers
@pytest.mark.long  # three drills' controller groups, one waiting out a freeze: make test-long's
def test_runbook_rows_only_make_drills_runs_are_proved_by_their_drills(tmp_path):
    """Freeze, a failed background write and a crash loop: the notebook does not run them, so run them here."""
    full = dict(scenarios.FULL)
    ctx = drills.begin(17, 7, drills.TIMEOUT, out_dir=tmp_path)
    found = [full[name](ctx) for name in ("p1_frozen", "async_write_fails", "crash_loop")]
    report = {"table": [rows.table(r) for r in found]}
    causes = {r["drill"]: r["cause"] for r in report["table"]}
    assert causes["p1_frozen"][0].startswith("frozen") and "AsyncSaveError" in causes["async_write_fails"][0]
    assert found[2]["error"]["type"] == "RestartBudgetError" and len(causes["crash_loop"]) == 3
    by_class = {row["class"]: row["drills"] for row in runbook.proof(report)}
    for failure in ("freeze", "write failure", "crash loop"):
        assert any(v is True for v in by_class[failure].values()), (failure, by_class[failure])
        assert not any(v is False for v in by_class[failure].values()), (failure, by_class[failure])


def test_runbook_entries_call_a_stop_condition_observed_only_where_a_drill_of_its_row_ran():
    # a report that ran one death drill and one preemption drill: those two rows observed, the other four designed
    report = {"table": [{"drill": "kill_during_step", "passed": True}, {"drill": "p1_preempted", "passed": False}]}
    lines = runbook.entries(drills.TIMEOUT, report, ran_in="stage 5a").splitlines()
    assert "drills run in stage 5a" in lines[0] and "not run here (`make drills` runs them)" in lines[0]
    designed = {row["class"] for row in runbook.ROWS} - {"death", "preemption"}
    assert len(lines[2:]) == len(runbook.ROWS) == 6
    ran = {"kill_during_step": "passed", "p1_preempted": "FAILED"}
    for row, line in zip(runbook.rows(drills.TIMEOUT), lines[2:]):
        cells = [c.strip() for c in line.strip(" |").split(" | ")]
        label = "designed bound, not observed in stage 5a: "
        assert cells[2] == (label + row["stop"] if row["class"] in designed else row["stop"]), line
        # the drills that ran, with their verdicts, apart from those that did not, each named, not counted
        shown = [f"`{d}` ({ran[d]})" for d in row["drills"] if d in ran]
        left = [f"`{d}`" for d in row["drills"] if d not in ran]
        assert cells[3:] == [", ".join(shown) or "none", ", ".join(left) or "none"], line


def test_runbook_entries_can_leave_out_the_drills_only_make_drills_runs():
    report = {"table": [{"drill": "kill_during_step", "passed": True}]}
    full = runbook.entries(drills.TIMEOUT, report).splitlines()
    short = runbook.entries(drills.TIMEOUT, report, unrun=False).splitlines()
    assert len(short) == len(full) == 2 + len(runbook.ROWS)
    assert "not run here" not in short[0] and all(line.count(" | ") == 3 for line in short), short
    for whole, cut in zip(full, short):  # the same row, less its last column
        assert whole.startswith(cut), (whole, cut)
    unrun = [d for row in runbook.ROWS for d in row["drills"] if d != "kill_during_step"]
    assert not any(f"`{d}`" in "\n".join(short) for d in unrun), short


def test_docs_show_the_runbook_table():
    assert runbook_markdown(drills.TIMEOUT) in (REPO / "docs" / "stage5.md").read_text()


def test_phase_spreads_leave_out_the_compiling_steps_and_name_the_longer_process():
    from shardlab.multi import phases

    def record(step, data, agreement, compute):
        return {"step": step, "data_s": data, "agreement_s": agreement, "compute_s": compute}

    step_times = {
        "0": [record(1, 0.1, 0.2, 0.5), record(2, 0.001, 0.002, 0.004), record(3, 0.001, 0.004, 0.006)],
        "1": [record(1, 0.1, 0.2, 0.4), record(2, 0.001, 0.001, 0.002), record(3, 0.001, 0.001, 0.002)],
    }
    rows = phases.table(step_times, leave_out=[1])
    compute_0 = next(r for r in rows if r["process"] == "0" and r["phase"].startswith("compute"))
    assert (compute_0["n"], compute_0["median_ms"]) == (2, pytest.approx(5.0))  # steps 2, 3: 4 and 6 ms
    assert (compute_0["q1_ms"], compute_0["q3_ms"]) == (pytest.approx(4.5), pytest.approx(5.5))
    longer, shorter, ratio = phases.longer_first(rows, "compute")
    assert (longer["process"], shorter["process"], ratio) == ("0", "1", pytest.approx(5.0 / 2.0))
    height = phases.compile_height(step_times, [1])
    # by hand: step 1 takes 800 and 700 ms; the longest other step is process 0's step 3, 11 ms
    assert (height["min_compile_ms"], height["max_other_ms"]) == (pytest.approx(700.0), pytest.approx(11.0))
    # that step's own record: 1 + 4 + 6 ms, the compute phase the longest
    assert (height["max_other_other"], height["max_other_process"], height["max_other_phase"]) == (3, "0", "compute")
    # its two longest phases with their ms: compute 6, agreement 4
    assert (height["max_other_phase_ms"], height["max_other_second"]) == (pytest.approx(6.0), "agreement")
    assert height["max_other_second_ms"] == pytest.approx(4.0)
    # the same step 3 on process 1: 1 + 1 + 2 ms
    assert (height["max_other_peer"], height["max_other_peer_ms"]) == ("1", pytest.approx(4.0))
