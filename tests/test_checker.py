"""The learner path: the starter template, and a checker that passes the reference and catches each mistake.

Each file in tests/broken/ is the reference with one deliberate mistake; the checker must fail it
at the mistake's stage, in the named check, with the course's diagnosis. Only that stage is run
per mistake (the earlier stages use the reference's own functions, see `test_mistakes_touch_only_their_stage`).
"""

import inspect
import json
from argparse import Namespace
from pathlib import Path

import pytest

from shardlab.checker import cli as runner
from shardlab.learner import implementation, reference, starter

BROKEN = Path(__file__).parent / "broken"
STAGE_OF = {"initial": 1, "next_batch": 1, "make_step": 2, "transition": 2, "contract": 3, "save": 3, "restore": 3}

# mistake file -> (stage, check that must fail, phrases its diagnosis must contain)
MISTAKES = {
    "drop_remainder": (1, "batch_lengths_keep_the_remainder", ["the remainder batch was dropped"]),
    "mutate_input": (1, "next_batch_returns_a_new_state", ["mutated the caller's state"]),
    "unsplit_seed_key": (1, "first_order_follows_the_seed", ["drawn from the unsplit seed key"]),
    "reuse_key": (1, "key_changes_at_each_new_epoch", ["one key reused for every epoch"]),
    "step_in_sampler": (1, "next_batch_leaves_step_alone", ["only the transition increments it"]),
    "averaging_local_means": (
        2,
        "gradient_independent_of_device_count",
        ["with device count", "averaging local means"],
    ),
    "local_count": (
        2,
        "gradient_independent_of_device_count",
        ["grows with device count", "dividing by a local count"],
    ),
    "padding_counted": (
        2,
        "gradient_on_tail_batches",
        ["full batches pass but tails fail -> the denominator", "padding counted as observations"],
    ),
    "momentum_before_reduction": (2, "consecutive_updates", ["gradient right but update 2 diverges -> momentum"]),
    "loss_after_update": (2, "loss_is_taken_before_the_update", ["it equals the loss after the update"]),
    "not_sharded": (2, "step_is_sharded", ["no all_reduce", "the step is not sharded"]),
    "checkpoint_without_momentum": (3, "checkpoint_holds_every_field", ["lacks ['momentum']"]),
    "restore_skips_contract": (3, "restore_refuses_another_experiment", ["compare the saved contract"]),
    "save_overwrites": (3, "save_never_overwrites", ["save overwrote an existing checkpoint"]),
    "restore_resets_cursor": (3, "restore_returns_every_field", ["restore reset the cursor"]),
}
# The fresh-interpreter resume costs a child interpreter per run: it runs for the reference (which
# must pass it) and for the one mistake it must catch; the other stage 3 mistakes fail elsewhere.
FRESH = {"restore_resets_cursor"}


def check_cli(tmp_path, spec, stage) -> tuple[int, dict]:
    """`python -m shardlab check` as the CLI runs it (a child interpreter); (exit status, JSON report)."""
    out = tmp_path / "report"
    status = runner.main(Namespace(implementation=str(spec), stage=str(stage), output=str(out)))
    return status, json.loads((out / runner.REPORT).read_text())


@pytest.fixture
def starter_file(tmp_path):
    path = tmp_path / "my_model.py"
    assert starter.main(Namespace(path=str(path))) == 0
    return path


def test_reference_passes_every_stage_in_a_fresh_interpreter(tmp_path):
    status, report = check_cli(tmp_path, "reference", "all")
    assert status == 0
    assert report["passed"] is True and report["environment"]["devices"] == 4
    assert report["environment"]["platform"] == "cpu"
    expected_counts = {str(s): len(m.CHECKS) for s, m in runner.STAGES.items()}
    assert {s: c["checks"] for s, c in report["stages"].items()} == expected_counts
    for entry in report["checks"]:
        assert set(entry) >= {"name", "stage", "passed", "expected", "observed", "diagnosis"}
        assert entry["passed"], entry


def test_untouched_starter_fails_stage_1_with_not_implemented(tmp_path, starter_file):
    status, report = check_cli(tmp_path, starter_file, 1)
    assert status == 1 and report["passed"] is False
    assert {e["stage"] for e in report["checks"]} == {1}
    assert len(report["checks"]) == len(runner.STAGES[1].CHECKS)
    for entry in report["checks"]:
        assert not entry["passed"]
        assert "not implemented yet (stage 1)" in entry["diagnosis"]


def test_starter_refuses_to_overwrite(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("# my own work\n")
    assert starter.main(Namespace(path=str(path))) == 1
    assert path.read_text() == "# my own work\n"


def test_starter_loads_and_each_function_names_its_stage(starter_file):
    module = implementation.load(str(starter_file))
    dummies = {"make_step": (None,), "contract": (None, None)}
    for name, stage in STAGE_OF.items():
        arity = len(inspect.signature(getattr(module, name)).parameters)
        args = dummies.get(name, (None,) * arity)
        with pytest.raises(NotImplementedError, match=rf"{name}: not implemented yet \(stage {stage}\)"):
            getattr(module, name)(*args)


def test_starter_signatures_match_the_reference(starter_file):
    module = implementation.load(str(starter_file))

    def shape(function):
        return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]

    assert set(STAGE_OF) == set(implementation.API)
    for name in implementation.API:
        assert shape(getattr(module, name)) == shape(getattr(reference, name)), name


def test_mistakes_touch_only_their_stage():
    for mistake, (stage, _, _) in MISTAKES.items():
        module = implementation.load(str(BROKEN / f"{mistake}.py"))
        changed = [n for n in implementation.API if getattr(module, n) is not getattr(reference, n)]
        assert changed and {STAGE_OF[n] for n in changed} == {stage}, (mistake, changed)


def test_every_broken_file_is_listed():
    assert sorted(p.stem for p in BROKEN.glob("*.py")) == sorted(MISTAKES)


@pytest.mark.parametrize(
    "mistake",
    [pytest.param(name, marks=getattr(pytest.mark, f"stage{stage}")) for name, (stage, _, _) in MISTAKES.items()],
)
def test_mistake_is_caught_at_its_stage_with_its_diagnosis(mistake):
    stage, check, phrases = MISTAKES[mistake]
    skip = () if mistake in FRESH else ("fresh_process_resume",)
    results = runner.run_checks(str(BROKEN / f"{mistake}.py"), stage, only=True, skip=skip)
    failed = {r.name: r for r in results if not r.passed}
    assert check in failed, f"{mistake}: {check} passed; failures were {sorted(failed)}"
    if mistake in FRESH:
        assert "fresh_process_resume" in failed and "in a fresh interpreter" in failed["fresh_process_resume"].diagnosis
    assert {r.stage for r in results} == {stage}
    for phrase in phrases:
        assert phrase in failed[check].diagnosis, failed[check]
    assert failed[check].expected != failed[check].observed
