"""The learner's loop agrees with itself: the checker's registry, the rules, the starter, the notebooks and the hints.

Every check the checker runs enforces at least one rule; every rule (`rule:ID`) is stated in the
starter's docstring of the function it constrains and taught in a markdown cell of that function's
notebook; every function has hint levels from a nudge to the full recipe, served by `python -m
shardlab hint` and folded in the notebook; the starter says what must hold, never the code.
"""

import ast
import re

import jupytext
import nbformat
import pytest

from shardlab.__main__ import main as shardlab_main
from shardlab.checker.cli import STAGES, checks_of
from shardlab.course import answers, catalog
from shardlab.learner import hints, implementation, rules, starter
from shardlab.learner.cells import heading, hint_folds, learner_cell, rule_fold, starter_rules

REGISTRY = {check.__name__ for stage in STAGES for check in checks_of(stage)}


def _markdown(notebook: str) -> list[str]:
    """Markdown cell sources of both files of the pair (the .md and the .ipynb must each hold the text)."""
    text = jupytext.read(catalog.NOTEBOOK_DIR / f"{notebook}.md")
    source = nbformat.read(catalog.NOTEBOOK_DIR / f"{notebook}.ipynb", as_version=4)
    return [c.source for nb in (text, source) for c in nb.cells if c.cell_type == "markdown"]


def _starter_docstrings() -> dict:
    tree = ast.parse(starter.template_text())
    return {node.name: ast.get_docstring(node) or "" for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_every_check_enforces_a_rule_and_every_named_check_exists():
    unruled = sorted(name for name in REGISTRY if not rules.for_check(name))
    assert not unruled, f"checks no rule names (add them to shardlab/learner/rules.py): {unruled}"
    stale = sorted({c for rule in rules.RULES for c in rule.checks} - REGISTRY)
    assert not stale, f"rules name checks the checker does not run: {stale}"
    assert len({rule.id: rule for rule in rules.RULES}) == len(rules.RULES)  # ids are unique
    assert {rule.function for rule in rules.RULES} == set(rules.FUNCTIONS) == set(implementation.API)


def test_every_rule_is_stated_in_the_starter_under_its_function():
    docs = _starter_docstrings()
    for function in rules.FUNCTIONS:  # the whole list, as rendered from rules.py (python -m shardlab cells)
        assert f"\n{starter_rules(function)}\n" in starter.template_text(), function
    for rule in rules.RULES:
        assert f"{rules.MARKER}{rule.id}:" in docs[rule.function], (rule.id, rule.function)
        elsewhere = [f for f, doc in docs.items() if f != rule.function and f"{rules.MARKER}{rule.id}:" in doc]
        assert not elsewhere, (rule.id, elsewhere)


@pytest.mark.parametrize("function", rules.FUNCTIONS)
def test_every_rule_is_taught_in_its_notebook_folded_in_words_without_its_id(function):
    cells = _markdown(rules.TAUGHT_IN[function])
    mine = [c for c in cells if c.strip() == learner_cell(function)]
    assert len(mine) == 2, (
        f"the cell of {function} in {rules.TAUGHT_IN[function]} differs from learner_cell({function!r}): run "
        "`python -m shardlab cells` (make cells)"
    )
    fold = rule_fold(function)
    assert fold.startswith("<details><summary>") and fold.endswith("</details>") and fold in mine[0]
    for rule in rules.of(function):  # each rule's words inside the fold; its id (the starter's) on no cell of the page
        code_first = rule.text.startswith("`")  # code keeps its letters: `compiled=False` is not `Compiled=False`
        said = rule.text if code_first else rule.text[0].upper() + rule.text[1:]
        assert f"- {said}." in fold, rule.id
        assert not [c for c in cells if f"{rules.MARKER}{rule.id}" in c], (rule.id, rules.TAUGHT_IN[function])
    assert "make check" not in fold and "make check" not in heading(function)  # the check section names the command


def test_a_rule_that_opens_with_code_keeps_the_code_as_written():
    opening = {rule.id: rule.text.split("`")[1] for rule in rules.RULES if rule.text.startswith("`")}
    assert {"momentum", "eager-step"} <= set(opening)  # `v <- decay*v + g`, `compiled=False`
    for rule in rules.RULES:
        fold = rule_fold(rule.function)
        if rule.id in opening:
            assert f"- `{opening[rule.id]}`" in fold and f"- `{opening[rule.id][0].upper()}" not in fold, rule.id
        else:
            assert f"- {rule.text[0].upper()}" in fold, rule.id


FOLD = re.compile(r"<details>.*?</details>", re.S)


@pytest.mark.parametrize("notebook", sorted(path.stem for path in catalog.NOTEBOOK_DIR.glob("stage*.md")))
def test_no_rule_id_in_running_prose(notebook):
    """An id belongs to the starter and the checker's output; the lessons' prose states the ideas in words."""
    planted = "Keep one half. <details><summary>rules</summary>\n\n- a rule (`rule:a`)\n\n</details> (`rule:b`)"
    assert FOLD.sub("", planted) == "Keep one half.  (`rule:b`)"
    label = re.compile(re.escape(rules.MARKER) + r"[a-z0-9]")  # an id, not "no such rule: only ..."
    assert label.findall(FOLD.sub("", planted)) == ["rule:b"] and not label.search("no such rule: only")
    outside = [c for c in _markdown(notebook) if label.search(FOLD.sub("", c))]
    assert not outside, [c[:120] for c in outside]


@pytest.mark.parametrize("function", rules.FUNCTIONS)
def test_every_hint_level_exists_and_is_folded_in_the_notebook(function, capsys):
    levels = hints.HINTS[function]
    assert len(levels) >= 3 and len(set(levels)) == len(levels) and all(t.strip() for t in levels)
    assert levels[-1].startswith("Full recipe") and not any(t.startswith("Full recipe") for t in levels[:-1])
    assert all(len(a) <= len(b) * 2 for a, b in zip(levels, levels[1:]))  # each layer says at least as much
    cells = _markdown(rules.TAUGHT_IN[function])
    folds = hint_folds(function)
    assert sum(folds in c and c.strip() == learner_cell(function) for c in cells) == 2, (
        f"the hints of {function} differ from hint_folds({function!r}): run `python -m shardlab cells` (make cells)"
    )
    for level, text in enumerate(levels, 1):  # each level in a fold of its own, after the level before it
        at = folds.index(f"\n\n{text}\n\n</details>")
        assert folds.rfind("<details>", 0, at) > folds.rfind("</details>", 0, at), level
        assert level == 1 or at > folds.index(f"\n\n{levels[level - 2]}\n\n</details>"), level
    for level in range(1, len(levels) + 1):
        assert shardlab_main(["hint", function, str(level)]) == 0
        assert levels[level - 1] in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv", [["hint", "initialise"], ["hint", "save", "0"], ["hint", "save", "99"], ["hint", "save", "two"]]
)
def test_a_bad_hint_request_is_refused_on_one_line(argv, capsys):
    assert shardlab_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("[shardlab hint]") and "\n" not in err and "Traceback" not in err


# What a recipe looks like; the starter states rules and must not contain these (the hints do).
RECIPE_IDIOMS = ("jax.random.split(", "jax.lax.psum", "os.link(", "tempfile.mkstemp", "in_specs", "hashlib.sha256(")


def test_the_starter_states_rules_not_the_code():
    text = starter.template_text()
    assert not [idiom for idiom in RECIPE_IDIOMS if idiom in text]
    assert all(any(idiom in level for f in hints.HINTS for level in hints.HINTS[f]) for idiom in RECIPE_IDIOMS)
    docs = _starter_docstrings()
    for function in rules.FUNCTIONS:
        first = docs[function].splitlines()[0]
        assert first.startswith("Return") or first.startswith("Write"), (function, first)


def test_the_contract_recipe_has_the_keys_of_the_contract_the_notebook_prints():
    import re

    import shardlab as sl

    recipe = hints.HINTS["contract"][-1]
    keys = re.findall(r"'(\w+)':", recipe)
    printed = sl.contract(sl.teaching_fixture(), sl.Config(seed=17, batch_size=7))  # stage3a's `contract` cell
    assert keys == list(printed), (keys, list(printed))
    for key in printed:  # each key once, with the value the learner's contract() must derive for it
        assert recipe.count(f"'{key}':") == 1, key
    import hashlib

    from shardlab.core.checkpoint import check_contract_form

    features, targets = sl.teaching_fixture()  # the recipe's dict, evaluated, has the form a checkpoint needs
    config = sl.Config(seed=17, batch_size=7)
    made = eval(recipe[recipe.index("return ") + 7 : recipe.index("}:") + 1], {"hashlib": hashlib}, locals())
    check_contract_form(made, "the contract recipe")
    assert {k: v for k, v in made.items() if k != "data_sha256"} == {
        k: v for k, v in printed.items() if k != "data_sha256"
    }


def test_the_initial_recipe_keeps_key_and_order_on_the_host():
    """The recipe, run as written, gives the state the lesson describes: only weights and momentum are placed."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import shardlab as sl

    recipe = hints.HINTS["initial"][-1].removeprefix("Full recipe: ")
    statements, returned = recipe.split("; return ", 1)
    data, seed, mesh = sl.teaching_fixture(), 17, sl.make_mesh(1)
    scope = {"jax": jax, "jnp": jnp, "np": np, "NamedSharding": NamedSharding, "P": P}
    scope.update(data=data, seed=seed, mesh=mesh)
    exec(statements.replace("; ", "\n"), scope)
    made = eval(returned[: returned.rindex("}") + 1], scope)
    assert sorted(made) == sorted(sl.FIELDS)
    for name in ("key", "order"):
        assert isinstance(made[name], np.ndarray) and not isinstance(made[name], jax.Array), name
    for name in ("weights", "momentum"):
        assert isinstance(made[name], jax.Array) and made[name].sharding.spec == P(), name
    first_half, spent = np.split(np.asarray(jax.random.split(jax.random.PRNGKey(seed))), 2)  # the rule, by hand
    np.testing.assert_array_equal(made["key"], first_half[0])
    np.testing.assert_array_equal(made["order"], np.asarray(jax.random.permutation(spent[0], len(data.targets))))


def test_a_failing_check_names_its_rules():
    from shardlab.checker.cli import Result, describe

    shown = describe(Result("save_never_overwrites", 3, False, "refused", "overwritten", "save overwrote", 0.1))
    assert "rule:never-overwrite" in shown


@pytest.mark.parametrize("notebook", sorted({p.notebook for p in answers.PROMPTS}))
def test_every_notebook_that_asks_for_answers_lists_them_with_the_tag_the_portfolio_reads(notebook):
    """One markdown cell of each file of the pair lists exactly the prompts answers.PROMPTS holds for the notebook
    (id and question) and names the tag the portfolio reads; stage 1's gives an example first line that
    answers.answer_id reads as its first prompt's id."""
    asked = answers.prompts(notebook)
    listing = [f"- `{p.id}` — {p.question}" for p in asked]
    cells = [c for c in _markdown(notebook) if set(listing) <= set(c.splitlines())]
    assert len(cells) == 2, notebook  # the .md's and the .ipynb's
    for cell in cells:
        assert [line for line in cell.splitlines() if line.startswith("- `")] == listing, cell
        assert f"`{answers.TAG}`" in cell, cell
    if notebook == "stage1_batches":
        example = re.search(r"\(for example `(Answer: [^`]+)`\)", cells[0])
        assert example and answers.answer_id(f"{example[1]}\nmy text") == asked[0].id, cells[0]


@pytest.mark.slow  # a copy of every notebook, paired again through jupytext: make test's, not the inner loop's
def test_the_cells_command_rewrites_a_stale_rule_cell_and_its_pair(tmp_path, capsys):
    """A copy of the notebooks with one rule line and one hint edited by hand, and a starter with one rule edited:
    `cells --check` names the three files and writes nothing; `cells` puts back exactly the committed .md, .ipynb
    and starter, and writes no other file."""
    import shutil

    copy = tmp_path / "notebooks"
    shutil.copytree(catalog.NOTEBOOK_DIR, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    template = tmp_path / "starter.py"
    rule_line = f"- {rules.MARKER}{rules.of('save')[0].id}: "
    assert starter.template_text().count(rule_line) == 1
    template.write_text(starter.template_text().replace(rule_line, rule_line + "an older wording; "))
    template.chmod(0o640)  # a rewrite keeps the file's own mode
    target = copy / f"{rules.TAUGHT_IN['next_batch']}.md"
    rule, hint = rules.of("next_batch")[0], hints.HINTS["save"][0]
    text, said = target.read_text(), rule.text[0].upper() + rule.text[1:]  # the fold's sentence
    assert text.count(said) == 1
    target.write_text(text.replace(said, "An older wording of the rule"))
    other = copy / f"{rules.TAUGHT_IN['save']}.md"
    other.write_text(other.read_text().replace(hint, "an older hint"))
    listing = sorted(p.name for p in copy.iterdir())
    stale = {p.name: p.read_bytes() for p in copy.iterdir()}

    command = ["cells", "--notebooks", str(copy), "--starter", str(template)]
    assert shardlab_main([*command, "--check"]) == 1
    shown = capsys.readouterr().out
    assert f"differ: {target}" in shown and f"differ: {other}" in shown and f"differ: {template}" in shown
    assert shown.count("differ:") == 3
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == stale  # --check writes nothing

    assert shardlab_main(command) == 0
    assert sorted(p.name for p in copy.iterdir()) == listing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notebooks", "starter.py"]
    for path in copy.iterdir():
        assert path.read_bytes() == (catalog.NOTEBOOK_DIR / path.name).read_bytes(), path.name
    assert template.read_text() == starter.template_text() and template.stat().st_mode & 0o777 == 0o640
    assert shardlab_main([*command, "--check"]) == 0


def test_the_cells_command_refuses_a_folder_without_the_notebooks(tmp_path, capsys):
    assert shardlab_main(["cells", "--notebooks", str(tmp_path), "--starter", str(tmp_path / "none.py")]) == 2
    assert "none.py does not exist: give the starter template's path" in capsys.readouterr().err
    template = tmp_path / "starter.py"
    template.write_text(starter.template_text().replace("    Rules:\n", "    Rules:\n    - stale\n", 1))
    stale = template.read_text()
    assert shardlab_main(["cells", "--notebooks", str(tmp_path), "--starter", str(template)]) == 2
    assert "does not exist: give the folder that holds the course's notebooks" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["starter.py"] and template.read_text() == stale  # untouched


@pytest.mark.parametrize(("only", "alone"), [("1", True), ("yes", True), ("", False), ("0", False)])
def test_make_check_only_checks_just_the_stage_named(only, alone):
    """`make check STAGE=2 ONLY=1` (or yes) passes --only, which the command reads as stage 2 alone; without it
    the checks are cumulative. `make -n` prints the command without running it."""
    import shlex
    import subprocess

    from conftest import REPO

    from shardlab.__main__ import parser

    done = subprocess.run(
        ["make", "-n", "check", "IMPL=my_model.py", "STAGE=2", f"ONLY={only}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "-m shardlab check" in line)
    argv = shlex.split(line.split("-m shardlab", 1)[1])
    args = parser("check").parse_args(argv)
    assert args.implementation == "my_model.py" and args.stage == "2" and args.only is alone


def test_the_readme_says_where_and_how_to_write_answers_as_the_portfolio_reads_them():
    """The README's *Written answers* paragraph: the tag, the first line, its example id, the self-check line and
    the folder `make lab` makes, each as the portfolio reads them (`course.answers`, the notebooks' last cell)."""
    from conftest import REPO

    from shardlab.course import selfcheck
    from shardlab.handin.page import status_line

    readme = (REPO / "README.md").read_text()
    start = readme.index("**Written answers**")
    paragraph = readme[start : readme.index("\n\n", start)]
    assert f"tag `{answers.TAG}`" in paragraph and "workspace/" in paragraph and "make lab" in paragraph
    example = re.search(r"`Answer: ID` \(for example `Answer: ([\w-]+)`\)", paragraph)
    assert example and example[1] in {p.id for p in answers.PROMPTS}, paragraph
    assert answers.answer_id(f"Answer: {example[1]}\nwhat I found") == example[1]
    for notebook in catalog.NOTEBOOKS:  # every notebook with a self-check holds that line in the cell under it
        if selfcheck.questions(notebook):
            cells = jupytext.read(catalog.NOTEBOOK_DIR / f"{notebook}.md").cells
            heading = max(i for i, c in enumerate(cells) if c.cell_type == "markdown" and "## Self-check" in c.source)
            asked = cells[heading + 1]
            assert asked.cell_type == "code" and "\nchoices = {}" in f"\n{asked.source}", notebook
    assert status_line({"ready": True, "missing": []}) in " ".join(paragraph.split())  # as the portfolio prints it
    # the stage 4 hypothesis: the README names the line the learner edits, and the notebook's cell holds it
    assert "`mine = None`" in paragraph and "stage4a_profile" in " ".join(paragraph.split())
    cells = jupytext.read(catalog.NOTEBOOK_DIR / "stage4a_profile.md").cells
    assert any("hypothesis" in c.metadata.get("tags", []) and "\nmine = None" in f"\n{c.source}" for c in cells)
    choices = re.search(r"\(`(choices = \{[^}]+\})`\)", paragraph)
    first = jupytext.read(catalog.NOTEBOOK_DIR / "stage1_batches.md").cells
    shown = next(c.source for c in first if "choices = {}" in c.source)
    assert choices and choices[1].split(" = ")[1] in shown, "the README's choices example is the notebooks' own"


# What each kind of argument `invalid_arguments_are_refused` tries must be named in the words of the rule it
# enforces, as the learner reads them in the starter and in the notebook; written here, not read from the rules.
ARGUMENT_WORDS = {
    "checkpoint": "checkpoint",
    "empty file": "empty",
    "empty folder": "folder",
    "full folder": "folder",
    "link to checkpoint": "symbolic link",
    "nothing": "does not exist",
    "dangling link": "symbolic link that leads nowhere",
    "half checkpoint": "cut",
    "npz added": "with .npz added or removed",
    "npz removed": "with .npz added or removed",
    "folder of a checkpoint": "folder",
    "pattern match": "matches as a pattern",
    "separator": "trailing separator stripped",
    "backslash": "a backslash read as '/'",
}


def test_every_argument_a_check_refuses_is_named_by_its_rule_in_the_starter_and_the_notebook():
    from shardlab.checker.arguments import ARGUMENTS

    unknown = sorted({a.layout for a in ARGUMENTS} - set(ARGUMENT_WORDS))
    assert not unknown, f"say which words of its rule teach these argument kinds: {unknown}"
    docs = _starter_docstrings()
    for argument in ARGUMENTS:
        rule = rules.BY_ID[argument.rule]
        assert argument.function == rule.function and "invalid_arguments_are_refused" in rule.checks
        words = ARGUMENT_WORDS[argument.layout]
        taught = [c for c in _markdown(rules.TAUGHT_IN[rule.function]) if c.strip() == learner_cell(rule.function)]
        stated = " ".join(docs[rule.function].split())  # the docstring's lines joined, as a sentence
        assert words in rule.text and words in stated and all(words in " ".join(c.split()) for c in taught), (
            argument.name,
            rule.id,
        )


def test_stage_4_asks_for_no_new_function():
    """Every check of stage 4 enforces only make_step's rules: stage 4 asks the learner for no function of its own."""
    judged = {rule.function for check in checks_of(4) for rule in rules.for_check(check.__name__)}
    assert judged == {"make_step"}, judged


@pytest.mark.parametrize("function", sorted(rules.NOT_ASKED))
def test_what_a_lesson_shows_but_no_check_asks_is_said_beside_the_rules(function):
    """The course's own functions refuse bad input; the learner's are never asked to (no check's rule is about it),
    and both the starter and the notebook cell say so."""
    note = rules.NOT_ASKED[function]
    assert note.startswith("Not asked of yours")
    assert not any("refus" in rule.text for rule in rules.of(function))  # no rule of this function asks it
    assert note in rule_fold(function)
    assert " ".join(note.split()) in " ".join(_starter_docstrings()[function].split())
