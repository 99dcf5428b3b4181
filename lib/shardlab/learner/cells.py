"""The rule and hint cells of the notebooks, and the starter's rule lists, written from `rules` and `hints`.

Each function's notebook (`rules.TAUGHT_IN`) holds one markdown cell for the function, beside the lesson
that teaches it: the rules it must keep, folded, each in the course's words, then its hints, each level folded on
its own. Each function of the starter template states the same rules in its docstring, under "Rules:", each with
the id a failing check prints (the notebook shows the words, not the ids). All are rendered here; `python -m
shardlab cells` rewrites them in the MyST `.md` of each notebook (the cell that starts with the rendered heading,
up to the next cell marker), syncs the paired `.ipynb`, and rewrites the starter's "Rules:" blocks, so a rule or a
hint is edited in one place. `--check` only reports which files differ. Only the notebooks folder and the starter
file it is given are written.
"""

import os
import re
import sys
import textwrap
from importlib import resources
from pathlib import Path

from shardlab.core import files
from shardlab.errors import UsageError
from shardlab.learner import hints, rules, starter

STARTER = Path(str(resources.files("shardlab.learner").joinpath("templates", starter.TEMPLATE)))


def heading(function: str) -> str:
    """The first line of `function`'s learner cell: one fold, whose summary says what it holds, opened on purpose."""
    return (
        f"<details><summary><b>Stuck on <code>{function}</code>?</b> Its rules, then hints from a nudge to the full "
        f"recipe (also <code>python -m shardlab hint {function} LEVEL</code>)</summary>"
    )


def bullet(text: str) -> str:
    """A rule as a sentence of its own: its first letter capitalised, unless it opens with code (in backticks)."""
    return text if text.startswith("`") else text[0].upper() + text[1:]


def rule_fold(function: str) -> str:
    """`function`'s rules, folded: each in the course's words (its id, for the checker's output, is the starter's)."""
    lines = [f"<details><summary>The rules <code>{function}</code> must keep ({len(rules.of(function))})</summary>", ""]
    for rule in rules.of(function):
        lines.append(f"- {bullet(rule.text)}." + (f" {rule.why}" if rule.why else ""))
    if function in rules.NOT_ASKED:
        lines += ["", rules.NOT_ASKED[function]]
    return "\n".join([*lines, "", "</details>"])


def hint_folds(function: str) -> str:
    """`function`'s hints, each level folded on its own (the fold around them names the command that prints them)."""
    parts = []
    for level, text in enumerate(hints.HINTS[function], 1):
        title = "the full recipe" if level == hints.levels(function) else f"hint {level}"
        parts.append(f"<details><summary>{function}: {title}</summary>\n\n{text}\n\n</details>")
    return "\n\n".join(parts)


def learner_cell(function: str) -> str:
    """The one markdown cell of `function`'s notebook: a single fold holding its rules and its hints, each folded."""
    return "\n\n".join([heading(function), rule_fold(function), hint_folds(function), "</details>"])


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
    if function in rules.NOT_ASKED:
        lines += textwrap.wrap(rules.NOT_ASKED[function], width=120, initial_indent="    ", subsequent_indent="    ")
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
    changed, pages = _regenerate_starter(starter_file, write), []
    for notebook in notebooks:
        path = folder / f"{notebook}.md"
        before = path.read_text()
        after = before
        for function in (f for f in rules.FUNCTIONS if rules.TAUGHT_IN[f] == notebook):
            after = rewritten(after, heading(function), learner_cell(function), str(path))
        if after != before:
            changed.append(str(path))
            pages.append(path)
            if write:
                _rewrite(path, after)
    if write and pages:
        _sync(pages)
    return changed


def _regenerate_starter(starter_file: Path, write: bool) -> list[str]:
    """[starter_file] if its rule lists differ from the rendered ones (rewritten when `write`), else []."""
    before = starter_file.read_text()
    after = rewritten_starter(before, str(starter_file))
    if after != before and write:
        _rewrite(starter_file, after)
    return [str(starter_file)] if after != before else []


def _rewrite(path: Path, text: str) -> None:
    """Replace a course source atomically, keeping its mode: an interrupted rewrite leaves the old file whole."""
    files.replace(path, text, mode=os.stat(path).st_mode & 0o7777)


def _sync(paths: list) -> None:
    """Update the paired `.ipynb` of every `.md` in `paths` from it, as `jupytext --sync` does (one interpreter)."""
    from shardlab import process_group

    pairs = [str(path.with_suffix(".ipynb")) for path in paths]
    command = [sys.executable, "-m", "jupytext", "--quiet", "--sync", *pairs]
    done = process_group.run(command, 120, capture_output=True, text=True)  # its own stdout, not ours
    if done.returncode != 0:
        raise UsageError(f"jupytext could not sync {', '.join(pairs)}: {done.stderr.strip()[-400:]}")


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
