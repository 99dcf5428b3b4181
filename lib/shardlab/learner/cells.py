"""The rule and hint cells of the notebooks, and the starter's rule lists, written from `rules` and `hints`.

Each function's notebook (`rules.TAUGHT_IN`) holds one markdown cell stating the function's rules and one
holding its hints, folded; each function of the starter template states the same rules in its docstring,
under "Rules:". All are rendered here; `python -m shardlab cells` rewrites them in the MyST `.md` of each
notebook (the cell that starts with the rendered heading, up to the next cell marker), syncs the paired
`.ipynb`, and rewrites the starter's "Rules:" blocks, so a rule or a hint is edited in one place. `--check`
only reports which files differ. Only the notebooks folder and the starter file it is given are written.
"""

import os
import re
import sys
import textwrap
from importlib import resources
from pathlib import Path

from shardlab.errors import UsageError
from shardlab.learner import hints, rules, starter

STARTER = Path(str(resources.files("shardlab.learner").joinpath("templates", starter.TEMPLATE)))


def rule_heading(function: str) -> str:
    return f"**The rules `{function}` must keep**, each under the id a failing check names:"


def hint_heading(function: str) -> str:
    return f"**Hints for `{function}`**, each folded: open one only when you are stuck, the lowest first."


def rule_cell(function: str) -> str:
    """The notebook cell stating `function`'s rules, each with its marker."""
    lines = [rule_heading(function), ""]
    for rule in rules.of(function):
        lines.append(f"- `{rules.MARKER}{rule.id}` — {rule.text}." + (f" {rule.why}" if rule.why else ""))
    return "\n".join(lines)


def hint_cell(function: str) -> str:
    """The notebook cell that holds `function`'s hints, each level folded on its own."""
    parts = [hint_heading(function)]
    for level, text in enumerate(hints.HINTS[function], 1):
        title = "the full recipe" if level == hints.levels(function) else f"hint {level}"
        parts.append(f"<details><summary>{function}: {title}</summary>\n\n{text}\n\n</details>")
    parts.append(f"The same from a terminal: `python -m shardlab hint {function} LEVEL`.")
    return "\n\n".join(parts)


def starter_rules(function: str) -> str:
    """The "Rules:" block of `function`'s docstring in the starter: each rule's id and text, wrapped at 120."""
    lines = ["    Rules:"]
    for rule in rules.of(function):
        lines += textwrap.wrap(
            f"- {rules.MARKER}{rule.id}: {rule.text}.",
            width=120,
            initial_indent="    ",
            subsequent_indent="      ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(lines)


def rewritten_starter(text: str, where: str) -> str:
    """The starter `text` with every function's "Rules:" block (up to its docstring's end) rendered again."""
    for function in rules.FUNCTIONS:
        pattern = re.compile(rf"(\ndef {function}\(.*?\n)(    Rules:\n.*?)(\n    \"\"\")", re.S)
        found = pattern.findall(text)
        if len(found) != 1:
            raise UsageError(f"{where} has {len(found)} 'Rules:' blocks under def {function}, not one")
        text = pattern.sub(lambda m, f=function: m.group(1) + starter_rules(f) + m.group(3), text)
    return text


def _is_boundary(line: str) -> bool:
    """A line that starts the next cell in a MyST notebook: a markdown marker or a code cell's fence."""
    return line.startswith("+++") or line.startswith("```{code-cell}")


def rewritten(text: str, heading: str, cell: str, where: str) -> str:
    """`text` with the markdown cell that starts with `heading` replaced by `cell` (UsageError if there is no
    such cell, or more than one)."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == heading]
    if len(starts) != 1:
        raise UsageError(f"{where} has {len(starts)} cells starting with {heading!r}, not one: add it by hand once")
    start = starts[0]
    end = next((i for i in range(start + 1, len(lines)) if _is_boundary(lines[i])), len(lines))
    return "\n".join(lines[:start] + cell.split("\n") + [""] + lines[end:])


def regenerate(folder, write: bool = True, starter_file=STARTER) -> list[str]:
    """The `.md` files in `folder` whose rule or hint cells differ from the rendered ones, and `starter_file` if
    its rule lists do; rewritten (each `.ipynb` synced) when `write`."""
    folder, starter_file = Path(folder), Path(starter_file)
    if not starter_file.is_file():
        raise UsageError(f"{starter_file} does not exist: give the starter template's path")
    notebooks = sorted(set(rules.TAUGHT_IN.values()))
    for path in (folder / f"{notebook}.md" for notebook in notebooks):  # refused before anything is written
        if not path.is_file():
            raise UsageError(f"{path} does not exist: give the folder that holds the course's notebooks")
    changed = []
    before = starter_file.read_text()
    after = rewritten_starter(before, str(starter_file))
    if after != before:
        changed.append(str(starter_file))
        if write:
            starter_file.write_text(after)
    for notebook in notebooks:
        path = folder / f"{notebook}.md"
        before = path.read_text()
        after = before
        for function in (f for f in rules.FUNCTIONS if rules.TAUGHT_IN[f] == notebook):
            after = rewritten(after, rule_heading(function), rule_cell(function), str(path))
            after = rewritten(after, hint_heading(function), hint_cell(function), str(path))
        if after != before:
            changed.append(str(path))
            if write:
                path.write_text(after)
                _sync(path)
    return changed


def _sync(path: Path) -> None:
    """Update the paired `.ipynb` from the `.md`, as `jupytext --sync` does."""
    import subprocess

    command = [sys.executable, "-m", "jupytext", "--quiet", "--sync", str(path.with_suffix(".ipynb"))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)  # its own stdout, not ours
    if done.returncode != 0:
        raise UsageError(f"jupytext could not sync {path.with_suffix('.ipynb')}: {done.stderr.strip()[-400:]}")


def add_arguments(parser) -> None:
    parser.add_argument("--notebooks", required=True, help="the folder of the course's notebooks' .md and .ipynb")
    parser.add_argument("--starter", default=str(STARTER), help="the starter template (the course's)")
    parser.add_argument(
        "--check", action="store_true", help="only list the notebooks whose cells differ (exit 1 if any)"
    )


def main(args) -> int:
    if not os.path.isdir(args.notebooks):
        print(f"[shardlab cells] {args.notebooks} is not a folder", file=sys.stderr)
        return 2
    try:
        changed = regenerate(args.notebooks, write=not args.check, starter_file=args.starter)
    except UsageError as exc:
        print(f"[shardlab cells] {exc}", file=sys.stderr)
        return 2
    verb = "differ" if args.check else "rewritten"
    for path in changed:
        print(f"[shardlab cells] {verb}: {path}")
    if not changed:
        print("[shardlab cells] every rule and hint cell, and the starter's rules, are as rendered")
    return 1 if args.check and changed else 0
