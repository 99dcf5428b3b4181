"""The learner's loop agrees with itself: the checker's registry, the rules, the starter, the notebooks and the hints.

Every check the checker runs enforces at least one rule; every rule (`rule:ID`) is stated in the
starter's docstring of the function it constrains and taught in a markdown cell of that function's
notebook; every function has hint levels from a nudge to the full recipe, served by `python -m
shardlab hint` and folded in the notebook; the starter says what must hold, never the code.
"""

import ast

import jupytext
import nbformat
import pytest

from shardlab.__main__ import main as shardlab_main
from shardlab.checker.cli import STAGES, checks_of
from shardlab.course import answers, catalog
from shardlab.learner import hints, implementation, rules, starter

REGISTRY = {check.__name__ for stage in STAGES for check in checks_of(stage)}


def rule_cell(function: str) -> str:
    """The notebook cell stating `function`'s rules, each with its marker."""
    lines = [f"**The rules `{function}` must keep**, each under the id a failing check names:", ""]
    for rule in rules.of(function):
        lines.append(f"- `{rules.MARKER}{rule.id}` — {rule.text}." + (f" {rule.why}" if rule.why else ""))
    return "\n".join(lines)


def hint_cell(function: str) -> str:
    """The notebook cell that holds `function`'s hints, each level folded on its own."""
    parts = [f"**Hints for `{function}`**, each folded: open one only when you are stuck, the lowest first."]
    for level, text in enumerate(hints.HINTS[function], 1):
        title = "the full recipe" if level == hints.levels(function) else f"hint {level}"
        parts.append(f"<details><summary>{function}: {title}</summary>\n\n{text}\n\n</details>")
    parts.append(f"The same from a terminal: `python -m shardlab hint {function} LEVEL`.")
    return "\n\n".join(parts)


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
    for rule in rules.RULES:
        assert f"{rules.MARKER}{rule.id}:" in docs[rule.function], (rule.id, rule.function)
        elsewhere = [f for f, doc in docs.items() if f != rule.function and f"{rules.MARKER}{rule.id}:" in doc]
        assert not elsewhere, (rule.id, elsewhere)


@pytest.mark.parametrize("function", rules.FUNCTIONS)
def test_every_rule_is_taught_in_its_notebook(function):
    cells = _markdown(rules.TAUGHT_IN[function])
    for rule in rules.of(function):
        assert sum(f"`{rules.MARKER}{rule.id}`" in c for c in cells) >= 2, (rule.id, rules.TAUGHT_IN[function])
    assert sum(c.strip() == rule_cell(function) for c in cells) == 2, (
        f"the rule cell of {function} in {rules.TAUGHT_IN[function]} differs from rule_cell"
        f"({function!r}); paste it again:\n{rule_cell(function)}"
    )


@pytest.mark.parametrize("function", rules.FUNCTIONS)
def test_every_hint_level_exists_and_is_folded_in_the_notebook(function, capsys):
    levels = hints.HINTS[function]
    assert len(levels) >= 3 and len(set(levels)) == len(levels) and all(t.strip() for t in levels)
    assert levels[-1].startswith("Full recipe") and not any(t.startswith("Full recipe") for t in levels[:-1])
    assert all(len(a) <= len(b) * 2 for a, b in zip(levels, levels[1:]))  # each layer says at least as much
    cells = _markdown(rules.TAUGHT_IN[function])
    assert sum(c.strip() == hint_cell(function) for c in cells) == 2, (
        f"the hint cell of {function} differs from hint_cell({function!r}):\n" + hint_cell(function)
    )
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


def test_a_failing_check_names_its_rules():
    from shardlab.checker.cli import Result, describe

    shown = describe(Result("save_never_overwrites", 3, False, "refused", "overwritten", "save overwrote", 0.1))
    assert "rule:never-overwrite" in shown


def howto_markdown(notebook: str) -> str:
    """The notebook cell that says how to write the answers `notebook` asks for, and where the portfolio reads them."""
    asked = answers.prompts(notebook)
    lines = [
        "**Your written answers for the portfolio.** "
        + ("This notebook asks for one:" if len(asked) == 1 else f"This notebook asks for {len(asked)}:"),
        "",
        *[f"- `{p.id}` — {p.question}" for p in asked],
        "",
        "To write one, in your own copy of this notebook (`make lab` makes the copies in `workspace/`): add a "
        "markdown cell, give it the tag `answer` (JupyterLab: the gear icon in the right sidebar, *Common Tools* -> "
        "*Cell Tags*, add `answer`), start it with the line `Answer: ID` (for example "
        f"`Answer: {asked[0].id}`) and write your answer below that line; save the notebook. "
        "`make portfolio IMPL=<your file> OUT=<your receipts>` copies the text as written from `workspace/` and "
        "lists every answer it did not find; it never writes one for you.",
    ]
    return "\n".join(lines)


@pytest.mark.parametrize("notebook", sorted({p.notebook for p in answers.PROMPTS}))
def test_every_notebook_that_asks_for_answers_says_how_to_write_them(notebook):
    cells = _markdown(notebook)
    assert sum(c.strip() == howto_markdown(notebook) for c in cells) == 2
    for prompt in answers.prompts(notebook):
        assert f"`{prompt.id}`" in howto_markdown(notebook)
    example = f"Answer: {answers.prompts(notebook)[0].id}\nmy text"
    assert answers.answer_id(example) == answers.prompts(notebook)[0].id  # the way the cell says parses
