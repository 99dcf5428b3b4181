"""The hand-off list, one row per item the course project asks a learner to submit, and how each is gathered.

`HANDOFF` is the one table: the portfolio command, its page, its tests and docs/portfolio.md
all read it. Each row's `gather(run)` returns an `Item`: the data shown, the files copied,
where every value came from (file, key, sha256) and what was looked for and not found. A row
with `required=True` comes from the run itself: if it is missing the run is incomplete and no
portfolio is written. The others (a learner's written answers, results a course notebook may
not record yet) are named as missing in the portfolio instead.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

from shardlab.checker.cli import STAGES, checks_of
from shardlab.checker.here import searched_checks
from shardlab.core.files import sha256_file
from shardlab.evidence.audit import AUDIT, IR


@dataclass
class Run:
    """Everything a portfolio is built from: the receipts folder, its audit, the implementation, the learner's notes."""

    receipts: Path
    audit: dict
    implementation: str  # "reference" or the path of the learner's file
    check: dict | None  # the checker's report (check_report.json)
    answers: dict  # learner.written_answers
    selfcheck: dict  # learner.selfcheck_scores
    workspace: Path | None = None  # the learner's notebook copies the answers were read from
    hypothesis: dict = field(default_factory=dict)  # workspace_reader.hypothesis: {value, file} or {missing}


@dataclass
class Item:
    """One gathered hand-off item."""

    data: dict = field(default_factory=dict)
    files: list = field(default_factory=list)  # (source path, path inside the portfolio folder)
    sources: list = field(default_factory=list)  # {"file", "key", "sha256"}
    missing: list = field(default_factory=list)  # run evidence not found: the run is incomplete
    absent: list = field(default_factory=list)  # not found, and named so in the portfolio (learner's own, or later)
    how: dict = field(default_factory=dict)  # absent entry -> how the learner adds it
    kind: dict = field(default_factory=dict)  # absent entry -> which of HOW_TO says how (said once per kind)

    def lacks(self, entry: str, how: str, kind: str) -> None:
        """Name `entry` as absent from the portfolio, with where it goes (`how`) and which of HOW_TO says how."""
        self.absent.append(entry)
        self.how[entry], self.kind[entry] = how, kind


# How to add each kind of missing entry, said once above the list of the entries of that kind. The notebooks'
# cells on written answers and self-checks say the same; WORKSPACE is the folder the portfolio read.
HOW_TO = {
    "answer": "in your copy WORKSPACE/NOTEBOOK.ipynb add a markdown cell, give it the tag `answer` (Lab: the gear "
    "icon in the right sidebar, Common Tools -> Cell Tags), start it with the line `Answer: ID` and write your "
    "answer below it",
    "selfcheck": "in your copy WORKSPACE/NOTEBOOK.ipynb write your letters into the `choices = {}` line of the "
    'cell under Self-check, as the cell shows: choices = {"1": "c", "2": "a"}',
    "hypothesis": "in your copy WORKSPACE/stage4a_profile.ipynb replace `mine = None` with your dict of "
    '"change", "threshold_ms" and "because" (the cell says what each holds); run that notebook in Lab to see it '
    "judged against your own trace",
    "run": "run `make run IMPL=<your file> OUT=<your receipts>` again with this version of the course",
}


def _from(run: Run, item: Item, notebook: str | None, key: str, default=None, optional: bool = False):
    """audit.json's `key` (notebook None) or results/<notebook>.json's, recorded in `item.sources`.

    Not found: into `item.missing` (the run is incomplete), or with `optional` into `item.absent`
    (a result this run's course version does not record; the portfolio names it missing).
    """
    if notebook is None:
        value, rel = run.audit.get(key), AUDIT
    else:
        value, rel = (run.audit.get("results", {}).get(notebook) or {}).get(key), f"results/{notebook}.json"
    path = run.receipts / rel
    if value is None:
        if optional:
            item.lacks(f"{rel}:{key}", f"{notebook or 'the run'} records it when it runs to the end", "run")
        else:
            item.missing.append(f"{rel}:{key}")
        return default
    item.sources.append({"file": rel, "key": key, "sha256": sha256_file(path) if path.is_file() else None})
    return value


def _copy(run: Run, item: Item, rel: str | None, dest: str) -> None:
    if rel and (run.receipts / rel).is_file():
        item.files.append((run.receipts / rel, dest))
        item.sources.append({"file": rel, "key": None, "sha256": sha256_file(run.receipts / rel)})
    else:
        item.missing.append(rel or dest)


def _answers(run: Run, item: Item, *ids: str) -> None:
    """The learner's written answers `ids` into item.data["answers"]; absent ones into item.missing."""
    item.data["answers"] = {i: run.answers[i] for i in ids}
    for i in ids:
        if "missing" in run.answers[i]:
            entry = f"written answer `{i}`" + _why(run, run.answers[i]["missing"])
            item.lacks(entry, f"{run.answers[i]['notebook']}.ipynb, starting `Answer: {i}`", "answer")


def implementation(run: Run) -> Item:
    item = Item(data={"recorded_by_the_run": run.audit.get("run", {}).get("implementation")})
    if run.implementation == "reference":
        item.data["note"] = "the course's reference (shardlab/learner/reference.py over shardlab/core)"
        hashes = run.audit.get("sources", {})
        item.sources += [
            {"file": k, "key": None, "sha256": v, "recorded_in": AUDIT} for k, v in hashes.items() if is_reference(k)
        ]
    else:
        path = Path(run.implementation)
        item.files.append((path, f"implementation/{path.name}"))
        item.sources.append({"file": path.name, "key": None, "sha256": sha256_file(path)})
    return item


def is_reference(source: str) -> bool:
    """True for the package files that make up the reference implementation."""
    return source.startswith("shardlab/core/") or source == "shardlab/learner/reference.py"


def recorded_checks(audit: dict) -> dict:
    """{stage: (notebook, its recorded `check`)} for every stage a notebook of the run checked."""
    found = {}
    for notebook, results in (audit.get("results") or {}).items():
        check = results.get("check") if isinstance(results, dict) else None
        if isinstance(check, dict) and "stage" in check:
            found[int(check["stage"])] = (notebook, check)
    return found


def stage_output(run: Run) -> Item:
    """Per stage: the checker's report where it checked the stage, else the run's notebook that did."""
    item, stages = Item(), {}
    for c in (run.check or {}).get("checks") or []:
        row = stages.setdefault(str(c["stage"]), {"passed": 0, "checks": 0, "first_failure": None})
        row["checks"] += 1
        row["passed"] += bool(c["passed"])
        if not c["passed"] and row["first_failure"] is None:
            row["first_failure"] = {"check": c["name"], "diagnosis": c["diagnosis"]}
    if stages:
        item.sources.append({"file": "check_report.json", "key": "checks", "sha256": None})
    ran = {c["name"] for c in (run.check or {}).get("checks") or []}
    for stage, row in stages.items():
        left_out = [name for name in searched_checks(int(stage)) if name not in ran]
        row["scope"] = _scope("make check", left_out, stage)
    for stage, (notebook, check) in sorted(recorded_checks(run.audit).items()):
        if str(stage) not in stages:
            failed = check.get("failed") or []
            _from(run, item, notebook, "check")
            # a count below the stage's whole registry is a cell that ran without the search (check_here's default)
            left_out = searched_checks(stage) if check["checks"] < len(checks_of(stage)) else []
            stages[str(stage)] = {
                "passed": check["checks"] - len(failed),
                "checks": check["checks"],
                "first_failure": {"check": failed[0], "diagnosis": f"see {notebook}.html"} if failed else None,
                "from": f"results/{notebook}.json:check",
                "scope": _scope(f"{notebook}'s check cell", left_out, stage),
            }
    item.data["checker"] = dict(sorted(stages.items()))
    item.missing += [f"the checker's verdict on stage {s}" for s in STAGES if str(s) not in stages]
    return item


def _scope(who: str, left_out: list, stage) -> str:
    """What a verdict's count covers: every check of the stage, or all but the randomised search it left out."""
    if not left_out:
        return f"{who}: every check of the stage, the randomised search included"
    return (
        f"{who}: the enumerated checks only; the randomised search ({len(left_out)} check"
        f"{'s' * (len(left_out) != 1)}: {', '.join(left_out)}) did not run here (`make check STAGE={stage}` runs it)"
    )


def recovery(run: Run) -> Item:
    item = Item()
    item.data["recovery"] = _from(run, item, None, "recovery")
    item.data["process"] = _from(run, item, "stage3b_resume", "process")
    item.data["orbax"] = _from(run, item, "stage3b_resume", "orbax")
    item.data["every_fixture"] = _from(run, item, None, "fresh_kernel_recovery", optional=True)
    return item


def changed_seed_batch(run: Run) -> Item:
    item = Item()
    item.data["other_settings"] = _from(run, item, "stage1_batches", "other_settings")
    faults = _from(run, item, None, "faults", [])
    item.data["fault_fixtures"] = sorted({f.get("fixture") for f in faults})
    fresh = _from(run, item, None, "fresh_kernel_recovery", {}, optional=True)
    own = (run.audit.get("run") or {}).get("seed"), (run.audit.get("run") or {}).get("batch_size")
    item.data["fresh_kernel_other_fixtures"] = {
        name: found for name, found in fresh.items() if found and (found.get("seed"), found.get("batch_size")) != own
    }
    return item


def failures(run: Run) -> Item:
    item = Item()
    item.data["faults"] = _from(run, item, None, "faults")
    item.data["rejections"] = _from(run, item, "stage3a_checkpoint", "rejections")
    item.data["stage5_runbook"] = _from(run, item, "stage5b_scaling", "runbook", optional=True)
    _answers(run, item, "failures")
    return item


def trace(run: Run) -> Item:
    item = Item()
    recorded = _from(run, item, None, "trace", {})
    item.data["transitions"] = recorded.get("transitions")
    item.data["dominant"] = recorded.get("dominant")
    for key in ("xplane", "perfetto"):
        _copy(run, item, recorded.get(key), f"evidence/{recorded.get(key) or key}")
    return item


def ir_excerpt(run: Run) -> Item:
    item = Item()
    item.data["all_reduce"] = _from(run, item, None, "all_reduce")
    _copy(run, item, IR, f"evidence/{IR}")
    path = run.receipts / IR
    if path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()
        wanted = re.compile(r"all_reduce|sharding|manual_computation|func\.func")
        item.data["excerpt"] = [
            f"{n:4d}  {line.strip()[:300]}" for n, line in enumerate(lines, 1) if wanted.search(line)
        ]
    return item


def timing(run: Run) -> Item:
    item = Item()
    recorded = _from(run, item, None, "timing", {})
    item.data = {
        "boundary": recorded.get("boundary"),
        "ratios": recorded.get("ratios"),
        "variants": {k: v for k, v in recorded.items() if isinstance(v, dict) and "samples_ms" in v},
    }
    _copy(run, item, (run.audit.get("figure") or {}).get("png"), "evidence/evidence.png")
    return item


def report(run: Run) -> Item:
    item = Item()
    env = _from(run, item, None, "environment", {})
    recorded = run.audit.get("trace") or {}
    item.data["topology"] = {
        "devices": env.get("devices"),
        "backend": env.get("backend"),
        "usable_cpus": env.get("usable_cpus"),
        "platform": env.get("platform"),
        "label": "logical CPU devices of one host in one process: not separate machines, no network, no accelerator",
    }
    item.data["boundaries"] = {
        "timing": (run.audit.get("timing") or {}).get("boundary"),
        "trace": "host annotations: prepare_and_place (sampler, padding, placement) and compiled_update_and_wait "
        "(update until its outputs are ready), inside sharded_learner_step; profiler overhead included",
    }
    judged = recorded.get("hypothesis")
    if recorded.get("example_run") is False:  # the run judged the learner's own hypothesis: nothing to add
        item.data["your_hypothesis"] = {"value": _plain_hypothesis(judged), "from": "the run (stage 4a judged it)"}
    elif "missing" in run.hypothesis:
        item.lacks(
            "your stage 4 hypothesis" + _why(run, run.hypothesis["missing"]), "stage4a_profile.ipynb", "hypothesis"
        )
    else:
        item.data["your_hypothesis"] = {
            "value": run.hypothesis["value"],
            "from": f"{run.hypothesis['file']} in your workspace, as written (the run judged the worked example "
            "below, not this; your copy of stage 4a judges yours)",
        }
    item.data["profile_hypothesis"] = judged
    _answers(run, item, "topology", "denominator", "step_count", "next_optimisation")
    return item


def _plain_hypothesis(judged) -> dict | None:
    """The three values a learner writes, out of the hypothesis the run recorded."""
    if not isinstance(judged, dict):
        return None
    return {key: judged.get(key) for key in ("change", "threshold_ms", "because")}


def transfer(run: Run) -> Item:
    item = Item()
    item.data["rows_31_batch_6"] = _from(run, item, "stage1_batches", "transfer")
    _answers(run, item, "transfer_31x6", "batch_size_change")
    return item


def efficiency(run: Run) -> Item:
    item = Item()
    item.data["efficiency"] = _from(run, item, "stage5b_scaling", "efficiency", optional=True)
    item.data["denominator"] = _from(run, item, "stage5a_protocol", "denominator")
    _answers(run, item, "scaling")
    return item


def selfcheck(run: Run) -> Item:
    item = Item(data={"scores": run.selfcheck})
    for name, score in run.selfcheck.items():
        if "missing" in score:
            item.lacks(f"self-check of {name}" + _why(run, score["missing"]), f"{name}.ipynb", "selfcheck")
    return item


def _why(run: Run, why: str) -> str:
    """Why an entry is missing, unless it is that the workspace does not exist (its how-to says that, once)."""
    return "" if _first(run.workspace) else f" ({why})"


def _folder(workspace: Path | None) -> str:
    return str(workspace) if workspace else "workspace"


def _first(workspace: Path | None) -> str:
    """What to do before writing into the workspace, when it does not exist yet."""
    if workspace and workspace.is_dir():
        return ""
    return f"first `make lab WORKSPACE={_folder(workspace)}` copies the notebooks into {_folder(workspace)}/; then "


def how_to(kind: str, workspace: Path | None) -> str:
    """HOW_TO[kind] for the workspace read, and what to do after (first_step says what to do before, once)."""
    text = HOW_TO[kind].replace("WORKSPACE", _folder(workspace))
    again = "build the portfolio again" + (
        " (WORKSPACE= to make, or --workspace, if your copies are elsewhere)" if kind != "run" else ""
    )
    return f"{text}; save, then {again}"


def first_step(workspace: Path | None) -> str:
    """What to do once before adding anything to the workspace ('' when it exists)."""
    return _first(workspace).removesuffix("; then ")


@dataclass(frozen=True)
class Row:
    """One row of the hand-off list: what the course project asks for, and whether the run alone must supply it."""

    id: str
    title: str
    gather: object
    required: bool


HANDOFF = (
    Row("implementation", "your implementation", implementation, True),
    Row("stage_output", "passing stage output: the checker's verdict per stage", stage_output, True),
    Row("recovery", "the full-state recovery comparison after a fresh kernel", recovery, True),
    Row("changed_seed_batch", "results with a changed seed and batch size", changed_seed_batch, True),
    Row("failures", "the deliberate failures and their explanation", failures, True),
    Row("trace", "the actual trace", trace, True),
    Row("ir_excerpt", "a placement / IR excerpt", ir_excerpt, True),
    Row("timing", "the synchronised timing samples", timing, True),
    Row("report", "the short report: topology, boundaries, denominator, step count, next optimisation", report, True),
    Row("transfer", "the transfer exercises' results", transfer, True),
    Row("efficiency", "the scaling efficiency table and what one host cannot show", efficiency, False),
    Row("selfcheck", "the self-check scores", selfcheck, False),
)
