"""Generality of the checker on implementations written without reading its checks.

    python tests/heldout/measure.py wrong correct > generality.json
    python tests/heldout/measure.py FOLDER/w*.py FOLDER/c*.py --markdown table.md > generality.json

A set's name (`wrong correct`, `wrong2 correct2`, ...) names one held-out set of tests/heldout/: its cases
are made from their bases and diffs first (tests/heldout/files.py) in a temporary folder. Any other
argument is a folder of .py files or a glob of them (files someone wrote elsewhere, measured as they are).

For each wrong file: do the enumerated probes alone catch it (every check but the randomised ones,
stages 1-4), and if not, does the randomised search (the randomised checks alone, default seed)?
Each correct file must pass every check. Every run is the supervised command-line run, so a file
that loops, dies or floods gets its verdict like any learner's. Three files are checked at a time
(`--workers N` to change). `--markdown FILE` also writes the counts and one row per file as a table.
"""

import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import shardlab.checker.cli as cli
import shardlab.checker.watch as watch

RANDOMISED = [c.__name__ for m in cli.STAGES.values() for c in m.CHECKS if c.__name__.startswith("random_")]
RANDOMISED.append("contracts_agree_in_a_fresh_process")
ENUMERATED = [c.__name__ for m in cli.STAGES.values() for c in m.CHECKS if c.__name__ not in RANDOMISED]


def failed_checks(spec: str, skip) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="heldout-") as folder:
        results, _ = watch.run(spec, "all", False, folder, lambda result: None, skip=skip)
    return [e["name"] for e in results if not e["passed"]]


def judge_wrong(path: Path) -> dict:
    enumerated = failed_checks(str(path), RANDOMISED)
    search = [] if enumerated else failed_checks(str(path), ENUMERATED)
    return {"file": path.name, "enumerated": enumerated, "search": search}


def judge_correct(path: Path) -> dict:
    return {"file": path.name, "failed": failed_checks(str(path), ())}


def chosen(argument: str, made: Path) -> list[Path]:
    """The .py files `argument` names: a held-out set made in `made`, a folder's .py files, or a glob's matches."""
    import files  # beside this script: run as a script, its folder is the first entry of sys.path

    if argument in files.FOLDERS:
        return sorted((made / argument).glob("*.py"))
    given = Path(argument)
    if given.is_dir():
        return sorted(given.glob("*.py"))
    found = sorted(given.parent.glob(given.name))
    if not found:
        raise SystemExit(f"measure.py: {argument!r} is no held-out set of {files.FOLDERS}, folder or glob of .py files")
    return found


def markdown(summary: dict, wrongs: list[dict], corrects: list[dict]) -> str:
    """The counts and one row per file, for a person."""
    lines = [
        f"{summary['caught_by_enumerated']} of {summary['wrong']} wrong files caught by the enumerated probes alone, "
        f"{summary['caught_with_search']} with the randomised search; {summary['correct_passed']} of "
        f"{summary['correct']} correct files passed every check.",
        "",
        "| file | enumerated probes | randomised search | verdict |",
        "| --- | --- | --- | --- |",
    ]
    for w in wrongs:
        verdict = "caught by the probes" if w["enumerated"] else "caught by the search" if w["search"] else "MISSED"
        search = "not run" if w["enumerated"] else ", ".join(w["search"]) or "-"
        lines.append(f"| {w['file']} | {', '.join(w['enumerated']) or '-'} | {search} | {verdict} |")
    for c in corrects:
        lines.append(
            f"| {c['file']} (correct) | | | {'passed' if not c['failed'] else 'REJECTED: ' + ', '.join(c['failed'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    import argparse

    import files  # beside this script: run as a script, its folder is the first entry of sys.path

    parser = argparse.ArgumentParser(description="probes alone versus with the search, on held-out files")
    parser.add_argument("wrong", help="a held-out set name, a folder of .py files or a glob of wrong files")
    parser.add_argument("correct", help="likewise, the correct files")
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    parser.add_argument("--workers", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="heldout-cases-") as made, ThreadPoolExecutor(args.workers) as pool:
        made = Path(made)
        if {args.wrong, args.correct} & set(files.FOLDERS):
            files.materialise(made)
        wrongs = list(pool.map(judge_wrong, chosen(args.wrong, made)))
        corrects = list(pool.map(judge_correct, chosen(args.correct, made)))
    summary = {
        "wrong": len(wrongs),
        "caught_by_enumerated": sum(bool(w["enumerated"]) for w in wrongs),
        "caught_with_search": sum(bool(w["enumerated"] or w["search"]) for w in wrongs),
        "correct": len(corrects),
        "correct_passed": sum(not c["failed"] for c in corrects),
    }
    json.dump({"summary": summary, "wrong": wrongs, "correct": corrects}, sys.stdout, indent=1)
    print(file=sys.stderr)
    print(json.dumps(summary), file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(markdown(summary, wrongs, corrects), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
