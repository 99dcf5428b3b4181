"""What a learner reads: every prediction answered by an observed output, no wall of output, no word of our own process.

The notebook rules are checked on the sources (`notebooks/`) and on the executed copies of a
fresh course run (`run_dir`); the words rule also on docs/, lib/, tests/, the README and the
committed receipts.
"""

import re

import nbformat
import pytest
from conftest import REPO, cell_tags, executed

from rig.bench import targets
from shardlab.course import catalog

PREDICT, REVEAL = "predict", "reveal"
ASKING = (
    "stage1_batches",
    "stage2_update",
    "stage3a_checkpoint",
    "stage3b_resume",
    "stage4a_profile",
    "stage4b_beyond",
    "stage5a_protocol",
    "stage5b_scaling",
)
MAX_LINES = 25  # per cell output, unless it is a figure (images are not counted)
WRAP = 160  # a longer line is counted as the lines a reader sees it wrapped into
# how the project is managed: never in a notebook, receipt, doc, comment or test
PROCESS = re.compile(r"\bissues?\b|\breview(s|ed|er|ers|ing)?\b|\btickets?\b|\bbacklog\b", re.IGNORECASE)
# the bench's own targets live in bench.json and docs/, never in a lesson
BENCH_WORDS = re.compile(
    r"\bretired\b|\bnot met\b|\btargets? (were |was |are )?met\b|"
    + "|".join(re.escape(name) for name in (*targets.TARGETS, *targets.RETIRED)),
    re.IGNORECASE,
)
FOLD = re.compile(r"<details><summary>(.*?)</summary>.*?</details>", re.S)  # a closed fold shows its summary line
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".yml", ".yaml", ".json", ".html", ".ipynb", ".j2"}


def text_files(*roots):
    for root in roots:
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in paths:
            if path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts and path.name != "test_course_text.py":
                yield path


def hits(pattern, paths) -> list[str]:
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            if match := pattern.search(line):
                found.append(f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{number}: {match[0]!r}")
    return found


def shown_text(cell) -> list[str]:
    """The lines a reader sees in a code cell's outputs (images left out; a fold, closed, as its summary)."""
    lines = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            lines += output.get("text", "").splitlines()
        elif output.get("output_type") == "error":
            lines += [f"{output.get('ename')}: {output.get('evalue')}", *output.get("traceback", [])]
        else:
            data = output.get("data", {})
            text = data.get("text/markdown") or (
                "" if any(k.startswith("image/") for k in data) else data.get("text/plain")
            )
            lines += FOLD.sub(r"\1", text or "").splitlines()
    return lines


def visible_lines(lines: list[str]) -> int:
    return sum(max(1, -(-len(line) // WRAP)) for line in lines)


def unrevealed(nb, ran: bool = True) -> list[str]:
    """Each `predict` cell with no later `reveal` code cell before the next `predict` (with output, if `ran`)."""
    missing, open_prompt = [], None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and PREDICT in cell_tags(cell):
            if open_prompt is not None:
                missing.append(open_prompt)
            open_prompt = f"cell {index}: {cell.source.strip().splitlines()[0][:70]}"
        elif cell.cell_type == "code" and REVEAL in cell_tags(cell) and open_prompt is not None:
            if not ran or any(line.strip() for line in shown_text(cell)):
                open_prompt = None
    return missing + ([open_prompt] if open_prompt else [])


ANSWERED = "hypothesis"  # the code cell a learner writes a prompt's answer in: nothing after it can show it first


def shown_before_reveal(nb) -> list[str]:
    """Each `predict` prompt after which a code cell other than a `reveal` shows output first (it may answer it),
    before the learner's own answer cell (tagged `hypothesis`), where the prompt is answered in writing."""
    early = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or PREDICT not in cell_tags(cell):
            continue
        for later in nb.cells[index + 1 :]:
            if later.cell_type == "code" and ANSWERED in cell_tags(later):
                break
            if later.cell_type == "code" and any(line.strip() for line in shown_text(later)):
                if REVEAL not in cell_tags(later):
                    early.append(f"cell {index}: output of {sorted(cell_tags(later))} before the reveal")
                break
    return early


# the notebooks whose every prompt comes before any output: nothing is shown between a prompt and its reveal
PROMPT_FIRST = ("stage4a_profile", "stage4b_beyond", "stage5a_protocol", "stage5b_scaling")


def source_notebooks():
    return [(name, nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)) for name in catalog.NOTEBOOKS]


def test_the_course_speaks_of_the_course_alone():
    roots = [REPO / name for name in ("docs", "lib", "tests", "notebooks", "README.md", "browser_tests", "receipts")]
    found = hits(PROCESS, text_files(*roots))
    assert not found, f"words about how the project is managed: {found[:10]}"


def test_the_lessons_leave_the_bench_targets_to_the_bench():
    lessons = [p for p in text_files(REPO / "notebooks", REPO / "receipts") if p.suffix in {".md", ".ipynb", ".html"}]
    found = hits(BENCH_WORDS, lessons)
    assert not found, f"the bench's targets belong in bench.json and docs/, not in a lesson: {found[:10]}"


def test_the_word_rules_find_what_they_forbid():
    assert PROCESS.search("as the issue asked") and PROCESS.search("Reviewed by") and not PROCESS.search("tissue")
    assert BENCH_WORDS.search("two targets are retired") and BENCH_WORDS.search("`e2e_speedup_b7` not met")
    assert not BENCH_WORDS.search("the key changed once; the bookkeeping is exact")


@pytest.mark.parametrize("name,nb", source_notebooks(), ids=catalog.NOTEBOOKS)
def test_every_prediction_prompt_is_tagged_and_followed_by_a_reveal_cell(name, nb):
    untagged = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "markdown" and re.search(r"\*\*Predict[:,]", c.source) and PREDICT not in cell_tags(c)
    ]
    assert not untagged, f"{name}: cells {untagged} ask for a prediction without the `{PREDICT}` tag"
    missing = unrevealed(nb, ran=False)
    assert not missing, f"{name}: predictions with no `{REVEAL}` code cell before the next: {missing}"


def test_the_reveal_rule_catches_a_prompt_left_open():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    prompt = new_markdown_cell("**Predict:** how many?", metadata={"tags": [PREDICT]})
    answer = new_code_cell("print(3)", metadata={"tags": [REVEAL]})
    answer.outputs = [new_output("stream", name="stdout", text="observed: 3\n")]
    silent = new_code_cell("x = 3", metadata={"tags": [REVEAL]})
    plain = new_code_cell("print(3)")
    plain.outputs = answer.outputs
    assert unrevealed(new_notebook(cells=[prompt, answer])) == []
    again = new_markdown_cell(prompt.source, metadata={"tags": [PREDICT]})
    assert len(unrevealed(new_notebook(cells=[prompt, again, answer]))) == 1  # the first prompt is never answered
    assert len(unrevealed(new_notebook(cells=[prompt, plain]))) == 1  # output, but not a reveal cell
    assert len(unrevealed(new_notebook(cells=[prompt, silent]))) == 1  # a reveal cell that showed nothing
    assert unrevealed(new_notebook(cells=[prompt, silent]), ran=False) == []
    assert len(unrevealed(new_notebook(cells=[answer, prompt]))) == 1  # the answer came before the question
    assert shown_before_reveal(new_notebook(cells=[prompt, silent, answer])) == []
    assert len(shown_before_reveal(new_notebook(cells=[prompt, plain, answer]))) == 1  # an output before the reveal
    written = new_code_cell("mine = None", metadata={"tags": [ANSWERED]})  # the learner answers in writing first
    assert shown_before_reveal(new_notebook(cells=[prompt, written, plain, answer])) == []
    assert len(shown_before_reveal(new_notebook(cells=[prompt, plain, written, answer]))) == 1
    assert visible_lines(["x" * 400, "y"]) == 4 and visible_lines([]) == 0


@pytest.mark.notebooks
@pytest.mark.parametrize("name", catalog.NOTEBOOKS)
def test_every_prediction_is_answered_by_an_observed_output(run_dir, name):
    nb = executed(run_dir, name)
    assert name not in ASKING or any(PREDICT in cell_tags(c) for c in nb.cells), f"{name} asks for no prediction"
    assert not unrevealed(nb), f"{name}: predictions no later output answers: {unrevealed(nb)}"


@pytest.mark.notebooks
@pytest.mark.parametrize("name", PROMPT_FIRST)
def test_nothing_is_shown_between_a_prediction_and_its_reveal(run_dir, name):
    early = shown_before_reveal(executed(run_dir, name))
    assert not early, f"{name}: outputs shown before a prediction's reveal: {early}"


@pytest.mark.notebooks
@pytest.mark.parametrize("name", catalog.NOTEBOOKS)
def test_no_cell_output_is_a_wall_or_says_a_line_twice(run_dir, name):
    nb = executed(run_dir, name)
    long, twice = [], []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        lines = shown_text(cell)
        if visible_lines(lines) > MAX_LINES:
            long.append((index, visible_lines(lines)))
        plain = [line for line in lines if line.strip() and not line.lstrip().startswith("|")]
        twice += [(index, line[:60]) for line in sorted(set(plain)) if plain.count(line) > 1]
    assert not long, f"{name}: cell outputs longer than {MAX_LINES} lines (cell, lines): {long}"
    assert not twice, f"{name}: a line printed twice in one cell (cell, line): {twice}"


@pytest.mark.notebooks
def test_the_fresh_receipts_speak_of_the_course_alone(run_dir):
    pages = [p for p in run_dir.iterdir() if p.suffix in {".ipynb", ".html"}]
    found = hits(PROCESS, pages) + hits(BENCH_WORDS, pages)
    assert not found, f"the executed notebooks speak of the project, not the course: {found[:10]}"
