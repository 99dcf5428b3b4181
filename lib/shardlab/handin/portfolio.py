"""`python -m shardlab portfolio --out DIR`: what a learner hands in, assembled from a run they already did.

It reads a receipts folder (`make run IMPL=... OUT=...`), the learner's workspace notebooks
(their `answer` cells and self-check letters) and the checker's verdict, and writes into DIR:
`portfolio.html` (one offline page), `portfolio/` (every item's files, `portfolio.json` naming
where each value came from, `report.md`) and `portfolio.zip` (both, the file to hand in). It
refuses receipts that ran another implementation than the one named, and a run that is
missing or unfinished, listing what is missing; nothing is written then. Its first line says
"ready to hand in" only when nothing is missing, else "incomplete: N items missing", then each
missing item with how to add it (the manifest's `status`).
"""

import json
import re
import sys
import tempfile
from pathlib import Path

from shardlab import outdir
from shardlab.checker.cli import STAGES
from shardlab.checker.watch import REPORT
from shardlab.core.files import read_bounded, sha256_file
from shardlab.course.catalog import NOTEBOOKS
from shardlab.errors import ConfigError, PortfolioError
from shardlab.evidence.audit import AUDIT
from shardlab.evidence.sources import receipt_sources
from shardlab.handin import bounded, contain, items, page, workspace_reader
from shardlab.io import without_folder, write_json, write_zip

COMMAND = "portfolio"
PAGE, FOLDER, ZIP, MANIFEST = "portfolio.html", "portfolio", "portfolio.zip", "portfolio.json"
RECEIPT_BYTES = 64 << 20  # the audit or a notebook of a run: a few hundred kB; past this it is not one
SCRATCH = re.compile(r"[^\s\"']*/shardlab-check-[^/\s\"']+")  # the checker's temporary folders, in its report


def _unfinished(receipts: Path) -> list[str]:
    """What a receipts folder lacks for a finished run (empty when audit.json and every notebook are there)."""
    if not receipts.is_dir():
        return [f"the folder {receipts} itself"]
    missing = [] if (receipts / AUDIT).is_file() else [AUDIT]
    missing += [f"{n}.ipynb (executed)" for n in NOTEBOOKS if not (receipts / f"{n}.ipynb").is_file()]
    missing += [f"results/{n}.json" for n in NOTEBOOKS if not (receipts / "results" / f"{n}.json").is_file()]
    if (receipts / "failed").is_dir():
        failed = sorted(p.name for p in (receipts / "failed").glob("*.ipynb"))
        missing.append(f"a successful run (failed/ holds the partly executed {', '.join(failed)})")
    return missing


def _audit_shaped(audit) -> bool:
    """True if `audit` has the sections the portfolio reads, each of the type the audit schema gives."""
    if not isinstance(audit, dict):
        return False
    sections = (audit.get("run"), audit.get("sources"), audit.get("results"))
    return all(isinstance(x, dict) for x in sections) and all(isinstance(r, dict) for r in audit["results"].values())


def load_audit(receipts: Path) -> dict:
    """The run's audit, or PortfolioError listing exactly what a finished run would have left."""
    missing = _unfinished(receipts)
    audit = None
    if (receipts / AUDIT).is_file():
        try:
            audit = json.loads(read_bounded(receipts / AUDIT, RECEIPT_BYTES).decode("utf-8"))
        except (ValueError, OSError):  # BoundedReadError is a ValueError
            missing.append(f"{AUDIT} is not JSON of at most {RECEIPT_BYTES} bytes in a regular file")
        if audit is not None and not _audit_shaped(audit):
            missing.append(f"{AUDIT} in the shape `python -m shardlab run` writes (run, sources, results)")
            audit = None
    if audit is not None:
        missing += [f"{AUDIT} lists as missing: {m}" for m in audit.get("missing") or [] if not m.endswith(".ipynb")]
        ran = (audit.get("run") or {}).get("notebooks") or []
        missing += [
            f"{n} among the notebooks the run executed (its {n}.ipynb is older)"
            for n in NOTEBOOKS
            if n not in ran and (receipts / f"{n}.ipynb").is_file()
        ]
    if missing:
        raise PortfolioError(
            f"{receipts} is not a finished course run; missing: " + "; ".join(dict.fromkeys(missing)) + ". Run "
            f"`make run IMPL=<your file> OUT={receipts}` to the end, then build the portfolio again"
        )
    return audit


def _recorded_path(receipts: Path) -> str | None:
    """The implementation path the run's notebooks were given (papermill parameters), if it still exists."""
    try:
        nb = json.loads(read_bounded(receipts / f"{NOTEBOOKS[0]}.ipynb", RECEIPT_BYTES).decode("utf-8"))
        spec = nb["metadata"]["papermill"]["parameters"]["implementation"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return spec if spec == "reference" or Path(spec).is_file() else None


def match_implementation(audit: dict, receipts: Path, implementation: str | None) -> str:
    """The implementation the receipts ran ('reference' or a path), refusing one whose hashes differ from it."""
    recorded = (audit.get("run") or {}).get("implementation")
    if implementation is None:
        implementation = "reference" if recorded == "reference" else _recorded_path(receipts)
        if implementation is None:
            raise PortfolioError(f"{receipts} ran {recorded}; pass --implementation with that file")
    if implementation == "reference":
        if recorded != "reference":
            raise PortfolioError(f"{receipts} ran {recorded}, not the reference; pass --implementation <that file>")
        now, then = receipt_sources(), audit.get("sources") or {}
        changed = sorted(k for k in set(now) | set(then) if items.is_reference(k) and now.get(k) != then.get(k))
        if changed:
            raise PortfolioError(
                f"the reference changed since {receipts} was run ({', '.join(changed[:5])} differ from the "
                f"hashes in its {AUDIT}); run `make run OUT={receipts}` again"
            )
        return "reference"
    path = Path(implementation)
    if not path.is_file():
        raise PortfolioError(f"implementation {implementation} does not exist; pass the file the run used")
    digest = sha256_file(path)
    if not isinstance(recorded, dict) or recorded.get("sha256") != digest:
        ran = (
            recorded if not isinstance(recorded, dict) else f"{recorded.get('file')} (sha256 {recorded.get('sha256')})"
        )
        raise PortfolioError(
            f"{receipts} was not produced by {path.name} as it is now (sha256 {digest}): its {AUDIT} records {ran}. "
            f"Run `make run IMPL={implementation} OUT={receipts}` again, or name the file the run used"
        )
    return str(path.resolve())


def stages_left(audit: dict) -> list[int]:
    """The stages no notebook of the run recorded as passed: the ones the portfolio's own check runs."""
    passed = {s for s, (_, check) in items.recorded_checks(audit).items() if check.get("passed")}
    return [s for s in sorted(STAGES) if s not in passed]


def bounded_check(implementation: str, scratch: Path, stages: list[int]):
    """The bounded check of `stages` (one stage alone, or every stage) that the portfolio's report comes from."""
    return bounded.check(implementation, scratch, stage=stages[0] if len(stages) == 1 else None)


def checker_report(
    implementation: str, given: str | None, scratch: Path, audit: dict, receipts=None, started=None
) -> dict:
    """The checker's report: `given` (a check_report.json) if named, else a bounded check of what the run did not.

    A finished run's notebooks each ran the checker on their own stage and stopped unless it passed,
    so only the stages no notebook recorded as passed are checked again (in a finished run: stage 4).
    `started(implementation, stages)`: the outcome of that same bounded check if the caller already
    started it (`make run` does, beside its last steps), else None and it runs here.
    """
    if given:
        return contain.check_report(given, Path(receipts), implementation)
    left = stages_left(audit)
    if not left:
        return {"checks": []}
    outcome = started(implementation, left) if started is not None else None
    if outcome is None:
        outcome = bounded_check(implementation, scratch, left)
    if outcome.report is None:
        why = {"timeout": f"stopped after {bounded.TIMEOUT_S:.0f} s", "output": "stopped: too much output"}
        tail = outcome.output.strip().splitlines()[-3:]
        raise PortfolioError(
            f"the checker left no report for {implementation} ({why.get(outcome.stopped, 'it failed')}): "
            + " | ".join(tail)
            + "; run `make check IMPL=<your file> STAGE=1` and fix what it names"
        )
    return outcome.report


def _without_paths(report: dict, spec: str) -> dict:
    """The checker's report without this machine's paths: the learner's folder and the checker's scratch folders."""
    if spec != "reference":
        report = without_folder(report, Path(spec).parent)
    return json.loads(SCRATCH.sub("<the checker's scratch folder>", json.dumps(report)))


def gather(
    receipts, implementation=None, workspace=None, check_report=None, scratch=None, verified=True, started=None
) -> tuple:
    """(Run, {row id: Item}) for a finished run, or PortfolioError naming every missing piece of run evidence.

    `started`: a check the caller began already (see `checker_report`)."""
    receipts = Path(receipts)
    audit = load_audit(receipts)
    spec = match_implementation(audit, receipts, implementation)
    if verified:  # a finished run's receipts, as its manifest records them (not the run still being written)
        contain.verify_receipts(receipts)
    workspace = Path(workspace) if workspace else None
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        found = checker_report(spec, check_report, Path(folder) / "check", audit, receipts, started)
        report = _without_paths(found, spec)
    run = items.Run(
        receipts,
        audit,
        spec,
        report,
        workspace_reader.written_answers(workspace),
        workspace_reader.selfcheck_scores(workspace),
        workspace,
        workspace_reader.hypothesis(workspace),
    )
    found = {row.id: row.gather(run) for row in items.HANDOFF}
    lacking = [f"{row.id}: {m}" for row in items.HANDOFF if row.required for m in found[row.id].missing]
    if lacking:
        raise PortfolioError(f"{receipts} lacks run evidence the portfolio needs: " + "; ".join(lacking))
    return run, found


def write(into: Path, run, found: dict) -> None:
    """Write the page, the folder and the zip into `into` (a staging folder)."""
    folder = into / FOLDER
    (folder / "evidence").mkdir(parents=True)
    for item in found.values():
        for source, dest in item.files:
            target = contain.member(folder, dest)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(contain.source(run.receipts, source, run.implementation).read_bytes())
    if run.check:
        write_json(folder / REPORT, run.check)
    manifest = page.manifest(run, found)
    write_json(folder / MANIFEST, manifest)
    (folder / "report.md").write_text(page.report_markdown(run, found), encoding="utf-8")
    (into / PAGE).write_text(page.html(run, found, manifest), encoding="utf-8")
    paths = [into / PAGE, *sorted(p for p in folder.rglob("*") if p.is_file())]
    write_zip(into / ZIP, ((path.relative_to(into).as_posix(), path.read_bytes(), 0o644) for path in paths))


def build(out, receipts, implementation=None, workspace=None, check_report=None) -> Path:
    """Assemble the portfolio of `receipts` into `out` (the output-folder policy of shardlab.outdir)."""
    outdir.claim(out, COMMAND)  # refuse a foreign folder before any work
    with outdir.writing(out, COMMAND) as staging:
        run, found = gather(receipts, implementation, workspace, check_report, scratch=staging)
        write(staging, run, found)
    return Path(out)


def left_out(staging: Path) -> list[str]:
    """The course notebooks a run in `staging` did not execute (a run that left any out gets no portfolio)."""
    return [n for n in NOTEBOOKS if not (staging / f"{n}.ipynb").is_file()]


def finish_run(staging: Path, workspace=None, started=None) -> None:
    """`make run`'s last step: the run's own portfolio (the reference run's is the shipped example), reading the
    learner's answers, letters and hypothesis from `workspace` as `make portfolio` does (None: none given).
    `started`: the run's check of the stages its notebooks left, begun beside its last steps (`checker_report`).

    A run whose portfolio cannot be built (its implementation fails the checker's import) still
    succeeds; the reason is printed and `python -m shardlab portfolio` says it again.
    """
    left = left_out(staging)
    if left:
        print(f"[shardlab] no portfolio: this run left out {', '.join(left)}", flush=True)
        return
    try:
        run, found = gather(staging, workspace=workspace, scratch=staging, verified=False, started=started)
    except PortfolioError as exc:
        print(f"[shardlab] no portfolio for this run: {exc}", flush=True)
        return
    write(staging, run, found)


def add_arguments(parser) -> None:
    parser.add_argument("--out", required=True, help="folder for portfolio.html, portfolio/ and portfolio.zip")
    parser.add_argument("--receipts", default="receipts", help="the folder `make run` wrote (default: receipts)")
    parser.add_argument("--implementation", default=None, help="'reference' or your .py file (default: what ran)")
    parser.add_argument("--workspace", default="workspace", help="your notebooks with `answer` cells (workspace/)")
    parser.add_argument("--check-report", default=None, help="a check_report.json to use instead of checking again")


def main(args) -> int:
    try:
        out = build(args.out, args.receipts, args.implementation, args.workspace, args.check_report)
    except (PortfolioError, ConfigError) as exc:
        print(f"[shardlab portfolio] {exc}", file=sys.stderr)
        return 1
    state = json.loads((out / FOLDER / MANIFEST).read_text())["status"]
    print(f"[shardlab portfolio] {page.status_line(state)}: {out / ZIP}; open {out / PAGE} to read it")
    if state.get("first"):
        print(f"  {state['first']}")
    for how, entries in page.grouped(state):
        if how:
            print(f"  how: {how}")
        for n, entry in entries:
            print(f"  {n}. {entry['what']}" + (f" — {entry['how']}" if entry["how"] else ""))
    return 0
