"""The held-out learner files, made when the tests run: one base file per set, each case a small diff of it.

Each set (`wrong`+`correct`, `wrong2`+`correct2`) was written as one complete learner file and
one change per case. The committed tree keeps that shape: `base1.py` and `base2.py` are the
two complete files (the lines every case of the set but one shares; neither is a case), every
case is `<folder>/<name>.diff`, a unified diff of its base that states its one mistake (or its
one different-but-correct choice) in a few lines, and the one case written from scratch
(`correct2/alt_class_based.py`) stays whole. `materialise(dest)` writes every case as
`dest/<folder>/<name>.py` and checks each against `sha256.json`, the hashes of the files that
generality.json and generality2.json measured, so a case can never drift from its measurement.
"""

import hashlib
import json
import re
from pathlib import Path

HERE = Path(__file__).parent
FOLDERS = ("wrong", "correct", "wrong2", "correct2", "wrong3", "correct3")
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


class DiffError(Exception):
    """A held-out diff does not apply to its base, or the file it makes is not the one measured."""


def apply(base: list[str], diff: list[str], name: str) -> str:
    """`base` (lines) with the unified diff `diff` applied, every context and removed line checked."""
    hunks = []  # (index of the first base line it covers, its body)
    for line in diff[2:]:  # the two header lines name the base and the case
        found = HUNK.match(line)
        if found:
            hunks.append((int(found.group(1)) - (found.group(2) != "0"), []))
        elif hunks:
            hunks[-1][1].append(line)
        else:
            raise DiffError(f"{name}: expected a hunk header, found {line!r}")
    out, at = [], 0
    for start, body in hunks:
        out, at = out + base[at:start], start
        for line in body:
            if line[:1] == "+":
                out.append(line[1:])
                continue
            if line[:1] not in " -" or at >= len(base) or base[at] != line[1:]:
                raise DiffError(f"{name}: line {at + 1} of the base is not the {line[1:]!r} the diff expects")
            if line[:1] == " ":
                out.append(line[1:])
            at += 1
    return "".join(out + base[at:])


def cases() -> dict[str, str]:
    """{'<folder>/<name>.py': text} of every held-out case."""
    found = {}
    for folder in FOLDERS:
        for path in sorted((HERE / folder).glob("*.py")):
            found[f"{folder}/{path.name}"] = path.read_text()
    for folder in FOLDERS:
        for path in sorted((HERE / folder).glob("*.diff")):
            diff = path.read_text().splitlines(keepends=True)
            base = (HERE / diff[0].removeprefix("--- ").strip()).read_text().splitlines(keepends=True)
            found[f"{folder}/{path.stem}.py"] = apply(base, diff, path.name)
    return dict(sorted(found.items()))


def materialise(dest) -> Path:
    """Write every case into `dest/<folder>/`; DiffError if any differs from the file that was measured."""
    dest = Path(dest)
    recorded = json.loads((HERE / "sha256.json").read_text())
    made = cases()
    if set(made) != set(recorded):
        raise DiffError(f"cases {sorted(set(made) ^ set(recorded))} are made or measured, not both")
    for rel, text in made.items():
        if hashlib.sha256(text.encode()).hexdigest() != recorded[rel]:
            raise DiffError(f"{rel} is not the file that was measured (sha256.json)")
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    return dest
