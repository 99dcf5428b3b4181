"""A diagnosis names the function whose output is wrong, judged on the inputs each function received.

Each planted file (tests/broken/, tests/ranked/) gets one function wrong; a later function, right on what it is
given, then receives a wrong input (a stale state from initial, a batch whose mask counts padding, a contract that
merges two experiments). What is wrong, and what is right, is established here with NumPy and the course's own
functions, independently of the checker; the diagnosis must name the function at fault, and must not name a cause
those facts rule out. A diagnosis points at another check only when that check failed in the same run.
The function at fault is told by the rules the diagnosis marks (learner/rules.py ids), the failure's rules line,
and by at most one key phrase of the diagnosis where no rule tells it.
"""

import json
import os
import tempfile
import types
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np
import pytest

from shardlab.checker import cli as runner
from shardlab.checker import search
from shardlab.checker.common import Context, batch_arrays
from shardlab.checker.domain import Case, data_for
from shardlab.checker.guard import BoundedImplementation, Guard
from shardlab.core.config import Config
from shardlab.core.devices import make_mesh
from shardlab.core.fixtures import Dataset, teaching_fixture
from shardlab.learner import implementation, reference

HERE = Path(__file__).parent


def _run(spec: str, stage: int, keep, only: bool = True) -> dict:
    """Name -> result of the checks `keep` of `stage` (and of the earlier stages with only=False), one run."""
    stages = [stage] if only else [s for s in runner.STAGES if s <= stage]
    skip = [c.__name__ for s in stages for c in runner.checks_of(s) if c.__name__ not in keep]
    return {r.name: r for r in runner.run_checks(str(HERE / spec), stage, only=only, skip=skip)}


def _planted(spec: str):
    """(the planted file `spec`, loaded; the teaching fixture; a four-device mesh)."""
    return implementation.load(str(HERE / spec)), teaching_fixture(), make_mesh(4)


def _contract(data) -> dict:
    """The course's contract of `data` for seed 17 and batch size 7."""
    return reference.contract(data, Config(seed=17, batch_size=7))


def _rules(why: str) -> list[str]:
    """The rules a search's diagnosis marks: what the failure's rules line lists."""
    return runner.marked_rules(why)[1]


def _misses(spec: str, cases) -> list:
    """The search's verdicts on `cases` ((property, Case) pairs), in order, on one loaded copy of `spec` in this
    interpreter: what one function keeps between calls carries from case to case, as it does in a check run."""
    impl = BoundedImplementation(implementation.load(str(HERE / spec)), implementation.API, Guard())
    found = []
    with tempfile.TemporaryDirectory(prefix="diagnosis-inputs-") as workdir:
        ctx = Context(types.SimpleNamespace(), str(HERE / spec), teaching_fixture(), make_mesh(4), workdir)
        ctx.impl = impl
        for name, case in cases:
            found.append(search._attempt(ctx, search.PROPERTIES[name], case))
    return found


def test_a_stale_initial_state_is_blamed_on_initial_not_on_the_step_or_the_cursor():
    spec = "broken/initial_cached_by_seed.py"
    module = implementation.load(str(HERE / spec))
    wide, narrow = Case(rows=3, features=4, seed=0, devices=1), Case(rows=1, features=1, seed=0, devices=1)
    module.initial(0, data_for(wide), make_mesh(1))
    stale = module.initial(0, data_for(narrow), make_mesh(1))
    assert np.shape(stale["weights"]) == (4,) != (1,)  # the planted fault: the earlier data's width comes back
    assert np.shape(reference.initial(0, data_for(narrow), make_mesh(1))["weights"]) == (1,)

    first, walk, damage = _misses(
        spec,
        [("transition_walk", wide), ("transition_walk", narrow), ("restore_damage", replace(narrow, save_at="start"))],
    )
    assert first is None  # the first state made for a seed is right
    for miss in (walk, damage):
        assert miss is not None and _rules(miss.why) == ["initial-fields"], miss.why  # not the step's, nor the cursor's
        assert "the state initial returned" in miss.why, miss.why


def test_a_reshuffle_kept_under_the_key_is_told_by_the_same_seed_on_another_row_count():
    """reshuffle_cached_by_key keeps each new epoch's order under the saved key alone: a run of the same seed on
    data of another row count gets the order drawn for the first run's rows. The walk's run of the same seed on 23
    rows must start its second epoch with the recipe's order for 23 rows (JAX's split and permutation here)."""
    spec = "broken/reshuffle_cached_by_key.py"
    module, mesh = implementation.load(str(HERE / spec)), make_mesh(1)
    for rows in (3, 23):  # the planted fault: two epochs of one batch each, seed 0
        data = data_for(Case(rows=rows, features=1))
        state, _ = module.next_batch(module.initial(0, data, mesh), data, rows, mesh)
        second = np.asarray(module.next_batch(state, data, rows, mesh)[1].ids)
    kept, _ = jax.random.split(jax.random.PRNGKey(0))
    want = np.asarray(jax.random.permutation(jax.random.split(kept)[1], 23))
    assert second.size == 3 and want.size == 23  # the 23-row run was handed the 3-row run's order

    (miss,) = _misses(spec, [("sampler_walk", Case(rows=3, batch=1, devices=1, features=1, seed=0, epochs=2))])
    assert miss is not None and _rules(miss.why)[0] == "reshuffle", miss.why
    assert "a reshuffle cached under the saved key" in miss.why, miss.why
    assert list(miss.observed) != want.tolist() and str(want.tolist()) in str(miss.expected)


@pytest.mark.slow  # a planted file whose check takes over a second of CPU: make test's, not the inner loop's
def test_a_batch_that_counts_padding_is_blamed_on_next_batch_not_on_the_step():
    spec = "ranked/mask_kept_between_batches.py"
    module = implementation.load(str(HERE / spec))
    assert module.make_step is reference.make_step  # the step is the course's own: it cannot be at fault
    data, mesh = teaching_fixture(), make_mesh(4)
    state = module.initial(3, data, mesh)
    _, three = module.next_batch(state, data, 3, mesh)  # 3 rows in 4 slots
    _, two = module.next_batch(state, data, 2, mesh)  # 2 rows in the same 4 slots
    expected = batch_arrays(data, two.ids, 4)[2]
    assert len(three.mask) == len(two.mask) == 4
    assert np.asarray(two.mask).tolist() != expected.tolist()  # the planted fault, against the course's padding

    # stage 1's enumerated probes leave stale masks in the buffers, as a cumulative check run does
    earlier = {c.__name__ for c in runner.checks_of(1) if not c.__name__.startswith("random_")}
    results = _run(spec, 2, earlier | {"transition_is_one_batch_and_one_update"}, only=False)
    padding = results["padding_is_never_an_observation"]
    failed = results["transition_is_one_batch_and_one_update"]
    assert not failed.passed and failed.rules == ("pad-by-position",), failed  # next_batch's rule, not the step's
    text = failed.diagnosis
    assert "the batch next_batch gave is already wrong" in text, text
    assert ("see padding_is_never_an_observation" in text) == (not padding.passed), text


def test_the_search_blames_next_batch_not_transition_for_a_batch_that_counts_padding():
    """3 rows on 4 devices leave mask [1, 1, 1, 0] in the buffer; a 2-row case of the same width then keeps it."""
    spec = "ranked/mask_kept_between_batches.py"
    three, two = (Case(rows=n, batch=n, devices=4, features=1, seed=5) for n in (3, 2))
    first, second = _misses(spec, [("transition_walk", three), ("transition_walk", two)])
    assert first is None  # every batch of the first case is right: a fresh buffer, then the same 3 rows
    assert second is not None and _rules(second.why) == ["pad-by-position"], second.why  # not transition's
    assert "the batch next_batch gives for this state is already wrong" in second.why, second.why


@pytest.mark.slow  # a fresh-interpreter resume
def test_a_resume_that_restored_every_field_is_not_blamed_on_restore():
    """Stage 1's probes leave a longer mask in a padded buffer; the uninterrupted run in this interpreter reuses it
    at a remainder, the fresh interpreter starts without it: the runs differ after an exact restore."""
    spec = "ranked/mask_kept_between_batches.py"
    earlier = {c.__name__ for c in runner.checks_of(1) if not c.__name__.startswith("random_")}
    results = _run(spec, 3, earlier | {"restore_returns_every_field", "fresh_process_resume"}, only=False)
    assert not results["padding_is_never_an_observation"].passed
    assert results["restore_returns_every_field"].passed  # every field comes back exactly
    fresh = results["fresh_process_resume"]
    assert not fresh.passed
    assert "restore is not at fault" in fresh.diagnosis, fresh.diagnosis


def _contract_equal_for_other_data(module) -> bool:
    data = teaching_fixture()
    features = data.features.copy()
    features[3, 2] -= 1.0
    config = Config(seed=17, batch_size=7)
    return module.contract(Dataset(features, data.targets), config) == module.contract(data, config)


def test_a_contract_that_merges_experiments_is_blamed_on_contract_not_on_restore():
    spec = "broken/contract_hashes_every_eighth_row.py"
    module = implementation.load(str(HERE / spec))
    assert _contract_equal_for_other_data(module) and not _contract_equal_for_other_data(reference)
    assert module.restore is reference.restore  # restore compares as the course does
    results = _run(spec, 3, {"restore_refuses_another_experiment", "refusals_name_the_course_errors"})
    for name in ("restore_refuses_another_experiment", "refusals_name_the_course_errors"):
        found = results[name]  # the contract's rule, not restore's comparison (contract-first) nor its refusals
        assert not found.passed and found.rules == ("contract-pins",), (name, found.rules, found.diagnosis)


def test_refusals_name_only_the_fault_each_refusal_shows():
    """restore_skips_validation accepts damaged files: the refusal is missing, its type and the disk are fine."""
    spec = "broken/restore_skips_validation.py"
    module = implementation.load(str(HERE / spec))
    with tempfile.TemporaryDirectory() as folder:
        data, mesh = teaching_fixture(), make_mesh(4)
        state = reference.initial(17, data, mesh)
        contract = _contract(data)
        path = reference.save(os.path.join(folder, "c.npz"), state, contract)
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        arrays["cursor"] = np.asarray(-1, arrays["cursor"].dtype)
        with open(os.path.join(folder, "d.npz"), "xb") as handle:
            np.savez(handle, **arrays)
        module.restore(os.path.join(folder, "d.npz"), contract, mesh)  # accepted: no exception at all
    assert not _contract_equal_for_other_data(module)  # the contract tells the experiments apart
    results = _run(spec, 3, {"refusals_name_the_course_errors"})
    found = results["refusals_name_the_course_errors"]
    text, observed = found.diagnosis, found.observed
    accepted = [case for case, what in observed.items() if what.endswith("but the call succeeded")]
    other_type = [case for case, what in observed.items() if " (not " in what]
    assert "cursor out of range" in accepted  # as seen above
    assert f"restore accepted {accepted}" in text, text
    assert ("another error type" in text) == bool(other_type), text
    assert found.rules[0] == "validate-fields" and "contract-pins" not in found.rules, found.rules  # not the contract


def test_a_failed_uninterrupted_save_names_what_the_file_holds():
    """The file save wrote is read here (NumPy, JSON): it holds every field, and a contract with one key added, the
    key save also added to its caller's dict. Both checks name that change of the caller's contract, never a field."""
    spec = "broken/save_stamps_the_contract.py"
    module, data, mesh = _planted(spec)
    contract = _contract(data)
    with tempfile.TemporaryDirectory() as folder:
        path = module.save(os.path.join(folder, "c.npz"), reference.initial(17, data, mesh), dict(contract))
        with np.load(path, allow_pickle=False) as npz:
            held = json.loads(str(npz["contract"][()]))
    assert set(held) - set(contract) == {"saved_at_step"}
    given = dict(contract)
    with tempfile.TemporaryDirectory() as folder:
        module.save(os.path.join(folder, "c.npz"), reference.initial(17, data, mesh), given)
    assert set(given) - set(contract) == {"saved_at_step"}  # the caller's dict changed too
    checks = {"checkpoint_holds_every_field", "interrupted_save_leaves_nothing_or_a_checkpoint"}
    results = _run(spec, 3, checks)
    holds = results["checkpoint_holds_every_field"]
    assert not holds.passed and holds.rules == ("save-inputs-intact",), (holds.rules, holds.diagnosis)  # no field
    assert "contract['saved_at_step']" in holds.diagnosis, holds.diagnosis
    interrupted = results["interrupted_save_leaves_nothing_or_a_checkpoint"]
    assert interrupted.rules[0] == "save-inputs-intact", interrupted.rules
    assert "['saved_at_step']" in interrupted.diagnosis, interrupted.diagnosis
    assert "checkpoint_holds_every_field" not in interrupted.diagnosis  # no pointer: the change is named here too


@pytest.mark.parametrize("with_pointer", [True, False])
def test_a_pointer_names_a_check_only_when_it_failed_in_the_same_run(with_pointer):
    """restore_resets_cursor: the file holds every field (restore is at fault); restore_returns_every_field is
    pointed at when it ran and failed, and never when it did not run."""
    spec = "broken/restore_resets_cursor.py"
    checks = {"interrupted_save_leaves_nothing_or_a_checkpoint"} | (
        {"restore_returns_every_field"} if with_pointer else set()
    )
    results = _run(spec, 3, checks)
    interrupted = results["interrupted_save_leaves_nothing_or_a_checkpoint"]
    text = interrupted.diagnosis
    assert interrupted.rules == ("exact-resume",) and "the fault is restore's" in text, text  # save is ruled out
    if with_pointer:
        assert not results["restore_returns_every_field"].passed
    assert ("see restore_returns_every_field" in text) == with_pointer, text


def test_a_restore_that_answers_a_path_from_memory_is_told_from_a_wrong_comparison():
    spec = "broken/restore_cached_by_path.py"
    module, data, mesh = _planted(spec)
    contract = _contract(data)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "c.npz")
        first = reference.initial(17, data, mesh)
        reference.save(path, first, contract)
        module.restore(path, contract, mesh)
        os.remove(path)
        later, _, _ = reference.transition(first, data, 7, reference.make_step(mesh), mesh)  # one step on
        reference.save(path, later, contract)
        assert int(module.restore(path, contract, mesh)["step"]) == 0  # the planted fault: the old state
        assert int(reference.restore(path, contract, mesh)["step"]) == 1
    miss = _misses(spec, [("restore_damage", Case(rows=1, batch=1, devices=1, features=1, seed=0))])[0]
    assert miss is not None and "no cache by path" in miss.why, miss


def test_a_state_no_course_run_reaches_is_blamed_on_the_sampler_not_on_restore():
    """The cursor moved by the batch size is past the rows after a remainder, a state the course's arithmetic never
    gives; the restore search says so before it judges restore (the course's own, here)."""
    spec = "ranked/transition_cursor_by_batch_size.py"
    module = implementation.load(str(HERE / spec))
    case = Case(rows=3, batch=2, devices=1, features=1, seed=0, save_at="mid")
    data, mesh = data_for(case), make_mesh(1)
    state = module.initial(0, data, mesh)
    for _ in range(2):  # 2 ids, then the 1-id remainder
        state, _ = module.next_batch(state, data, 2, mesh)
    assert int(state["cursor"]) == 4 > 3  # past the rows: no run of the course holds it
    assert module.restore is reference.restore
    (miss,) = _misses(spec, [("restore_damage", case)])
    assert miss is not None and _rules(miss.why)[0] == "cursor", miss.why  # the sampler's arithmetic, not restore's
    assert "before save and restore ran" in miss.why, miss.why


def test_momentum_in_the_gradients_place_is_named_only_where_the_two_differ():
    """From zero momentum the new momentum is the gradient the step computed: a wrong gradient there is never
    called momentum in the gradient's place. From non-zero momentum v' = 0.8 v + g tells them apart."""
    from shardlab.checker import formulas

    rng = np.random.default_rng(4)
    right, wrong = rng.normal(size=3), 0.5 * rng.normal(size=3)
    zero, earlier = np.zeros(3), rng.normal(size=3)
    assert formulas.momentum_as_gradient(wrong, 0.8 * zero + wrong, right, zero) is None  # the factor-two kind
    swapped = 0.8 * earlier + right  # the step's new momentum, returned as its gradient
    assert "equals the new momentum" in formulas.momentum_as_gradient(swapped, swapped, right, earlier)
    assert formulas.momentum_as_gradient(wrong, 0.8 * earlier + wrong, right, earlier) is None  # a wrong gradient


def test_a_gradient_summed_twice_is_named_with_its_factor_not_as_local_means():
    """jax.grad inside shard_map already adds the replicated weights' gradient over 'data'; a psum of it adds it
    again: the device count times the right gradient on every batch, however the rows fall. The loss stays right."""

    spec = "broken/gradient_summed_twice.py"
    module, data, mesh = _planted(spec)
    state = reference.initial(3, data, mesh)
    weights = np.linspace(-0.5, 0.5, data.features.shape[1]).astype(np.float32)
    for size in (7, 5):  # 8 slots as [2, 2, 2, 1] rows, then [2, 2, 1, 0]: no local count or mean fits both
        state, batch = reference.next_batch(state, data, size, mesh)
        x, y = data.features[np.asarray(batch.ids)].astype(np.float64), data.targets[np.asarray(batch.ids)]
        residual = x @ weights - y
        _, _, loss, grad = module.make_step(mesh)(batch.features, batch.targets, batch.mask, weights, weights * 0)
        np.testing.assert_allclose(np.asarray(grad), 4 * 2 * x.T @ residual / size, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(float(loss), residual @ residual / size, rtol=1e-5)  # the loss is right

    # the one cause named on every batch, unequal rows or even: local means, a local count, counted padding and
    # momentum fit the even split only, and are not named
    for result in _run(
        spec, 2, {"gradient_on_a_full_batch", "gradient_on_tail_batches", "empty_device_contributes_zeros"}
    ).values():
        assert not result.passed and result.causes == ("summed-twice",), (result.causes, result.diagnosis)


def test_a_save_that_removes_a_live_savers_temporary_is_named_as_such():
    """The file's save removes every temporary in the folder, also one this (live) process is still writing;
    the course's save leaves it. The racing check then names the removal, not only the error it causes."""
    from shardlab.core import files

    spec = "broken/save_removes_live_temporaries.py"
    module, data, mesh = _planted(spec)
    state, contract = reference.initial(17, data, mesh), _contract(data)
    for save, kept in ((reference.save, True), (module.save, False)):
        with tempfile.TemporaryDirectory() as folder:
            fd, live = files.temporary(folder, ".npz")  # a temporary of a live writer: this process
            os.close(fd)
            save(os.path.join(folder, "c.npz"), state, contract)
            assert os.path.exists(live) == kept, save

    results = _run(spec, 3, {"racing_saves_never_overwrite", "save_errors_leave_the_folder_as_it_was"})
    assert results["save_errors_leave_the_folder_as_it_was"].passed  # it removes no file of its own refusals
    found = results["racing_saves_never_overwrite"]  # the temporary's rule, not the publish's (exclusive-publish)
    assert not found.passed and found.rules == ("new-temp-name",), (found.rules, found.diagnosis)
    assert "the rival's save removed ['.tmp-" in found.diagnosis, found.diagnosis


def test_a_contract_that_freezes_the_callers_arrays_is_named_not_the_transport():
    """contract sets the caller's arrays read-only (the course's leaves them writeable): the diagnosis says which
    input contract froze, and no check reports a value the checker cannot read."""
    spec = "broken/contract_freezes_the_data.py"
    module = implementation.load(str(HERE / spec))
    config = Config(seed=17, batch_size=7)
    for function, frozen in ((reference.contract, False), (module.contract, True)):
        data = teaching_fixture()
        function(data, config)
        assert [not a.flags.writeable for a in data] == [frozen, frozen], function

    checks = {"random_contract_tells_apart", "contracts_agree_in_a_fresh_process", "contract_is_json_data"}
    results = _run(spec, 3, checks)
    found = results["random_contract_tells_apart"]
    assert not found.passed
    assert all(f"data[{i}] made read-only" in found.diagnosis for i in (0, 1)), found.diagnosis
    for result in results.values():
        assert "not a value the checker reads" not in result.diagnosis, result
        assert "WRITEABLE" not in str(result.observed), result


def test_a_fault_table_on_a_stale_initial_state_names_initial_not_an_index():
    """initial_cached_by_seed returns, for a seed it has seen, the state of the earlier data: here 31 rows of
    8 features for the 23-row fixture. The fault table refuses that state and names initial; the course's
    initial, called the same way, gives a table."""
    from shardlab.core.config import FIXTURES
    from shardlab.core.fixtures import synthetic
    from shardlab.verify import faults

    module = implementation.load(str(HERE / "broken/initial_cached_by_seed.py"))
    data, other, mesh = teaching_fixture(), synthetic(31, 8, 0), make_mesh(4)
    for impl in (reference, module):
        for seed, _ in FIXTURES.values():
            impl.initial(seed, other, mesh)  # as an earlier cell would, with other data
    seed = next(iter(FIXTURES.values()))[0]
    assert np.shape(module.initial(seed, data, mesh)["order"]) == (31,) != (len(data.targets),)  # the planted fault

    with tempfile.TemporaryDirectory() as folder:
        rows, _ = faults.fault_table(reference, data, mesh, folder)
        assert len(rows) == 4 * len(FIXTURES)
    with tempfile.TemporaryDirectory() as folder:
        with pytest.raises(faults.StaleStateError) as refused:
            faults.fault_table(module, data, mesh, folder)
    text = str(refused.value)
    assert f"initial({seed}, data, mesh)" in text and "(31,)" in text, text


def test_refusals_after_restore_changed_its_contract_name_the_change_not_the_error_type():
    """restore_pops_the_contract removes schema_version from the dict it is given: the contract the checks hold
    is changed, so later refusals have the wrong type for that reason alone."""
    spec = "broken/restore_pops_the_contract.py"
    module, data, mesh = _planted(spec)
    with tempfile.TemporaryDirectory() as folder:
        path = reference.save(os.path.join(folder, "c.npz"), reference.initial(17, data, mesh), _contract(data))
        for restore, kept in ((reference.restore, True), (module.restore, False)):
            contract = _contract(data)
            restore(path, contract, mesh)
            assert ("schema_version" in contract) == kept, restore
    assert not _contract_equal_for_other_data(module)  # the contract function itself tells experiments apart

    found = _run(spec, 3, {"refusals_name_the_course_errors"})["refusals_name_the_course_errors"]
    assert not found.passed and found.rules == ("restore-inputs-intact",), (found.rules, found.diagnosis)
    assert "contract['schema_version']" in found.diagnosis, found.diagnosis


def test_stage_four_names_momentum_in_the_gradients_place_and_a_step_without_lower():
    """gradient_output_is_momentum wraps the course's jitted step in a Python function that returns the new
    momentum fourth: from non-zero momentum the two differ, and the wrapper has no .lower()."""

    spec = "broken/gradient_output_is_momentum.py"
    module, data, mesh = _planted(spec)
    state = reference.initial(3, data, mesh)
    _, batch = reference.next_batch(state, data, 8, mesh)
    width = data.features.shape[1]
    weights, momentum = np.full(width, 0.1, np.float32), np.full(width, 0.5, np.float32)
    x, y = data.features[np.asarray(batch.ids)].astype(np.float64), data.targets[np.asarray(batch.ids)]
    gradient = 2 * x.T @ (x @ weights - y) / len(y)
    step = module.make_step(mesh)
    _, new_momentum, _, fourth = step(batch.features, batch.targets, batch.mask, weights, momentum)
    np.testing.assert_array_equal(np.asarray(fourth), np.asarray(new_momentum))
    assert not np.allclose(np.asarray(fourth), gradient, rtol=1e-3)  # the planted fault: momentum, not gradient
    assert hasattr(reference.make_step(mesh), "lower") and not hasattr(step, "lower")

    results = _run(spec, 4, {"compiled_step_lowers_and_compiles", "eager_step_matches_numpy"})
    for result in results.values():
        assert not result.passed and result.causes == ("momentum-as-gradient",), (result.causes, result.diagnosis)
        assert "the implementation raised" not in result.diagnosis, result.diagnosis
    assert "sharded-step" in results["compiled_step_lowers_and_compiles"].rules  # the wrapper has no .lower()


def test_a_squeezed_gradient_is_named_as_a_shape_mistake_not_as_a_factor():
    """With one feature the planted step's gradient is a 0-d scalar of the right value: only its shape is wrong."""
    spec = "broken/gradient_squeezed.py"
    module = implementation.load(str(HERE / spec))
    mesh, data = make_mesh(1), data_for(Case(rows=1, features=1))
    x, y = data.features.astype(np.float64), data.targets.astype(np.float64)
    host = (data.features, data.targets, np.ones(1, np.float32), np.zeros(1, np.float32), np.zeros(1, np.float32))
    _, _, _, grad = module.make_step(mesh)(*host)
    assert np.shape(grad) == () and np.shape(host[3]) == (1,)  # the fault: the weights' axis is gone
    np.testing.assert_allclose(float(grad), (2 * x.T @ (x @ [0.0] - y))[0], rtol=1e-5)  # the value is right

    result = _run(spec, 2, {"random_step_update"})["random_step_update"]
    assert not result.passed
    assert "grad of shape ()" in result.diagnosis and "features=1" in result.diagnosis, result.diagnosis
    assert "constant factor" not in result.diagnosis, result.diagnosis  # the value is right: no factor


@pytest.mark.slow  # a planted file whose check takes over a second of CPU: make test's, not the inner loop's
def test_a_contract_that_hashes_the_buffer_is_named_with_the_data_not_in_c_order():
    """The planted contract raises on valid float32 data that is not C-contiguous and works on a C-ordered copy."""
    spec = "broken/contract_hashes_the_buffer.py"
    module = implementation.load(str(HERE / spec))
    data, config = teaching_fixture(), Config()
    view = Dataset(data.features[:, :-1], data.targets)
    assert not view.features.flags.c_contiguous
    module.contract(Dataset(np.ascontiguousarray(view.features), view.targets), config)  # the same values: fine
    with pytest.raises((ValueError, BufferError)):
        module.contract(view, config)  # the fault: the layout alone makes it raise
    reference.contract(view, config)  # the course's contract takes any layout

    result = _run(spec, 3, {"random_contract_tells_apart"})["random_contract_tells_apart"]
    assert not result.passed
    assert "not C-contiguous" in result.diagnosis, result.diagnosis
    # every case gives the same data in other memory layouts too: the input it raised on is named as such, on the
    # smallest case whose arrays are not C-contiguous
    assert "on the input 'with the same values in other memory layouts" in result.diagnosis, result.diagnosis
    shown = result.expected["minimal case"]
    assert (shown["rows"], shown["features"]) == (2, 1), shown


def test_a_save_that_moves_into_the_folder_is_named_as_such_not_as_a_suffix():
    """The planted save writes the right file but returns its bare name and leaves its caller in another folder."""
    spec = "broken/save_moves_into_the_folder.py"
    (module, data, mesh), here = _planted(spec), os.getcwd()
    state = reference.initial(17, data, mesh)
    with tempfile.TemporaryDirectory() as folder:
        os.makedirs(os.path.join(folder, "run"))
        path = os.path.join(folder, "run", "checkpoint.npz")
        try:
            returned = module.save(path, state, reference.contract(data, Config()))
            moved = os.getcwd()
        finally:
            os.chdir(here)
        assert os.path.exists(path) and returned == "checkpoint.npz"  # the file is right, the returned name is not
        assert moved == os.path.realpath(os.path.join(folder, "run")) != here  # and the caller was moved

    result = _run(spec, 3, {"random_restore_damage"})["random_restore_damage"]
    assert not result.passed
    assert result.rules == ("exact-path",) and "os.chdir" in result.diagnosis, (result.rules, result.diagnosis)
    assert "'checkpoint.npz'" in result.diagnosis and "np.savez appends" not in result.diagnosis  # it has its suffix


@pytest.mark.slow  # a save, its probes and the checker's worker: seconds of CPU, make test's, not the inner loop's
def test_a_save_that_expands_home_writes_in_the_scratch_home_and_is_named_as_such(tmp_path, monkeypatch):
    """`save("~/runs/x")` must write at that relative path; the planted save expands '~'. The checker's worker runs
    with a HOME inside the run's scratch folder, so the planted file never writes into the real home.

    The checker's own home here is a new folder of this test's, not the user's: a kernel, JupyterLab or matplotlib that
    another test starts meanwhile makes its folders (.ipython, .cache, ...) in the user's home the first time one runs
    on a machine, so only a home no other process knows can show that the run wrote nothing there."""
    spec = "broken/save_expands_home.py"
    (module, data, mesh), here = _planted(spec), os.getcwd()
    state = reference.initial(17, data, mesh)
    real_home = str(tmp_path / "the-users-home")
    os.mkdir(real_home)
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as home:
        os.makedirs(os.path.join(folder, "~", "runs"))
        monkeypatch.setenv("HOME", home)
        try:
            os.chdir(folder)
            returned = module.save(os.path.join("~", "runs", "c.npz"), state, reference.contract(data, Config()))
        finally:
            os.chdir(here)
            monkeypatch.setenv("HOME", real_home)
        assert not os.path.exists(os.path.join(folder, "~", "runs", "c.npz"))  # the fault: not at the path given
        assert os.path.exists(os.path.join(home, "runs", "c.npz")) and returned.startswith(home)

    result = _run(spec, 3, {"random_restore_damage"})["random_restore_damage"]
    assert not result.passed
    assert result.rules == ("exact-path",) and "expanded '~'" in result.diagnosis, (result.rules, result.diagnosis)
    assert "np.savez appends" not in result.diagnosis
    assert os.listdir(real_home) == []  # nothing written into the real home


@pytest.mark.slow  # a step compiled for each of two meshes and judged: make test's, not the inner loop's
def test_a_step_cached_by_mesh_shape_is_named_as_a_step_of_another_mesh():
    """Two one-device meshes hold other devices; the planted make_step gives the second the first one's step."""
    spec = "broken/step_cached_by_device_count.py"
    module = implementation.load(str(HERE / spec))
    import jax
    from jax.sharding import Mesh

    first, second = (Mesh(np.array([jax.devices()[i]]), ("data",)) for i in (3, 0))
    assert module.make_step(first) is module.make_step(second)  # the fault: one step for two meshes
    assert reference.make_step(first) is not reference.make_step(second)

    result = _run(spec, 3, {"random_restore_damage"})["random_restore_damage"]
    assert not result.passed
    assert result.rules == ("any-mesh",) and "a cache keyed by mesh.shape" in result.diagnosis, result.diagnosis
    assert "a mesh of its own making" not in result.diagnosis  # the checker placed the inputs: ruled out


def test_a_learning_rate_kept_in_half_precision_is_judged_as_an_update_not_as_the_implementation_raising():
    """The gradient each update takes is right for the weights it is given; only the step's size is off, so the
    four-update check names the update (a fitted learning rate), never an exception of its own making."""
    rounded = float(np.float16(0.03))
    assert abs(rounded - 0.03) / 0.03 > 1e-5 > abs(float(np.float32(0.03)) - 0.03) / 0.03  # far above float32's
    result = _run("broken/learning_rate_through_float16.py", 2, {"consecutive_updates"})["consecutive_updates"]
    assert not result.passed
    assert result.rules == ("momentum",) and "TypeError" not in result.observed, (result.rules, result.diagnosis)
    assert "w <- w - 0.02999" in result.diagnosis, result.diagnosis  # the fitted learning rate, told from 0.03


def test_predictions_in_bfloat16_are_named_as_reduced_precision_not_as_a_constant_factor():
    """bfloat16 predictions leave loss and gradient about 1e-3 relative from NumPy's, with no constant factor: the
    diagnosis names reduced precision (measured here against a float64 NumPy gradient), never a formula's factor."""
    spec = "ranked/predictions_in_bfloat16.py"
    module, data, mesh = _planted(spec)
    state = reference.initial(3, data, mesh)
    weights = np.linspace(-0.5, 0.5, data.features.shape[1]).astype(np.float32)
    _, batch = reference.next_batch(state, data, 8, mesh)
    x, y = data.features[np.asarray(batch.ids)].astype(np.float64), data.targets[np.asarray(batch.ids)]
    right = 2 * x.T @ (x @ weights - y) / 8
    _, _, _, grad = module.make_step(mesh)(batch.features, batch.targets, batch.mask, weights, weights * 0)
    grad = np.asarray(grad, np.float64)
    relative = np.linalg.norm(grad - right) / np.linalg.norm(right)
    assert 1e-4 < relative < 1e-2  # the fault: far above float32's rounding, far below any formula's change
    assert abs(grad @ right / (right @ right) - 1) < 1e-2  # no constant factor: its size is NumPy's
    assert not np.allclose(grad / (grad @ right / (right @ right)), right, rtol=1e-4)  # and no factor fits it
    reference_grad = reference.make_step(mesh)(batch.features, batch.targets, batch.mask, weights, weights * 0)[3]
    assert np.linalg.norm(np.asarray(reference_grad) - right) / np.linalg.norm(right) < 1e-5  # float32 is exact

    checks = {"gradient_on_a_full_batch", "empty_device_contributes_zeros", "gradient_independent_of_device_count"}
    results = _run(spec, 2, checks)
    for name in checks:  # reduced precision alone: neither a constant factor nor local means is named
        found = results[name]
        assert not found.passed and found.causes == ("reduced-precision",), (name, found.causes, found.diagnosis)
        assert found.rules == ("global-mean",), (name, found.rules)


def test_a_step_zero_checkpoint_refused_as_missing_is_named_as_a_truthiness_test_not_as_a_bound():
    """cursor 0 and step 0 are falsy: a presence test on the value refuses the step-0 checkpoint as 'missing'. The
    refusal's words rule out a bounds test; the diagnosis names the truthiness test alone."""
    spec = "ranked/restore_zero_as_missing.py"
    module, data, mesh = _planted(spec)
    state = reference.initial(0, data, mesh)
    contract = reference.contract(data, Config(seed=0, batch_size=4, num_devices=4))
    with tempfile.TemporaryDirectory(prefix="step-zero-") as folder:
        path = reference.save(os.path.join(folder, "start.npz"), state, contract)
        assert int(reference.restore(path, contract, mesh)["step"]) == 0  # a valid checkpoint the course accepts
        with pytest.raises(Exception, match="missing cursor"):  # the fault: cursor 0 taken for a missing cursor
            module.restore(path, contract, mesh)

    (miss,) = _misses(spec, [("restore_damage", Case(rows=1, features=1, seed=0, devices=1, save_at="start"))])
    assert miss is not None
    assert "a presence test on the value" in miss.why, miss.why
    assert "are both in bounds" not in miss.why, miss.why  # the refusal says 'missing': no bounds test


def test_a_save_that_fails_after_publishing_a_bare_name_names_the_empty_folder_not_the_temporary():
    """os.path.dirname of a bare file name is '': the save publishes, then fails to open '' for its folder fsync.
    The temporary was in the target's folder all along: the diagnosis names the empty dirname, not the temporary."""
    spec = "ranked/save_syncs_the_dirname.py"
    module, data, mesh = _planted(spec)
    state = reference.initial(0, data, mesh)
    contract = reference.contract(data, Config(batch_size=4, num_devices=4))
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="bare-name-") as folder:
        os.chdir(folder)
        try:
            with pytest.raises(FileNotFoundError) as raised:  # the fault, after the file was published
                module.save("mine.npz", state, contract)
            assert raised.value.filename == "" and os.listdir(folder) == ["mine.npz"]
            assert reference.save("course.npz", state, contract) == "course.npz"  # the course's save: no error
        finally:
            os.chdir(here)

    case = Case(rows=1, features=1, seed=0, devices=1, save_at="start", path="bare")
    (miss,) = _misses(spec, [("restore_damage", case)])
    assert miss is not None
    assert _rules(miss.why) == ["new-temp-name", "exact-path"] and "os.path.dirname is ''" in miss.why, miss.why


def test_a_save_that_changes_its_callers_contract_is_named_not_a_salted_contract():
    """The file's save rewrites the caller's contract lists as tuples: the caller's contract then differs from the
    JSON saved, though contract() itself is stable. The diagnosis names save's change, not an unstable contract."""
    spec = "ranked/save_tuples_the_callers_shapes.py"
    module, data, mesh = _planted(spec)
    state, config = reference.initial(0, data, mesh), Config(batch_size=4, num_devices=4)
    assert module.contract(data, config) == module.contract(data, config)  # stable: no salted hash, no id()
    contract = module.contract(data, config)
    kept = json.loads(json.dumps(contract))
    with tempfile.TemporaryDirectory(prefix="tuples-") as folder:
        module.save(os.path.join(folder, "c.npz"), state, contract)
    assert isinstance(kept["features_shape"], list) and isinstance(contract["features_shape"], tuple)  # the fault

    checks = {
        "restore_returns_every_field",
        "resume_continues_the_same_run",
        "interrupted_save_leaves_nothing_or_a_checkpoint",
    }
    results = _run(spec, 3, checks)
    for name in checks:
        text = results[name].diagnosis
        assert not results[name].passed and results[name].rules == ("save-inputs-intact",), (name, text)
        assert "was list, now tuple" in text, text  # save's change, not a salted contract nor a stale temporary


def test_a_seed_folded_to_31_bits_is_named_as_such_not_as_a_state_kept_from_an_earlier_call():
    """initial(seed) of a seed of 2^31 or more starts the run of seed mod 2^31: the key is checked here against
    split(PRNGKey(seed)) computed by JAX; the diagnosis names the narrowed seed, never a cached state."""
    import jax

    spec = "ranked/initial_folds_the_seed.py"
    module = implementation.load(str(HERE / spec))
    data, mesh, seed = teaching_fixture(), make_mesh(1), 2**31 + 5
    want = np.asarray(jax.random.split(jax.random.PRNGKey(seed))[0], np.uint32)
    narrowed = np.asarray(jax.random.split(jax.random.PRNGKey(5))[0], np.uint32)
    assert not np.array_equal(want, narrowed)  # the two seeds are two runs
    got = np.asarray(module.initial(seed, data, mesh)["key"], np.uint32)
    assert np.array_equal(got, narrowed)  # the fault: seed 2^31 + 5 starts seed 5's run

    (miss,) = _misses(spec, [("sampler_walk", Case(rows=1, features=1, seed=seed, devices=1))])
    assert miss is not None
    assert _rules(miss.why)[0] == "split-then-permute" and "seed mod 2^31 = 5" in miss.why, miss.why
    assert "earlier call" not in miss.why, miss.why  # no caching cause


def test_a_stale_cached_batch_is_blamed_on_next_batch_not_on_the_steps_body():
    """The file's next_batch gives the same ids' earlier rows after data of another width; the course's step then
    raises on them. The rows are checked here against data[ids]; the diagnosis names next_batch, not the step."""
    spec = "ranked/batch_cached_by_ids.py"
    module = implementation.load(str(HERE / spec))
    wide, narrow = Case(rows=1, features=3, seed=0, devices=1), Case(rows=1, features=1, seed=0, devices=1)
    mesh = make_mesh(1)
    for case in (wide, narrow):
        data = data_for(case)
        _, batch = module.next_batch(reference.initial(0, data, mesh), data, 1, mesh)
    assert np.shape(batch.features) == (1, 3) != np.shape(data.features[np.asarray(batch.ids)]) == (1, 1)  # stale
    _, right = reference.next_batch(reference.initial(0, data, mesh), data, 1, mesh)
    assert np.array_equal(np.asarray(right.features), data.features[np.asarray(right.ids)])

    first, second = _misses(spec, [("transition_walk", wide), ("transition_walk", narrow)])
    assert first is None  # the first data of these ids is placed right
    assert second is not None and _rules(second.why) == ["pad-by-position"], second.why  # next_batch's rule
    assert "the implementation raised" not in second.why, second.why  # not the step's exception


@pytest.mark.slow  # steps compiled for four meshes and a search: make test's, not the inner loop's
@pytest.mark.parametrize(
    "spec, function, rule",
    [
        ("broken/transition_fetches_the_weights.py", "transition", "one-update"),
        ("broken/step_cached_by_device_count.py", "make_step", "momentum"),
    ],
)
def test_weights_off_the_mesh_are_blamed_on_the_function_whose_outputs_left_it(spec, function, rule):
    """The step each file's make_step gives, called by itself on a state and batch placed on a one-device mesh of
    device 3, and each file's transition with that step: which of the two returns weights off that mesh is
    observed here; the failing check's rule is that function's."""
    import jax
    from jax.sharding import Mesh

    module = implementation.load(str(HERE / spec))
    data = teaching_fixture()
    module.make_step(  # a step for device 0's mesh made first: a step kept by device count is that one
        Mesh(np.array([jax.devices()[0]]), ("data",))
    )
    mesh = Mesh(np.array([jax.devices()[3]]), ("data",))
    step = module.make_step(mesh)
    state = reference.initial(17, data, mesh)
    _, batch = reference.next_batch(state, data, 7, mesh)

    def devices(value) -> list:
        return sorted(d.id for d in value.devices()) if isinstance(value, jax.Array) else []

    try:
        by_step = devices(step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])[0])
    except ValueError:  # the step of another mesh refuses arrays on device 3
        by_step = []
    try:
        by_transition = devices(module.transition(state, data, 7, step, mesh)[0]["weights"])
    except ValueError:
        by_transition = []
    assert (by_step != [3]) == (function == "make_step") and by_transition != [3]

    results = _run(spec, 2, {"step_follows_the_mesh_it_was_made_for", "random_transition_walk"})
    found = results["step_follows_the_mesh_it_was_made_for"]
    assert not found.passed and found.rules == (rule,), (found.rules, found.diagnosis)
    if function == "transition":
        walk = results["random_transition_walk"]
        assert not walk.passed and walk.rules == (rule,), (walk.rules, walk.diagnosis)


@pytest.mark.slow  # a save, a restore and the checker's worker: make test's, not the inner loop's
@pytest.mark.parametrize("spec", ["broken/restore_pops_the_contract.py", "broken/restore_writes_into_the_contract.py"])
def test_a_restore_that_changes_its_callers_contract_is_named_by_its_own_rule(spec):
    """Each file's restore accepts the course's own save and leaves the caller's dict different from a deep copy
    taken before the call; the first check that restores names restore's rule, not the contract's comparison."""
    import copy

    module, data, mesh = _planted(spec)
    with tempfile.TemporaryDirectory() as folder:
        path = reference.save(os.path.join(folder, "c.npz"), reference.initial(17, data, mesh), _contract(data))
        contract = _contract(data)
        kept = copy.deepcopy(contract)
        module.restore(path, contract, mesh)
        assert (contract, [type(v) for v in contract.values()]) != (kept, [type(v) for v in kept.values()])

    found = _run(spec, 3, {"restore_returns_every_field"})["restore_returns_every_field"]
    assert not found.passed and found.rules == ("restore-inputs-intact",), (found.rules, found.diagnosis)
