"""What the course notebooks assert about a learner's functions, and the checks that cover each assertion.

`CELLS` is the one table (`COVERAGE` reads it by (notebook, tag)): for every notebook cell that asserts
something about the implementation under study, hands its output to course code that refuses bad input
(the Orbax save), or only calls it, the checks that fail whenever that cell would. A learner whose file
passes the checker therefore never fails one of these cells; `make run IMPL=...` names the covering
checks when a cell fails (shardlab.course.execute), and the tests verify that every asserting cell is
listed and every named check exists. (A setup cell that cannot load the file is named by `make run`
itself: `implementation_loads` fails for the same file.)

The checks below cover the assertions no stage module probes: the refusals stage 3 shows (with the
course's error types), a contract the Orbax lesson can store, and the fault table.
"""

import json
import os

import shardlab.checker.stage3 as stage3
from shardlab import orbax_io
from shardlab.checker.common import changed_inputs, expect, fingerprint, see
from shardlab.checker.formulas import mark
from shardlab.checker.properties import new_result_each_call
from shardlab.core.config import Config
from shardlab.core.fixtures import Dataset
from shardlab.errors import (
    CheckpointExistsError,
    ContractMismatchError,
    CorruptCheckpointError,
)
from shardlab.verify import faults

ALL = "every check of its stage"  # a `check` cell asserts that check_here(stage) passed

# notebook -> (its cell tags, space-separated) -> the checks covering what those cells assert about the learner's code
CELLS = {
    "stage1_batches": {
        "initial initial-checks": ("initial_state_fields", "first_order_follows_the_seed"),
        "fields-moved": ("next_batch_returns_a_new_state", "next_batch_leaves_step_alone"),
        "walk": (
            "next_batch_returns_a_new_state",
            "next_batch_leaves_step_alone",
            "batch_lengths_keep_the_remainder",
            "every_epoch_covers_every_id_once",
            "epochs_follow_the_course_order",
            "key_changes_at_each_new_epoch",
            "padding_is_never_an_observation",
        ),
        "placement": ("padding_is_never_an_observation", "batch_is_placed_on_the_mesh"),
        "mask-by-position": (
            "padding_is_never_an_observation",
            "padding_is_decided_by_position",
            "batch_is_placed_on_the_mesh",
        ),
        "other-settings": (
            "batch_lengths_keep_the_remainder",
            "every_epoch_covers_every_id_once",
            "sampler_fields_follow_the_arithmetic",
            "padding_is_never_an_observation",
            "replay_is_deterministic",
        ),
        "transfer": ("padding_is_decided_by_position", "batch_lengths_keep_the_remainder"),
        "check": (ALL,),
    },
    "stage2_update": {
        "batch": ("initial_state_fields", "next_batch_returns_a_new_state", "batch_is_placed_on_the_mesh"),
        "gradient": (
            "gradient_on_a_full_batch",
            "loss_on_full_and_tail_batches",
            "consecutive_updates",
        ),
        "shard-map": ("padding_is_never_an_observation", "batch_is_placed_on_the_mesh"),
        "updates": (
            "consecutive_updates",
            "loss_is_taken_before_the_update",
            "transition_is_one_batch_and_one_update",
            "replicas_agree",
        ),
        "singleton": ("gradient_on_tail_batches", "empty_device_contributes_zeros"),
        "stablehlo": ("step_is_sharded", "loss_on_full_and_tail_batches"),
        "check": (ALL,),
    },
    "stage3a_checkpoint": {
        "derived": ("contract_pins_the_experiment", "contract_is_json_data", "gradient_on_a_full_batch"),
        "train": ("transition_is_one_batch_and_one_update", "random_transition_walk"),
        "rebuild": ("initial_state_fields", "next_batch_returns_a_new_state", "random_sampler_walk"),
        "control": ("transition_is_one_batch_and_one_update", "resume_continues_the_same_run"),
        "npz-members": ("initial_state_fields", "transition_is_one_batch_and_one_update"),
        "save": ("contract_is_json_data", "checkpoint_holds_every_field"),
        "rejections": ("refusals_name_the_course_errors",),
        "fault-in-view": ("restore_returns_every_field", "faults_show_where_arithmetic_predicts"),
        "faults": ("faults_show_where_arithmetic_predicts",),
    },
    "stage3b_resume": {
        "restore": ("restore_returns_every_field",),
        "refusal refusal-check": ("refusals_name_the_course_errors",),
        "resume recovery recovery-checks recovery-asserts": ("resume_continues_the_same_run", "fresh_process_resume"),
        "orbax orbax-checks": ("contract_is_json_data", "restore_returns_every_field"),
        "check": (ALL,),
    },
    "stage4a_profile": {
        "compile": (
            "compiled_step_lowers_and_compiles",
            "eager_step_is_the_unjitted_mapped_body",
            "eager_step_matches_numpy",
        ),
        "all-reduces": ("compiled_step_lowers_and_compiles", "step_is_sharded"),
        "capture gate capture_change": ("transition_is_one_batch_and_one_update", "replay_is_deterministic"),
    },
    "stage3c_orbax_lesson": {
        "setup": ("contract_pins_the_experiment", "contract_is_json_data", "gradient_on_a_full_batch"),
        "first-step": ("consecutive_updates", "random_transition_walk"),
        "save-restore": ("contract_is_json_data", "restore_returns_every_field"),
        "replay replay-checks": ("resume_continues_the_same_run", "replicas_agree", "random_transition_walk"),
        "receipt-faults": ("consecutive_updates", "random_step_update"),
        "receipt-fault-checks": (
            "consecutive_updates",
            "random_step_update",
            "key_changes_at_each_new_epoch",
            "random_sampler_walk",
        ),
        "compare compare-checks": (
            "random_sampler_walk",
            "random_transition_walk",
            "loss_is_taken_before_the_update",
            "restore_returns_every_field",
        ),
    },
}
COVERAGE = {
    (notebook, tag): checks
    for notebook, cells in CELLS.items()
    for tags, checks in cells.items()
    for tag in tags.split()
}


def stages() -> dict:
    """Check name -> its stage, for every check the checker runs (each stage module's, then this module's)."""
    import shardlab.checker.stage1 as stage1
    import shardlab.checker.stage2 as stage2
    import shardlab.checker.stage4 as stage4

    modules = (stage1, stage2, stage3, stage4)
    found = {c.__name__: m.STAGE for m in modules for c in m.CHECKS}
    return {**found, **{c.__name__: stage for stage, checks in CHECKS.items() for c in checks}}


def covering(notebook: str, tags) -> list[tuple[str, int]]:
    """(check, stage) for each check covering the cell of `notebook` carrying one of `tags`; [] if none does."""
    names = [name for tag in tags for name in COVERAGE.get((notebook, tag), ())]
    if ALL in names:  # a `check` cell: stage N's checks ran inside it, its FAIL lines name the failing one
        return [(ALL, int(notebook[len("stage")]))]
    where = stages()
    return [(name, where[name]) for name in dict.fromkeys(names)]


def contract_is_json_data(ctx):
    """The contract is a dict of plain JSON data, so the Orbax copy can store it beside the state and compare it."""
    contract = ctx.impl.contract(ctx.data, stage3._config(ctx))
    try:
        orbax_io.as_json(contract, "the contract")
    except CorruptCheckpointError as exc:
        expect(
            False,
            "a dict with str keys of str, int, float, bool, None, lists and dicts",
            str(exc),
            "stage 3 saves your contract with Orbax too -> build it from plain Python values (int(...), float(...), "
            "str(...), lists), not NumPy scalars, arrays or objects",
        )
    new_result_each_call(ctx, "contract", ctx.data, stage3._config(ctx), rule="contract-json")
    return "plain JSON data", "plain JSON data"


def _refusals(ctx) -> list[tuple]:
    """(case, call, error, paths, the contract the call is given) for each refusal stage3a_checkpoint's rejection
    cells show."""
    path, state, contract = stage3._saved(ctx, "course-refusals")
    copies = stage3.damaged_copies(path, dict(faults.DAMAGE))
    features = ctx.data.features.copy()
    features[3, 2] += 1.0
    other_data = ctx.impl.contract(Dataset(features, ctx.data.targets.copy()), stage3._config(ctx))
    other_size = ctx.impl.contract(ctx.data, Config(seed=ctx.seed, batch_size=ctx.batch_size + 1))
    restore, save = ctx.impl.restore, ctx.impl.save
    return [
        (case, lambda copy=copy: restore(copy, contract, ctx.mesh), CorruptCheckpointError, copy, contract)
        for case, copy in copies.items()
    ] + [
        ("different data", lambda: restore(path, other_data, ctx.mesh), ContractMismatchError, path, other_data),
        ("different batch size", lambda: restore(path, other_size, ctx.mesh), ContractMismatchError, path, other_size),
        ("existing checkpoint path", lambda: save(path, state, contract), CheckpointExistsError, path, contract),
    ]


def _refusal_fault(case: str, call, error: type, path: str) -> tuple[str, str] | None:
    """None if `call` raised `error` and left the disk as it was; else (what went wrong: 'accepted', 'type' or
    'disk', what was observed)."""
    try:
        faults.refused(call, error, path)
    except NotImplementedError:
        raise
    except AssertionError as exc:  # from `refused`: the call succeeded, or it changed files
        return ("accepted" if "succeeded" in str(exc) else "disk"), f"{type(exc).__name__}: {str(exc)[:160]}"
    except Exception as exc:  # another error type than the course's
        return "type", f"{type(exc).__name__} (not {error.__name__}): {str(exc)[:120]}"
    return None


def _differs_from(held: dict, own: dict) -> list[str]:
    """The entries in which the contract a check holds differs from one the contract function computes afresh."""
    return [
        f"contract[{key!r}] " + ("now absent" if key not in held else "added" if key not in own else "changed")
        for key in sorted(set(held) | set(own), key=str)
        if held.get(key) != own.get(key) or (key in held) != (key in own)
    ]


def _broken(cases: list, wanted: dict) -> list[str]:
    """The rules whose refusals these cases were (by the error each must raise): another experiment's file is
    rule:contract-first's, a taken path rule:never-overwrite's, a non-finite field rule:refuse-nan's, any other
    damaged file rule:validate-fields'."""
    found = []
    for case in cases:
        error = wanted.get(case)
        rule = (
            "contract-first"
            if error is ContractMismatchError
            else "never-overwrite"
            if error is CheckpointExistsError
            else "refuse-nan"
            if "finite" in case or "nan" in case.lower()
            else "validate-fields"
        )
        found += [rule] if rule not in found else []
    return found


def _accepting(cases: list, wanted: dict) -> str:
    """Which function accepted these cases: save refuses a taken path, restore every other case."""
    functions = sorted({"save" if wanted.get(c) is CheckpointExistsError else "restore" for c in cases})
    return " and ".join(functions)


def refusals_name_the_course_errors(ctx):
    """Each refusal the stage 3 notebook shows raises the course's error type and leaves every file as it was."""
    own = json.loads(json.dumps(ctx.impl.contract(ctx.data, stage3._config(ctx))))
    wrong, kinds, altered, stale, wanted = {}, {}, [], [], {}
    for case, call, error, path, given in _refusals(ctx):
        wanted[case] = error
        before = fingerprint(given)
        found = _refusal_fault(case, call, error, path)
        changed = changed_inputs([before], [fingerprint(given)], ["contract"])
        function = "save" if error is CheckpointExistsError else "restore"
        altered += [(function, c) for c in changed if (function, c) not in altered]
        if not changed and error is not ContractMismatchError:  # given is this experiment's own contract
            earlier = _differs_from(json.loads(json.dumps(given)), own)  # changed by the save or restore before
            stale += [c for c in earlier if c not in stale]
            changed = earlier
        if found is None:
            continue
        kind, wrong[case] = found
        if changed:  # restore judged the file against a contract it had changed itself: its refusal says nothing
            kind = "changed contract"
        elif kind == "accepted" and error is ContractMismatchError and json.loads(json.dumps(given)) == own:
            kind = "same contract"
        kinds.setdefault(kind, []).append(case)
    causes = {  # each cause is named only for the cases whose outcome shows it
        "changed contract": lambda cases: (
            f"{cases}: "
            + "".join(f"{f} changed the contract it was given ({c}); " for f, c in altered[:3])
            + (
                f"the contract the checks hold was changed by the save or restore before ({'; '.join(stale[:3])}); "
                if stale
                else ""
            )
            + "so the file was compared with a contract the functions had altered themselves -> save and restore "
            "read the contract they are given and never change it (no pop, del or assignment into it; copy it "
            "first if you need another form)" + mark(*dict.fromkeys(f"{f}-inputs-intact" for f, _ in altered))
        ),
        "accepted": lambda cases: (
            f"{_accepting(cases, wanted)} accepted {cases}: the refusal itself is missing, not its error type -> "
            "check the contract first, then every field (shapes, dtypes, finite values, a permutation, 0 <= cursor <= "
            "rows), and raise on the first that fails" + mark(*_broken(cases, wanted))
        ),
        "same contract": lambda cases: (
            f"{cases}: the contract function gives that experiment the same contract as "
            "this one, so restore had nothing to refuse -> the contract must change with every byte of the data and "
            "every setting" + mark("contract-pins")
        ),
        "type": lambda cases: (
            f"{cases} refused with another error type -> raise errors.CorruptCheckpointError for "
            "a damaged file, errors.ContractMismatchError for another experiment and errors.CheckpointExistsError for "
            "a taken path" + mark(*_broken(cases, wanted))
        ),
        "disk": lambda cases: (
            f"{cases} refused, but files changed on disk -> refuse before creating or writing any "
            "file, and remove a temporary file on every error" + mark("new-temp-name", "never-overwrite")
        ),
    }
    return expect(
        not wrong,
        "CorruptCheckpointError for damaged files, ContractMismatchError for another experiment, "
        "CheckpointExistsError for an existing path, nothing on disk changed",
        wrong,
        "stage3a_checkpoint shows these refusals: " + "; ".join(causes[k](v) for k, v in kinds.items()),
    )


def fault_problems(rows: list[dict], setup: dict, num_rows: int) -> list[str]:
    """What stage3a_checkpoint's faults cell would refuse in a fault table: visibility and its step."""
    problems = []
    for r in rows:
        seen, at = r["first_divergence_step"], setup[r["fixture"]]
        if r["fault"] == "none":
            if r["max_weight_error"] != 0.0 or r["ids_changed"] or seen is not None:
                problems.append(f"{r['fixture']}: a complete restore differs from the control ({r})")
            continue
        rest = -(-(num_rows - at["cursor"]) // r["batch_size"])  # batches left in the saved epoch
        expected = at["save_step"] + (rest + 1 if r["fault"] == "key" else 1)
        if r["max_weight_error"] <= 0 or r["ids_changed"] != (r["fault"] != "momentum") or seen != expected:
            problems.append(f"{r['fixture']}, fault {r['fault']}: first divergence {seen}, arithmetic says {expected}")
        if r["fault"] == "key" and not at["key_fault_first_step_matches"]:
            problems.append(f"{r['fixture']}: the key fault showed at the very next step")
    return problems


def faults_show_where_arithmetic_predicts(ctx):
    """Each one-field fault after a restore shows, at the step coverage arithmetic predicts (the notebook's table)."""
    folder = os.path.join(ctx.workdir, "course-faults")
    os.makedirs(folder)
    rows, setup = faults.fault_table(ctx.impl, ctx.data, ctx.mesh, folder)
    problems = fault_problems(rows, setup, ctx.data.features.shape[0])
    return expect(
        not problems,
        "every fault visible, first at the step arithmetic predicts",
        problems,
        "a restored state whose one field is reset must diverge where the sampler arithmetic says; a complete "
        "restore must not diverge at all"
        + see(ctx, "restore_returns_every_field", "resume_continues_the_same_run", "epochs_follow_the_course_order"),
    )


CHECKS = {
    3: (contract_is_json_data, refusals_name_the_course_errors, faults_show_where_arithmetic_predicts),
}
