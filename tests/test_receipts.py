"""Receipts stay honest: audit.json's schema and invariants, for the committed receipts and a fresh run.

Invariants only (counts, equalities, zero and non-zero errors, files that exist), never timings.
The committed receipts are checked against what determines them now (audit.json's `sources`:
the notebooks, the data files, each module a run executes without its comments and docstrings,
the runtime pins): after a change to any of those, `make run` regenerates them; a comment or a
docstring needs no run.
"""

import ast
import gzip
import hashlib
import json
import re
from importlib import metadata

import nbformat
import numpy as np
import pytest
from conftest import REPO, executed, results
from test_lab import padding_line

from shardlab.course import catalog
from shardlab.evidence import hypothesis, sources

pytestmark = pytest.mark.stage4

COMMITTED = REPO / "receipts"
VARIANTS = ("eager_4dev", "compiled_4dev", "compiled_1dev")
PREPARE, UPDATE, STEP = "prepare_and_place_ms", "compiled_update_and_wait_ms", "sharded_learner_step_ms"
FAULTS = ("momentum", "cursor", "key")
FIXTURES = {"seed17_batch7", "seed29_batch10"}
RECOVERY_DIFFERENCES = ("weights", "momentum", "key", "order", "cursor", "step", "ids_mismatched", "losses")
KEYS = {
    "schema_version",
    "run",
    "environment",
    "sources",
    "notebooks",
    "timing",
    "trace",
    "device_counts",
    "all_reduce",
    "recovery",
    "fresh_kernel_recovery",
    "faults",
    "figure",
    "drills",
    "results",
    "missing",
}


def load_audit(folder):
    path = folder / "audit.json"
    assert path.is_file(), f"{path} is missing: run `make run` to regenerate the receipts"
    return json.loads(path.read_text())


def without_docstrings(text: str) -> str:
    """ast.dump of `text` without its docstrings: written here, beside the library's own, to check it."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def current_sources(root=REPO / "lib" / "shardlab"):
    """What determines the receipts now, for the tree at `root`: the inputs `receipt_sources` names, hashed here.

    A module (a .py file outside templates/) is hashed as its docstring-free AST dump unless a notebook
    prints its source (`printed_modules`), any other
    file byte for byte (course/notebooks is a link to the checkout's notebooks/), a distribution
    by its installed version.
    """
    found, printed = {}, printed_modules(root)
    for key in sources.receipt_sources(root=root):
        if key.startswith("dist/"):
            found[key] = metadata.version(key.removeprefix("dist/"))
            continue
        path = root / key.removeprefix("shardlab/")
        module = path.suffix == ".py" and "templates" not in path.parts and key not in printed
        body = without_docstrings(path.read_text()).encode() if module else path.read_bytes()
        found[key] = hashlib.sha256(body).hexdigest()
    return found


def printed_modules(root) -> set[str]:
    """'shardlab/<path>.py' of each module a notebook prints source from (`inspect.getsource(name.attr)`), by regex.

    Their page shows comments and docstrings, so they are hashed byte for byte.
    """
    found = set()
    for notebook in (root / "course" / "notebooks").glob("*.md"):
        text = notebook.read_text()
        bound = {}
        for package, names in re.findall(r"^from (shardlab[\w.]*) import ([\w, ]+)$", text, flags=re.M):
            bound |= {name.strip(): f"{package}.{name.strip()}" for name in names.split(",")}
        for name in re.findall(r"getsource\((\w+)\.", text):
            found.add(bound[name].replace(".", "/") + ".py")
    return found


def stale(recorded: dict, current: dict) -> list[str]:
    """Inputs whose hash differs, plus inputs added or removed since the audit was written."""
    return sorted(p for p in set(recorded) | set(current) if recorded.get(p) != current.get(p))


def stale_report(recorded: dict, current: dict) -> str:
    """Every stale input by name: changed, added (not in the audit) or removed (in the audit only)."""
    kinds = {"changed": [], "added": [], "removed": []}
    for key in stale(recorded, current):
        kinds["added" if key not in recorded else "removed" if key not in current else "changed"].append(key)
    return "; ".join(f"{kind}: {', '.join(keys)}" for kind, keys in kinds.items() if keys)


def perfetto_ms(path):
    """{annotation: [ms, ...]} in time order, read directly from the gzipped Perfetto JSON."""
    with gzip.open(path, "rt") as handle:
        events = [e for e in json.load(handle)["traceEvents"] if e.get("ph") == "X"]
    found = {key: [] for key in (STEP, PREPARE, UPDATE)}
    for event in sorted(events, key=lambda e: e["ts"]):
        if f"{event['name']}_ms" in found:
            found[f"{event['name']}_ms"].append(event["dur"] / 1e3)
    return found


def inside(folder, relative):
    """`relative` is a relative path naming a file inside `folder`."""
    assert not relative.startswith("/") and ".." not in relative.split("/"), relative
    path = folder / relative
    assert path.is_file(), f"{relative} is listed in audit.json but missing from {folder.name}/"
    return path


def planned_samples() -> dict:
    """How many warm samples stage 4a's parameters ask of each variant (its `samples`, and `eager_samples`)."""
    text = (REPO / "notebooks" / "stage4a_profile.md").read_text()
    samples, eager = (int(re.search(rf"^{name} = (\d+)", text, re.M).group(1)) for name in ("samples", "eager_samples"))
    return {name: eager if name == "eager_4dev" else samples for name in VARIANTS}


def check_timing(timing):
    planned = planned_samples()
    for name in VARIANTS:
        row = timing[name]
        assert len(row["samples_ms"]) == planned[name], name
        assert all(np.isfinite(s) and s > 0 for s in row["samples_ms"]), name
        assert row["median_ms"] == pytest.approx(np.median(row["samples_ms"]))
    assert timing["eager_4dev"]["compile_ms"] is None
    assert timing["compiled_4dev"]["compile_ms"] > 0 and timing["compiled_1dev"]["compile_ms"] > 0
    median = {name: np.median(timing[name]["samples_ms"]) for name in VARIANTS}
    assert timing["ratios"]["compiled_4dev_over_compiled_1dev"] == pytest.approx(
        median["compiled_4dev"] / median["compiled_1dev"]
    )
    assert timing["ratios"]["eager_4dev_over_compiled_4dev"] == pytest.approx(
        median["eager_4dev"] / median["compiled_4dev"]
    )
    # the rotation is planned for the most samples; a capped variant keeps only its first planned[name] rounds
    assert len(timing["order"]) == max(planned.values()) and all(sorted(r) == sorted(VARIANTS) for r in timing["order"])
    leads = [r[0] for r in timing["order"]]
    assert all(leads.count(name) >= 3 for name in VARIANTS), "the order alternates"
    assert max(timing["max_abs_error_vs_numpy"].values()) < 1e-4
    assert "no sampling, no placement" in timing["boundary"]


def check_trace(folder, trace):
    xplane, perfetto = inside(folder, trace["xplane"]), inside(folder, trace["perfetto"])
    assert xplane.name.endswith(".xplane.pb") and perfetto.name.endswith(".json.gz")
    rows = trace["transitions"]
    assert [r["transition"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        assert r[PREPARE] > 0 and r[UPDATE] > 0 and r[PREPARE] + r[UPDATE] <= r[STEP]
        assert r["reshuffled"] is True
    direct = perfetto_ms(perfetto)
    for key in (STEP, PREPARE, UPDATE):
        np.testing.assert_allclose([r[key] for r in rows], direct[key], atol=1e-3, err_msg=key)
    larger = PREPARE if np.median(direct[PREPARE]) >= np.median(direct[UPDATE]) else UPDATE
    assert f"{trace['dominant']['dominant']}_ms" == larger
    guess = trace["hypothesis"]  # the learner's (the worked example in an untouched run)
    targets = {"one_call_reshuffle": (PREPARE, UPDATE), "packed_psum": (UPDATE, PREPARE)}
    assert (f"{guess['annotation']}_ms", f"{guess['control']}_ms") == targets[guess["change"]]
    assert 0 < guess["threshold_ms"] <= guess["baseline_ms"] and f"{guess['threshold_ms']:.3f} ms" in guess["text"]
    # a change removes at most the median of what it shortens
    target = np.median(direct[f"{guess['annotation']}_ms"])
    assert guess["threshold_ms"] <= target + 1e-3
    if guess["change"] == "one_call_reshuffle":
        # its target is the draw's parts of the annotation: each transition's parts add up to its traced total
        for r, total in zip(rows, direct[PREPARE]):
            assert r["jitted_dispatch_ms"] + r["other_ms"] + r["placement_ms"] == pytest.approx(total, abs=2e-3)
        parts = float(np.median([r["jitted_dispatch_ms"] + r["other_ms"] for r in rows]))
        assert guess["baseline_ms"] == pytest.approx(parts, abs=1e-3)
    else:
        assert guess["baseline_ms"] == pytest.approx(target, abs=1e-3)
    assert trace["example_run"] == (guess["whose"] != "your hypothesis")


def check_change(folder, trace, change):
    """The named change was traced beside the unchanged loop, and judged with the control's drift in view.

    The annotations' totals are read from the capture's trace file; where the change targets parts of an
    annotation (its jitted dispatches and the rest), the recorded parts of each transition must add up to
    that transition's total in the trace, and the target and control are summed from them here."""
    guess = trace["hypothesis"]
    assert change["change"] == guess["change"]
    direct = perfetto_ms(inside(folder, change["perfetto"]))
    per_side = len(change["order"]) // 2
    keys = hypothesis.quantities(change["change"], change.get("unchanged_breakdown") or change["rows"]["unchanged"])
    values, breakdowns = {}, {}
    for side in ("unchanged", "changed"):
        totals = {k: [v for v, who in zip(direct[k], change["order"]) if who == side] for k in direct}
        assert len(totals[f"{change['annotation']}_ms"]) == per_side >= 8
        parts = breakdowns[side] = change.get(f"{side}_breakdown") or [{} for _ in range(per_side)]
        assert len(parts) == per_side
        for k, row in enumerate(parts):
            if row:  # the parts of the annotation add up to its total in the trace
                whole = row["jitted_dispatch_ms"] + row["other_ms"] + row["placement_ms"]
                assert whole == pytest.approx(totals[f"{change['annotation']}_ms"][k], abs=2e-3)

        def read(key, k, totals=totals, parts=parts):
            return totals[key][k] if key in totals else parts[k][key]

        values[side] = {
            role: [sum(read(key, k) for key in keys[f"{role}_keys"]) for k in range(per_side)]
            for role in ("target", "control")
        }
    median = {r: {s: float(np.median(values[s][r])) for s in values} for r in ("target", "control")}
    cut = median["target"]["unchanged"] - median["target"]["changed"]
    drift = median["control"]["unchanged"] - median["control"]["changed"]
    spread = max(np.subtract(*np.percentile(values[s][r], [75, 25])) / 2 for s in values for r in values[s])
    assert change["cut_ms"] == pytest.approx(cut, abs=2e-3)
    assert change["control_drift_ms"] == pytest.approx(drift, abs=2e-3)
    noise, reach, threshold = max(abs(drift), spread), change["reach_ms"], guess["threshold_ms"]
    assert change["noise_ms"] == pytest.approx(noise, abs=2e-3)
    # the most the change can remove: the unchanged target's median in this same capture
    assert reach == pytest.approx(median["target"]["unchanged"], abs=2e-3)
    edges = [abs(abs(drift) - threshold), abs(threshold - reach)]
    edges += [abs(cut - noise - threshold), abs(cut + noise - threshold)]
    if min(edges) <= 2e-3:  # within a few microseconds of a boundary: the rounding of the trace files decides
        expected = change["verdict"]
    elif abs(drift) > threshold or threshold > reach:
        expected = "inconclusive"  # the control moved more than the effect, or the threshold beyond the target
    elif cut - noise >= threshold:
        expected = "confirmed"
    elif cut + noise < threshold:
        expected = "refuted"
    else:
        expected = "inconclusive"
    assert change["verdict"] == expected and change["confirmed"] == (expected == "confirmed")
    if len(keys["target_keys"]) > 1:  # the mechanism, judged apart from the effect
        found = mechanism_verdict(change, keys["target_keys"][0], breakdowns, threshold, noise)
        assert change["mechanism_verdict"] == found


def mechanism_verdict(change, first, breakdowns, threshold, noise):
    """The first part of a split target (the mechanism's): supported if it fell by the threshold with the changed
    middle half below the unchanged one, not supported if it fell short by more than the noise where its unchanged
    median could fall by the threshold at all, else not shown."""
    part = {side: [row[first] for row in rows] for side, rows in breakdowns.items()}
    whole = float(np.median(part["unchanged"]))
    fall = whole - float(np.median(part["changed"]))
    apart = np.percentile(part["changed"], 75) < np.percentile(part["unchanged"], 25)
    edges = [abs(fall - threshold), abs(fall + noise - threshold), abs(whole - threshold)]
    if min(edges) <= 2e-3:  # the rounding of the trace files decides
        return change["mechanism_verdict"]
    if fall >= threshold and apart:
        return "supported"
    return "not supported" if fall + noise < threshold and threshold <= whole else "not shown"


def check_stage3(recovery, faults):
    assert all(recovery[k] == 0 for k in RECOVERY_DIFFERENCES), recovery
    assert recovery["steps_compared"] > 0 and recovery["epochs_covered"] > 2
    assert {row["fixture"] for row in faults} == FIXTURES
    for fixture in FIXTURES:
        rows = {row["fault"]: row for row in faults if row["fixture"] == fixture}
        assert set(FAULTS) <= set(rows), fixture
        for fault in FAULTS:
            assert rows[fault]["max_weight_error"] > 0, (fixture, fault)
            assert isinstance(rows[fault]["first_divergence_step"], int), (fixture, fault)
        assert rows["cursor"]["ids_changed"] and rows["key"]["ids_changed"]
        if "none" in rows:
            assert rows["none"]["max_weight_error"] == 0 and rows["none"]["first_divergence_step"] is None


def check_audit(folder, audit):
    """Schema and invariants of one receipts folder."""
    assert KEYS <= set(audit), f"audit.json lacks {sorted(KEYS - set(audit))}"
    assert audit["missing"] == [], f"the run left results missing: {audit['missing']}"
    assert audit["schema_version"] == 1
    assert audit["run"]["notebooks"] == catalog.NOTEBOOKS
    assert audit["notebooks"] == {n: {"executed": f"{n}.ipynb", "html": f"{n}.html"} for n in catalog.NOTEBOOKS}
    for name in catalog.NOTEBOOKS:
        assert "<html" in inside(folder, f"{name}.html").read_text(encoding="utf-8")[:2000].lower()
        assert nbformat.read(inside(folder, f"{name}.ipynb"), as_version=4).metadata.papermill.exception is None
    env = audit["environment"]
    assert len(env["devices"]) == 4 and env["backend"] == "cpu" and env["cpu_count"] >= 1
    assert {"jax", "jaxlib", "numpy"} <= set(env["packages"]) and env["python"].startswith("3.")
    check_timing(audit["timing"])
    check_trace(folder, audit["trace"])
    check_stage3(audit["recovery"], audit["faults"])
    assert set(audit["fresh_kernel_recovery"]) == FIXTURES
    for fixture, entry in audit["fresh_kernel_recovery"].items():  # each through its own pair of fresh kernels
        assert entry["saved_by"] != entry["resumed_by"], fixture
        assert all(entry["recovery"][k] == 0 for k in RECOVERY_DIFFERENCES), (fixture, entry["recovery"])
    ir = inside(folder, audit["all_reduce"]["ir"]).read_text()
    ops = len(re.findall(r'"stablehlo\.all_reduce"|stablehlo\.all_reduce\(', ir))
    assert audit["all_reduce"]["count"] == audit["all_reduce"]["recorded"] == ops == 3
    assert audit["device_counts"]["batch_of_7_rows"] == [2, 2, 2, 1]  # 7 rows -> 8 slots over 4 devices
    assert audit["device_counts"]["batch_of_1_row"] == [1, 0, 0, 0]
    assert inside(folder, audit["figure"]["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in inside(folder, audit["figure"]["svg"]).read_text()[:1000]
    stored = {p.stem: json.loads(p.read_text()) for p in (folder / "results").glob("*.json")}
    assert audit["results"] == stored
    drills = folder / "drills.json"
    assert audit["drills"] == (json.loads(drills.read_text()) if drills.is_file() else None)
    # the names alone: which inputs the audit hashes (their hashes are the freshness tests' to compare)
    assert set(audit["sources"]) == set(sources.receipt_sources()), "the audit hashes every input of the receipts"


def absolute_paths(folder, roots):
    """(file, root) for every file in `folder` whose bytes (unzipped if .gz) contain one of `roots`."""
    hits = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        body = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        hits += [(path.relative_to(folder).as_posix(), root) for root in roots if root.encode() in body]
    return hits


@pytest.mark.notebooks
def test_fresh_run_audit(run_dir):
    audit = load_audit(run_dir)
    check_audit(run_dir, audit)
    assert stale(audit["sources"], current_sources()) == []
    env = audit["environment"]
    assert {k: env["packages"][k] for k in ("jax", "jaxlib", "numpy")} == {
        k: metadata.version(k) for k in ("jax", "jaxlib", "numpy")
    }


@pytest.mark.notebooks
def test_fresh_run_holds_no_absolute_paths(run_dir):
    hits = absolute_paths(run_dir, [str(REPO), str(run_dir.resolve().parent), ".staging-"])
    assert not hits, f"receipts hold absolute, machine-specific paths (file, path): {hits}; write relative paths"


@pytest.mark.notebooks
def test_stage4_notebook_records_what_the_audit_holds(run_dir):
    found = results(run_dir, "stage4a_profile")
    audit = load_audit(run_dir)
    for key in ("timing", "trace", "environment", "figure"):
        assert found[key] == audit[key], key
    check_change(run_dir, found["trace"], found["change"])
    assert set(found["compile"]) == set(VARIANTS)
    assert {k: found["timing"][k]["compile_ms"] for k in VARIANTS} == {
        k: found["compile"][k]["compile_ms"] for k in VARIANTS
    }
    nb = executed(run_dir, "stage4a_profile")  # the figure the receipts keep is shown once, by its own cell
    shown = [c for c in nb.cells if any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert len(shown) == 1 and "figure.figure(" in shown[0].source, [c.source[:80] for c in shown]
    assert inside(run_dir, found["figure"]["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runner_runs_stage4_after_stage3():
    names = catalog.NOTEBOOKS  # stage 4's figure reads stage 3's fault results from the same folder
    assert names.index("stage4a_profile") > max(names.index("stage3a_checkpoint"), names.index("stage3b_resume"))


def test_committed_receipts_follow_the_schema():
    check_audit(COMMITTED, load_audit(COMMITTED))
    hits = absolute_paths(COMMITTED, [str(REPO), "/home/", ".staging-"])
    assert not hits, f"receipts hold absolute, machine-specific paths (file, path): {hits}; write relative paths"


@pytest.mark.slow  # every committed receipt read and compared: make test's, not the inner loop's
def test_committed_stage1_prints_the_padding_the_browser_test_looks_for():
    """The line the real-browser run of stage 1 looks for (make test-browser, run only by CI) is in stage 1's
    executed output: a change to that line's wording fails here, not first in CI."""
    nb = nbformat.read(COMMITTED / "stage1_batches.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert padding_line() in printed, padding_line()


def test_committed_receipts_match_current_sources():
    recorded, current = load_audit(COMMITTED)["sources"], current_sources()
    changed = stale(recorded, current)
    assert not changed, (
        f"receipts/audit.json was written from other inputs: {len(changed)} stale ({stale_report(recorded, current)}). "
        "Run `make run` to regenerate the receipts, then commit them."
    )


def test_relative_paths_rewrites_paths_into_the_folder(tmp_path):
    from nbformat.v4 import new_notebook

    from shardlab.evidence import paths

    folder = (tmp_path / "staging").resolve()
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "note.txt").write_text(f"committed to {folder}/sub/x and {folder}\n")
    nb = new_notebook()
    nb.metadata["papermill"] = {"input_path": "/somewhere/notebooks/a.ipynb", "output_path": f"{folder}/a.ipynb"}
    nbformat.write(nb, folder / "a.ipynb")
    paths.relative_paths(folder)
    assert (folder / "sub" / "note.txt").read_text() == "committed to sub/x and .\n"
    meta = nbformat.read(folder / "a.ipynb", as_version=4).metadata.papermill
    assert (meta.input_path, meta.output_path) == ("notebooks/a.ipynb", "a.ipynb")
    assert absolute_paths(folder, [str(tmp_path)]) == []


def test_the_audit_says_which_notebooks_ran_the_reference(tmp_path):
    """A learner's run: stages 1-4 ran the learner's file, stage 5 the reference, and the audit says so.

    A notebook that never reads its `implementation` parameter (stage4b_beyond) is not credited with the file.
    """
    from nbformat.v4 import new_code_cell, new_notebook

    from shardlab.evidence import audit

    mine = tmp_path / "mine.py"
    mine.write_text("# a learner's file\n")
    names = ["stage1_batches", "stage4b_beyond", "stage5a_protocol", "stage5b_scaling"]
    for name in names:
        nb = new_notebook()
        nb.metadata["papermill"] = {"parameters": {"seed": 17, "batch_size": 7, "implementation": str(mine)}}
        given = new_code_cell(f"implementation = {str(mine)!r}")
        given.metadata["tags"] = ["injected-parameters"]
        nb.cells.append(given)
        if name != "stage4b_beyond":
            nb.cells.append(new_code_cell("%matplotlib inline\nimpl = sl.implementation.load(implementation)"))
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    run = audit._run_section(tmp_path, names)
    learner = {"file": "mine.py", "sha256": hashlib.sha256(mine.read_bytes()).hexdigest()}
    assert run["implementation_by_notebook"] == {
        "stage1_batches": learner,
        "stage4b_beyond": audit.NOT_LOADED,
        "stage5a_protocol": "reference",
        "stage5b_scaling": "reference",
    }
    beyond = nbformat.read(catalog.NOTEBOOK_DIR / "stage4b_beyond.ipynb", as_version=4)
    assert not audit.reads_implementation(beyond)  # the course's own notebook: its loops are the module's own
    profile = nbformat.read(catalog.NOTEBOOK_DIR / "stage4a_profile.ipynb", as_version=4)
    assert audit.reads_implementation(profile)
    assert sorted(run["runs_reference"]) == names[2:] and all(run["runs_reference"].values())  # each with its why
    assert sorted(audit._run_section(tmp_path, names[:2])["runs_reference"]) == []  # only the stage 5 ones that ran
