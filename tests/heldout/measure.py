"""Generality of the checker on implementations written without reading its checks.

    python tests/heldout/measure.py wrong correct > generality.json

The cases are made from their bases and diffs first (tests/heldout/files.py) in a temporary folder;
WRONG and CORRECT name the folders of one set (`wrong correct` or `wrong2 correct2`).

For each wrong file: do the enumerated probes alone catch it (every check but the randomised ones,
stages 1-4), and if not, does the randomised search (the randomised checks alone, default seed)?
Each correct file must pass every check. Every run is the supervised command-line run, so a file
that loops, dies or floods gets its verdict like any learner's. Three files are checked at a time.
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


def main(wrong: str, correct: str) -> int:
    import files  # beside this script: run as a script, its folder is the first entry of sys.path

    with tempfile.TemporaryDirectory(prefix="heldout-cases-") as made, ThreadPoolExecutor(3) as pool:
        cases = files.materialise(made)
        wrongs = list(pool.map(judge_wrong, sorted((cases / Path(wrong).name).glob("*.py"))))
        corrects = list(pool.map(judge_correct, sorted((cases / Path(correct).name).glob("*.py"))))
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
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
