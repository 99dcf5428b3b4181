"""Every cause that fits, most likely first, and none the evidence rules out.

Each planted implementation (tests/ranked/ and tests/broken/) makes a mistake whose numbers coincide
with another mistake's on some batches. What each mistake would produce is computed here with NumPy,
independently of the checker's formulas; the diagnosis must name exactly the mistakes whose values
the observed numbers match (on one batch, or on every batch a check sees), and no other. A mistake is
known by its cause id (`formulas.Cause.id`); a diagnosis names it when it holds that cause's own words.
"""

import re
from pathlib import Path

import numpy as np
import pytest

from shardlab.checker import cli as runner
from shardlab.checker import formulas
from shardlab.checker.common import batch_arrays, placed
from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.devices import make_mesh
from shardlab.core.fixtures import Dataset, teaching_fixture
from shardlab.learner import implementation, rules

HERE = Path(__file__).parent
DEVICES = 4


def _per_device(x, y, m, w):
    """Per device (count, gradient numerator, loss numerator) over equal contiguous blocks of slots."""
    out = []
    for xb, yb, mb in zip(*(np.split(np.asarray(a, np.float64), DEVICES) for a in (x, y, m))):
        r = (xb @ np.asarray(w, np.float64) - yb) * (mb > 0)
        out.append((float((mb > 0).sum()), 2.0 * xb.T @ r, float(r @ r)))
    return out


def _mean_unguarded(values, counts):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.mean([np.float64(v) / np.float64(c) for v, c in zip(values, counts)], axis=0)


def _mean_guarded(values, counts):
    return np.mean([v / c if c else 0.0 * v for v, c in zip(values, counts)], axis=0)


# cause id -> what that mistake gives, (gradient, loss), from the per-device sums (`which` picks the part)
MISTAKES = {
    "local_means": lambda parts, slots, which: _mean_unguarded([p[which] for p in parts], [p[0] for p in parts]),
    "local_means_zero_when_empty": lambda parts, slots, which: _mean_guarded(
        [p[which] for p in parts], [p[0] for p in parts]
    ),
    "padding_counted": lambda parts, slots, which: sum(p[which] for p in parts) / slots,
}
GRADIENT, LOSS = 1, 2  # the part of _per_device's (count, gradient numerator, loss numerator) a mistake is about


def _named(text: str, causes) -> set[str]:
    """The ids of the causes `text` names: each cause's own words (the checker's), wherever they stand."""
    return {cause.id for cause in causes if cause.text in text}


def _same(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-6, equal_nan=True)


def _observe(spec: str, rows: int):
    """(host batch, (weights, momentum, loss, grad)) of the planted step on `rows` of the teaching data."""
    data = teaching_fixture()
    ids = np.random.default_rng(rows).permutation(23)[:rows]
    weights = np.random.default_rng(5).normal(size=data.features.shape[1]).astype(np.float32)
    host = (*batch_arrays(data, ids, DEVICES), weights, np.zeros_like(weights))
    step = implementation.load(spec).make_step(make_mesh(DEVICES))
    return host, [np.asarray(o, np.float64) for o in step(*placed(make_mesh(DEVICES), *host))]


def _fitting(observed_by_batch, which: int) -> set[str]:
    """Mistakes that match every batch's observed value and differ from the right one on at least one."""
    named = set()
    for cause, formula in MISTAKES.items():
        fits, tells = True, False
        for host, outputs in observed_by_batch:
            parts, slots = _per_device(*host[:4]), len(host[2])
            count = sum(p[0] for p in parts)
            right = sum(p[which] for p in parts) / count
            value = formula(parts, slots, which)
            fits &= _same(outputs[{GRADIENT: 3, LOSS: 2}[which]], value)
            tells |= not _same(value, right)
        if fits and tells:
            named.add(cause)
    return named


@pytest.mark.parametrize("spec", ["ranked/guarded_local_means.py", "broken/padding_counted.py"])
def test_one_batch_that_fits_two_mistakes_names_both(spec):
    """1 row on 4 devices ([1, 0, 0, 0]): guarded local means and counted padding both give numerator / 4."""
    host, outputs = _observe(str(HERE / spec), 1)
    expected = _fitting([(host, outputs)], GRADIENT)
    assert expected == {"local_means_zero_when_empty", "padding_counted"}  # the planted pair
    right, causes = formulas.gradient_causes(*host[:4], DEVICES)
    found = [cause.id for cause in formulas.ranked([(outputs[3], right, causes)])]
    assert found == ["local_means_zero_when_empty", "padding_counted"], found  # both, the guarded means first
    assert _named(formulas.explain_gradient(outputs[3], *host[:4], DEVICES), causes) == expected
    loss_expected = _fitting([(host, outputs)], LOSS)
    assert loss_expected >= {"local_means_zero_when_empty", "padding_counted"}
    _, loss_causes = formulas.loss_causes(*host[:4], DEVICES)
    loss_text = formulas.explain_loss(float(outputs[2]), *host[:4], DEVICES)
    assert _named(loss_text, loss_causes) & set(MISTAKES) == loss_expected, loss_text


@pytest.mark.parametrize(
    "spec, named",
    [
        ("ranked/guarded_local_means.py", "local_means_zero_when_empty"),
        ("broken/padding_counted.py", "padding_counted"),
        ("broken/averaging_local_means.py", "local_means"),
    ],
)
def test_the_tail_check_names_only_what_every_batch_fits(spec, named):
    """The tail-batch check sees 8, 7, 2 and 1 rows: a mistake one of them rules out is never named."""
    spec = str(HERE / spec)
    batches = [_observe(spec, rows) for rows in (8, 7, 2, 1)]
    expected = _fitting(batches, GRADIENT)
    assert expected == {named}  # the 7- and 2-row batches tell the pair apart
    loss_expected = _fitting(batches, LOSS)
    skip = [c.__name__ for c in runner.STAGES[2].CHECKS if c.__name__ not in ("gradient_on_tail_batches",)]
    skip.append("loss_on_full_and_tail_batches") if not loss_expected else None
    results = {r.name: r for r in runner.run_checks(spec, 2, only=True, skip=skip)}
    diagnosis = results["gradient_on_tail_batches"].diagnosis
    assert not results["gradient_on_tail_batches"].passed
    host = batches[0][0]
    assert _named(diagnosis, formulas.gradient_causes(*host[:4], DEVICES)[1]) & set(MISTAKES) == expected, diagnosis
    if "loss_on_full_and_tail_batches" in results:
        loss = results["loss_on_full_and_tail_batches"].diagnosis
        assert _named(loss, formulas.loss_causes(*host[:4], DEVICES)[1]) & set(MISTAKES) == loss_expected, loss


def _update(spec: str, momentum_scale: float):
    """(given, outputs, right gradient) of one planted step from non-zero momentum on 7 rows."""
    data = teaching_fixture()
    ids = np.random.default_rng(7).permutation(23)[:7]
    rng = np.random.default_rng(3)
    width = data.features.shape[1]
    given = {"weights": rng.normal(size=width).astype(np.float32)}
    given["momentum"] = (momentum_scale * rng.normal(size=width)).astype(np.float32)
    host = batch_arrays(data, ids, DEVICES)
    step = implementation.load(spec).make_step(make_mesh(DEVICES))
    outputs = [np.asarray(o, np.float64) for o in step(*placed(make_mesh(DEVICES), *host, *given.values()))]
    keep = host[2] > 0
    x, y = host[0][keep].astype(np.float64), host[1][keep].astype(np.float64)
    right = 2.0 * x.T @ (x @ given["weights"] - y) / keep.sum()
    return given, outputs, right


@pytest.mark.parametrize(
    "spec, recursion_right", [("broken/missing_factor_two.py", True), ("ranked/half_gradient_decay_09.py", False)]
)
def test_momentum_is_judged_on_the_gradient_the_step_computed(spec, recursion_right):
    """A wrong gradient is never blamed on momentum; momentum is named only when it is wrong on its own gradient."""
    given, (w, v, _, g), right = _update(str(HERE / spec), 0.5)
    assert not _same(g, right)  # the gradient is wrong in both plants
    v_course = DECAY * given["momentum"].astype(np.float64) + g
    follows = _same(v, v_course) and _same(w, given["weights"] - LEARNING_RATE * v_course)
    assert follows == recursion_right
    text = formulas.update_cause(given, g, right, {"weights": w, "momentum": v}, LEARNING_RATE, DECAY)
    _, marked = runner.marked_rules(text)  # the rules the failure lists: momentum only when it is wrong too
    assert marked == (["global-mean"] if recursion_right else ["global-mean", "momentum"]), marked


# A failure lists the rules the diagnosed mistake breaks, not every rule its check enforces. Which rule each
# planted mistake breaks is stated here from the rules' own text (learner/rules.py), never read from the checker:
# a wrong denominator breaks the global mean, a wrong decay the momentum recursion, a dropped remainder the
# remainder rule. The search's random_step_update enforces rule:any-mesh and rule:momentum too; a padding
# mistake it catches must not print them.
RULES_BROKEN = [
    ("broken/padding_counted.py", 2, "gradient_on_tail_batches", {"global-mean"}),
    ("broken/padding_counted.py", 2, "random_step_update", {"global-mean"}),
    ("broken/decay_09.py", 2, "consecutive_updates", {"momentum"}),
    ("broken/missing_factor_two.py", 2, "consecutive_updates", {"global-mean"}),
    # update 1 starts from zero momentum, where a decay of 0.9 is invisible: only the gradient is blamed
    ("ranked/half_gradient_decay_09.py", 2, "consecutive_updates", {"global-mean"}),
    ("broken/drop_remainder.py", 1, "batch_lengths_keep_the_remainder", {"remainder"}),
    ("broken/reuse_key.py", 1, "key_changes_at_each_new_epoch", {"reshuffle"}),
    ("broken/restore_opens_before_checking.py", 3, "invalid_arguments_are_refused", {"validate-fields"}),
    # next_batch assigns into the caller's state: the search's walk names rule:new-state ("the caller's dict ...
    # never changed"), not the five placement and data rules the walk also enforces
    ("broken/mutate_input.py", 1, "random_sampler_walk", {"new-state"}),
    # a plain tuple for data: "data is any (features, targets) pair"
    ("broken/next_batch_reads_data_fields.py", 1, "random_sampler_walk", {"plain-tuple-data"}),
    # only the refusal of a non-finite field is missing: rule:refuse-nan ("weights and momentum must be finite"),
    # not rule:contract-first, whose refusals (another experiment's file) all happened
    ("broken/restore_accepts_non_finite.py", 3, "refusals_name_the_course_errors", {"refuse-nan"}),
    ("broken/restore_accepts_non_finite.py", 3, "restore_refuses_damaged_checkpoints", {"refuse-nan"}),
    # save writes the final name in place: the temporary file, fsync and exclusive publish are all missing
    (
        "broken/save_naive_savez.py",
        3,
        "save_syncs_before_publishing",
        {"new-temp-name", "fsync-before-publish", "exclusive-publish"},
    ),
    ("broken/save_naive_savez.py", 3, "racing_saves_never_overwrite", {"exclusive-publish"}),
    ("broken/save_refuses_with_oserror.py", 3, "save_never_overwrites", {"never-overwrite"}),
]


@pytest.mark.parametrize("spec, stage, check, broken", RULES_BROKEN)
def test_a_failure_lists_the_rules_of_the_mistake(spec, stage, check, broken):
    skip = [c.__name__ for c in runner.checks_of(stage) if c.__name__ != check]
    (result,) = runner.run_checks(str(HERE / spec), stage, only=True, skip=skip)
    assert not result.passed and set(result.rules) == broken, (result.rules, result.diagnosis)
    assert "{rule:" not in result.diagnosis  # the marks left the text for the rules line
    line = runner.describe(result).splitlines()[-1]
    assert line.startswith("      rules:") and "broken by the mistake diagnosed" in line
    assert set(re.findall(r"rule:([a-z0-9-]+)", line)) == broken, line
    if check.startswith("random_"):  # the search's check enforces rules this mistake does not break
        assert {rule.id for rule in rules.for_check(check)} - broken


def test_a_failure_whose_diagnosis_names_no_rule_lists_the_checks_rules():
    """With no rule named by the diagnosis (here an unplaced batch), the check's own rules are listed."""
    skip = [c.__name__ for c in runner.checks_of(1) if c.__name__ != "batch_is_placed_on_the_mesh"]
    (result,) = runner.run_checks(str(HERE / "broken/batch_on_host.py"), 1, only=True, skip=skip)
    assert not result.passed and result.rules == ()
    assert "rule:placed-batch (enforced by this check" in runner.describe(result)


def test_rule_marks_name_only_rules_that_exist():
    text, found = runner.marked_rules("a cause {rule:global-mean}; another {rule:momentum} {rule:no-such-rule}")
    assert found == ["global-mean", "momentum"] and text == "a cause; another"


# cause id -> the (momentum, weights) that update mistake gives, from the state before the step, the
# gradient, and the learning rate, decay and device count the step was built with (NumPy, float64)
UPDATE_MISTAKES = {
    "course_learning_rate": lambda v, w, g, lr, d, n: (d * v + g, w - LEARNING_RATE * (d * v + g)),
    "course_decay": lambda v, w, g, lr, d, n: (DECAY * v + g, w - lr * (DECAY * v + g)),
    "learning_rate_in_momentum": lambda v, w, g, lr, d, n: (d * v + lr * g, w - (d * v + lr * g)),
    "averaged_momentum": lambda v, w, g, lr, d, n: (d * v + (1 - d) * g, w - lr * (d * v + (1 - d) * g)),
    "old_momentum": lambda v, w, g, lr, d, n: (d * v + g, w - lr * v),
    "gradient_step": lambda v, w, g, lr, d, n: (d * v + g, w - lr * g),
    "decay_on_every_device": lambda v, w, g, lr, d, n: (n * d * v + g, w - lr * (n * d * v + g)),
    "momentum_dropped": lambda v, w, g, lr, d, n: (g, w - lr * g),
    "nesterov": lambda v, w, g, lr, d, n: (d * v + g, w - lr * (g + d * (d * v + g))),
    "ascent": lambda v, w, g, lr, d, n: (d * v + g, w + lr * (d * v + g)),
    "weights_kept": lambda v, w, g, lr, d, n: (d * v + g, w),
    "swapped": lambda v, w, g, lr, d, n: (lr * v + g, w - d * (lr * v + g)),
}


def _planted_update(spec: str, decay: float, width: int):
    """(given state, observed momentum and weights, right gradient) of one planted step from non-zero momentum, on
    7 rows of a `width`-feature linear-regression set, with learning rate 0.03 and `decay` on four devices."""
    rng = np.random.default_rng([width, 9])
    x = rng.normal(size=(23, width)).astype(np.float32)
    y = (x @ rng.normal(size=width) + 0.1 * rng.normal(size=23)).astype(np.float32)
    given = {"weights": rng.normal(size=width).astype(np.float32)}
    given["momentum"] = (0.5 * rng.normal(size=width)).astype(np.float32)
    host = batch_arrays(Dataset(x, y), np.arange(7), DEVICES)
    step = implementation.load(spec).make_step(make_mesh(DEVICES), learning_rate=LEARNING_RATE, decay=decay)
    w, v, _, _ = (np.asarray(o, np.float64) for o in step(*placed(make_mesh(DEVICES), *host, *given.values())))
    xs, ys = x[:7].astype(np.float64), y[:7].astype(np.float64)
    right = 2.0 * xs.T @ (xs @ given["weights"] - ys) / 7
    return given, {"momentum": v, "weights": w}, right


@pytest.mark.parametrize(
    "spec, decay, pair",
    [
        ("ranked/step_ignores_decay.py", 0.2, True),  # 4 devices x 0.2 = the course's 0.8: two mistakes fit
        ("ranked/step_ignores_decay.py", 0.3, False),  # 4 x 0.3 = 1.2: only the default decay fits
        ("ranked/learning_rate_in_momentum.py", 0.8, False),
    ],
)
def test_an_update_names_every_update_mistake_its_numbers_fit(spec, decay, pair):
    given, got, grad = _planted_update(str(HERE / spec), decay, width=5)
    v, w = (given[k].astype(np.float64) for k in ("momentum", "weights"))
    right = np.concatenate([decay * v + grad, w - LEARNING_RATE * (decay * v + grad)])
    observed = np.concatenate([got["momentum"], got["weights"]])
    expected = []
    for cause, formula in UPDATE_MISTAKES.items():
        value = np.concatenate(formula(v, w, grad, LEARNING_RATE, decay, DEVICES))
        if _same(observed, value) and not _same(value, right):
            expected.append(cause)
    assert len(expected) == (2 if pair else 1), expected  # the planted coincidence, from NumPy alone
    course, causes = formulas.update_causes(given, grad, LEARNING_RATE, decay, DEVICES)
    assert [cause.id for cause in formulas.ranked([(observed, course, causes)])] == expected  # in the table's order
    text = formulas.explain_update(given, grad, got, LEARNING_RATE, decay, DEVICES)
    assert _named(text, causes) == set(expected), text


def test_an_update_with_too_few_features_is_not_read_off():
    """With two features and non-zero momentum, v <- a*v + b*g has more unknowns than numbers: no formula is made
    up; the known mistake that fits is named."""
    spec = str(HERE / "ranked/learning_rate_in_momentum.py")
    given, got, grad = _planted_update(spec, DECAY, width=2)
    text = formulas.explain_update(given, grad, got, LEARNING_RATE, DECAY, DEVICES)
    _, causes = formulas.update_causes(given, grad, LEARNING_RATE, DECAY, DEVICES)
    assert _named(text, causes) == {"learning_rate_in_momentum"}, text
    assert formulas.fitted_update(given, grad, got) not in text, text  # no recursion read off two features


@pytest.mark.parametrize("rows, batch, devices, pair", [(1, 3, 2, True), (1, 1, 2, False)])
def test_a_wrong_slot_count_names_every_padding_rule_it_fits(rows, batch, devices, pair):
    """Padding to jax.device_count() (4) gives 4 slots for 1 row; on a 2-device mesh with batch size 3, the batch
    size rounded up to the device count gives 4 too: both are named, the device count first."""
    from shardlab.checker.padding import SLOT_RULES
    from shardlab.checker.search import check_case

    with pytest.raises(AssertionError) as failed:
        check_case(str(HERE / "ranked/pad_to_every_device.py"), "sampler_walk", rows=rows, batch=batch, devices=devices)
    text = str(failed.value)
    right = -(-rows // devices) * devices
    every = -(-rows // 4) * 4  # the planted rule: a multiple of the four devices JAX sees
    by_batch = -(-max(batch, rows) // devices) * devices
    assert every != right and (by_batch == every) == pair
    words = {"all": 4, "devices": devices, "batch": batch, "rows": rows}
    named = sorted((text.index(rule.format(**words)), key) for rule, key in SLOT_RULES if rule.format(**words) in text)
    assert [key for _, key in named] == (["all", "batch"] if pair else ["all"]), text  # the device count first
    assert f"{every} slots" in text, text


def test_a_wrong_loss_of_the_step_is_not_blamed_on_transition():
    """The step reports the loss after its update; its weights and momentum are right. random_transition_walk must
    name make_step's loss (the value a NumPy loss at the updated weights gives), never transition or momentum."""
    skip = [c.__name__ for c in runner.STAGES[2].CHECKS if c.__name__ != "random_transition_walk"]
    (result,) = runner.run_checks(str(HERE / "broken/loss_after_update.py"), 2, only=True, skip=skip)
    assert not result.passed
    assert set(result.rules) == {"loss-before-update"}, result.rules  # the loss's rule: not momentum's, nor a walk's
    expected, observed = result.expected, result.observed
    case = expected["minimal case"]
    assert "learning_rate" in case and "save_at" not in case  # only the keys a transition walk draws
    assert observed["the step's own loss"] == observed["loss"] != expected["expected"]["loss"]


def _batches(seed: int, count: int, rows: int = 8, width: int = 3):
    """`count` random batches (features, targets, full mask, weights) and each one's gradient, by NumPy alone."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        x, y, w = rng.normal(size=(rows, width)), rng.normal(size=rows) * 5, rng.normal(size=width)
        out.append(((x, y, np.ones(rows), w), 2.0 * x.T @ (x @ w - y) / rows))
    return out


@pytest.mark.parametrize("threshold", [1.0, 0.5, 2.5])
def test_a_gradient_clipped_to_a_norm_is_named_as_clipped_with_that_norm(threshold):
    """g * min(1, c/|g|), computed here in float32: the diagnosis names a clip to c, on one batch and on several
    (some of them shorter than c and so left as they are)."""
    batches = _batches(0, 4)
    observations = []
    for batch, g in batches:
        clipped = (g * min(1.0, threshold / np.linalg.norm(g))).astype(np.float32)
        observations.append((clipped, *batch))
    assert any(np.linalg.norm(g) > threshold for _, g in batches)
    for seen in (observations[-1:], observations):
        text = formulas.explain_gradient_over(seen, DEVICES)
        assert text.startswith(formulas.CLIPPED), text
        assert formulas.clip_norm([(o[0], g, []) for o, (_, g) in zip(seen, batches[-len(seen) :])]) == pytest.approx(
            threshold, rel=1e-5
        )


def test_a_constant_factor_is_not_taken_for_a_clip():
    """The same factor on batches of different norms gives different output norms: not a clip. One batch scaled by
    0.00653 has a norm no one writes as a threshold: not read as a clip either."""
    batches = _batches(1, 3)
    scaled = [((0.00653 * g).astype(np.float32), *batch) for batch, g in batches]
    norms = [np.linalg.norm(0.00653 * g) for _, g in batches]
    assert max(norms) / min(norms) > 1.01 and abs(float(f"{norms[-1]:.2g}") - norms[-1]) > 1e-3 * norms[-1]
    for seen in (scaled, scaled[-1:]):
        text = formulas.explain_gradient_over(seen, DEVICES)
        assert formulas.CLIPPED not in text and "0.00653 x the NumPy gradient" in text, text
