"""Randomised checks over the course's whole domain, shrunk to the smallest failing case.

Each property in `PROPERTIES` is tried on cases drawn from `domain.DOMAIN` with a seeded NumPy
generator (the seed is printed with every verdict). The first failing case is shrunk greedily,
parameter by parameter in the order fewest rows, smallest batch, fewest devices, fewest epochs,
narrowest data, then seed and hyper-parameters back to the course's values, while it still fails.
The verdict names the minimal case, its diagnosis (from the fitted-formula machinery, on that
case) and the one line that reproduces it in a notebook cell:

    from shardlab.checker.search import check_case
    check_case("my_model.py", "sampler_walk", rows=1, batch=1, devices=1)
"""

import os
import tempfile
import types
from dataclasses import asdict, dataclass, replace

import numpy as np

import shardlab.checker.causes as known_causes
import shardlab.checker.diagnoses as diagnoses
import shardlab.checker.early as launching
import shardlab.checker.formulas as formulas
import shardlab.checker.properties as properties
import shardlab.checker.seal as seal
import shardlab.checker.wire as wire
from shardlab.checker.command import THOROUGH  # --thorough multiplies every property's cases
from shardlab.checker.common import CheckFailed, Context, fresh_implementation, plain, raised_where
from shardlab.checker.domain import (
    CHOICES,
    CONTENTS,
    DOMAIN,
    NUMBERS,
    ONE_STEP,
    SHRINK_LAST,
    SHRINK_ORDER,
    SHRINK_TRIES,
    Case,
    draw,
    fit,
    mesh_positions,
    numbers_words,
    smaller,
)
from shardlab.checker.domain import _float as draw_float
from shardlab.checker.guard import Overrun
from shardlab.checker.properties import Miss


@dataclass(frozen=True)
class Property:
    """One randomised check: its stage, the rule it tests, the parameters it draws and how many cases."""

    name: str
    stage: int
    test: object
    parameters: tuple
    cases: int


WALK = ("rows", "batch", "devices", "epochs", "features", "fixture", "seed", "data_form", "layout")
OPTIMISER = ("learning_rate", "decay")
EXPERIMENT = ("rows", "batch", "devices", "features", "fixture", "seed", *OPTIMISER, "data_form")
RESTORE = ("rows", "batch", "devices", "features", "seed", "save_at", "path", "data_form", "file_name", "layout")
STEP = ("rows", "devices", "features", "seed", *OPTIMISER, "compiled", "contents", "layout", "numbers")
PROPERTIES = {  # one row per randomised check: its name, stage, property, parameters drawn, cases per run
    p.name: p
    for p in (
        Property("sampler_walk", 1, properties.sampler_walk, WALK, 10),
        Property("step_update", 2, properties.step_update, STEP, 8),
        Property("transition_walk", 2, properties.transition_walk, (*WALK, *OPTIMISER, "numbers"), 4),
        Property("contract_tells_apart", 3, properties.contract_tells_apart, EXPERIMENT, 6),
        Property("restore_damage", 3, properties.restore_damage, RESTORE, 5),
    )
}
SAVE_FORMS = ("start", "end", "mid")  # every restore search visits each save point and each path form first
PATH_FORMS = ("bare", "nested", "other", "home")
COMPILED_FORMS = (False, *[True] * 6)  # one un-jitted step in seven (eager dispatch costs seconds per case); seven,
# not eight, so that over search seeds the un-jitted step meets every one of the eight contents (which cycle by 8)
DATA_FORMS = ("dataset", "tuple")  # every search passes the course's Dataset and a plain tuple in turn
FILE_NAMES = CHOICES["file_name"]  # the name is the learner's to write exactly as given
# which devices a case's mesh holds, in which order: every search meets meshes that are not a prefix of
# jax.devices() (the last ones, reversed, interleaved), and the course's own, in every pairing with the data forms
LAYOUT_FORMS = ("first", "interleaved", "reversed", "last")
DATA_WORDS = {"dataset": "data as the course's Dataset", "tuple": "data as a plain (features, targets) tuple"}


def _attempt(ctx, prop: Property, case: Case) -> Miss | None:
    """The property's verdict on one case: None if it holds, else the Miss (learner exceptions included)."""
    try:
        prop.test(ctx, case)
    except Miss as miss:
        return miss
    except CheckFailed as failed:  # a probe shared with the enumerated checks
        return Miss(failed.expected, failed.observed, failed.diagnosis)
    except (Overrun, NotImplementedError):
        raise
    except Exception as exc:
        if seal.reached(exc):  # graded, the file reached the course's own code: the check says so (checker/cli.py)
            raise
        form = " (data is any (features, targets) pair: unpack it, features, targets = data)" + formulas.mark(
            "plain-tuple-data"
        )
        devices = "incompatible devices" in str(exc) or "different devices" in str(exc)
        cause = properties.foreign_step(ctx, case) if devices else None
        if cause:
            return Miss("no exception", wire.learner_error(exc), cause)
        return Miss(
            "no exception",
            wire.learner_error(exc),
            f"the implementation raised {type(exc).__name__} at {raised_where(exc)}"
            + "".join(f", {n}" for n in getattr(exc, "__notes__", ()) if str(n).startswith(properties.INPUT_NOTE))
            + diagnoses.explain(exc, raised_where(exc))
            + (form if isinstance(exc, AttributeError) and case.data_form == "tuple" else ""),
        )
    return None


def shrink(ctx, prop: Property, case: Case, miss: Miss) -> tuple[Case, Miss, int]:
    """(smallest failing case found, its miss, tries): one parameter at a time, the boldest step first.

    When the failing case names the inputs it ignored (`Miss.labels`), each try asks about those inputs only
    (`properties.focused`), and the smallest case found is asked about every input once more: its verdict is
    the full property's, and the tries skip what the case already passed (the contract search's large fixture).
    """
    if not getattr(miss, "labels", ()):
        return _shrink(ctx, prop, case, miss)
    ctx.focus = set(miss.labels)
    try:
        case, miss, tries = _shrink(ctx, prop, case, miss)
    finally:
        ctx.focus = None
    whole = _attempt(ctx, prop, case)
    return case, whole if whole is not None else miss, tries + 1


def _shrink(ctx, prop: Property, case: Case, miss: Miss) -> tuple[Case, Miss, int]:
    tries, improved = 0, True
    while improved and tries < SHRINK_TRIES:
        improved = False
        for name in (n for n in SHRINK_ORDER + SHRINK_LAST if n in prop.parameters):
            for candidate in smaller(case, name):
                if tries >= SHRINK_TRIES:
                    break
                tries += 1
                found = _attempt(ctx, prop, candidate)
                if found is not None:
                    case, miss, improved = candidate, found, True
                    break
            if improved:
                break
    return case, miss, tries


# the searches after stage 1 that call `initial`: the uniform part of their row counts is drawn from the row counts
# the sampler walks draw at the same seed (`shared_rows`), so their permutations are programs the run has compiled
SHARED_ROWS = ("transition_walk", "restore_damage")


def shared_rows(seed: int, count: int, prop: Property) -> tuple:
    """The row counts (1 to 64) the sampler walk search gives `initial` at `seed`, at the scale `count` is of
    `prop`'s own number of cases: the values a later search's uniform draw of rows picks from."""
    walk = PROPERTIES["sampler_walk"]
    found = []
    for case in cases_for(walk, seed, walk.cases * max(1, -(-count // prop.cases))):
        if not case.fixture:
            found.append(case.rows)
        found.append(properties.other_rows(case.shape()[0]))  # its second initial: 23, or 1
    return tuple(dict.fromkeys(found))


def cases_for(prop: Property, seed: int, count: int) -> list[Case]:
    """`count` cases from the domain for `prop`, from a generator seeded by (seed, the property's name)."""
    rng = np.random.default_rng([seed, *prop.name.encode()])
    unused = {name: getattr(Case, name) for name in DOMAIN if name not in prop.parameters}
    among = shared_rows(seed, count, prop) if prop.name in SHARED_ROWS else ()
    found = [fit(replace(draw(rng, among), **unused)) for _ in range(count)]
    if prop.name == "step_update":  # one step: the whole range Config accepts (its own generator)
        wide = np.random.default_rng([seed, *prop.name.encode(), 1])
        found = [replace(c, learning_rate=draw_float(wide, *ONE_STEP["learning_rate"], c.learning_rate)) for c in found]
    return [fit(replace(case, **_forms(prop, seed + number))) for number, case in enumerate(found)]  # types held


def _forms(prop: Property, number: int) -> dict:
    """The forms case `number` (counted on from the search seed) takes: each save point, path, step kind and
    data form in turn, so consecutive cases visit every form and each search seed starts at another."""
    forms = {
        "save_at": SAVE_FORMS[number % 3],
        "path": PATH_FORMS[number % 4],  # with save_at's number % 3: every pairing in 12 numbers, 4 forms in 4
        "compiled": COMPILED_FORMS[number % len(COMPILED_FORMS)],
        "data_form": DATA_FORMS[number % 2],
        "file_name": FILE_NAMES[(number // 3 * 2 + number + 2) % 3],
        "contents": CONTENTS[number % len(CONTENTS)],
        "layout": LAYOUT_FORMS[(number // 2 + number) % 4],
        "numbers": NUMBERS[number % len(NUMBERS)],  # every type Config accepts, in turn
    }
    return {name: value for name, value in forms.items() if name in prop.parameters}


def case_count(prop: Property, thorough: bool, search_cases: int = 0) -> int:
    """How many cases a run draws for `prop`: `search_cases` if given, else its own count (x THOROUGH)."""
    return search_cases or prop.cases * (THOROUGH if thorough else 1)


def run_property(ctx, prop: Property):
    """Search `prop` over the domain; (expected, observed) if every case holds, else CheckFailed on the minimal case."""
    count = case_count(prop, ctx.thorough, ctx.search_cases)
    for number, case in enumerate(cases_for(prop, ctx.search_seed, count), start=1):
        if getattr(ctx, "warming", None) is not None:  # the cache warming ahead skips what the checks reached
            ctx.warming.reach(case.shape()[0])
        miss = _attempt(ctx, prop, case)
        if miss is None:
            continue
        minimal, miss, tries = shrink(ctx, prop, case, miss)
        again = minimal.call(prop.name, _spec(ctx), prop.parameters)
        shown = _shown(minimal, prop)
        raise CheckFailed(  # the case once, beside what was expected; the observed line holds only what was seen
            plain({"minimal case": shown, "expected": miss.expected}),
            plain(miss.observed),
            f"{miss.why}. Minimal case (search seed {ctx.search_seed}, case {number} of {count}, shrunk in {tries} "
            f"tries): {_shape(minimal, prop)}; reproduce in a cell: {again}",
        )
    return f"{count} cases from the domain (search seed {ctx.search_seed})", "all as the oracle says"


def _shown(case: Case, prop: Property) -> dict:
    """The case's fields as the report shows them: only those the property draws (with the data's shape), and a
    fixture's own rows and features, not the unused defaults."""
    fields = asdict(case)
    if case.fixture:
        fields["rows"], fields["features"] = case.shape()
    kept = {"rows", "features", *prop.parameters} - ({"fixture"} if not case.fixture else set())
    return {name: value for name, value in fields.items() if name in kept}


def _shape(case: Case, prop: Property) -> str:
    """The minimal case in words: the parameters the property draws."""
    rows, width = case.shape()
    words = [f"{rows} row(s) x {width} feature(s){' (' + case.fixture + ' fixture)' if case.fixture else ''}"]
    named = {
        "batch": "batch {}",
        "devices": "{} device(s)",
        "epochs": "{} epochs",
        "seed": "seed {}",
        "learning_rate": "learning_rate {:.6g}",
        "decay": "decay {:.6g}",
        "save_at": "saved at {}",
        "path": "{} path",
        "file_name": "file name {}",
        "compiled": "compiled={}",
        "contents": "contents: {}",
    }
    words += [text.format(getattr(case, name)) for name, text in named.items() if name in prop.parameters]
    if "layout" in prop.parameters and case.layout != "first":
        words.append(f"a mesh of jax.devices() {list(mesh_positions(case.layout, case.devices))}, in that order")
    if "data_form" in prop.parameters:
        words.append(DATA_WORDS[case.data_form])
    if "numbers" in prop.parameters and case.numbers != Case.numbers:
        words.append(f"make_step given {numbers_words(case)}")
    return ", ".join(words)


def _spec(ctx) -> str:
    return "reference" if ctx.spec in ("", None, "reference") else ctx.spec


def _check(prop: Property):
    def check(ctx):
        return run_property(ctx, prop)

    check.__name__ = f"random_{prop.name}"
    check.__doc__ = f"{prop.test.__doc__} Over cases drawn from the domain, shrunk on failure."
    return check


def contracts_agree_in_a_fresh_process(ctx):
    """Contracts of drawn experiments, recomputed in a fresh interpreter, are equal to this one's."""
    prop = PROPERTIES["contract_tells_apart"]
    cases = cases_for(prop, ctx.search_seed, prop.cases)
    here = [ctx.impl.contract(properties.data_for(c), properties._config(c)) for c in cases]
    with fresh_implementation(ctx) as other:
        fresh = [other.contract(properties.data_for(c), properties._config(c)) for c in cases]
    differ = [i for i, (a, b) in enumerate(zip(here, fresh)) if a != b]
    if differ:
        case = cases[differ[0]]
        raise CheckFailed(
            plain(here[differ[0]]),
            plain(fresh[differ[0]]),
            f"the same experiment gave another contract in a fresh interpreter ({_shape(case, prop)}) -> "
            "build it from the data bytes and the configuration only (no id(), time, path or "
            "process-dependent value)" + known_causes.mark("contract-varies"),
        )
    return f"{len(cases)} contracts equal across interpreters", "equal"


# the randomised checks whose cases call `initial` (a step's and a contract's cases never sample an order)
CALLS_INITIAL = ("sampler_walk", "transition_walk", "restore_damage")


def row_counts(stages, search_seed: int, thorough: bool = False, search_cases: int = 0, skip=()) -> list[int]:
    """The row counts the randomised checks of `stages` give `initial` and `next_batch`, in the order they use
    them: the cases `run_property` draws (the same generator, seed and count). A check named in `skip` is left
    out."""
    found = []
    for prop in PROPERTIES.values():
        if prop.stage in stages and prop.name in CALLS_INITIAL and f"random_{prop.name}" not in skip:
            for case in cases_for(prop, search_seed, case_count(prop, thorough, search_cases)):
                rows = case.shape()[0]
                found.append(rows)
                if prop.name == "sampler_walk":  # its second initial: 23 rows, or 1 when the case has 23
                    found.append(properties.other_rows(rows))
    return list(dict.fromkeys(found))


def checks_for(stage: int) -> tuple:
    """The randomised checks of one stage (stage 3 adds the fresh-interpreter contract check)."""
    found = tuple(_check(p) for p in PROPERTIES.values() if p.stage == stage)
    return found + ((contracts_agree_in_a_fresh_process,) if stage == 3 else ())


def check_case(implementation: str, check: str, **fields) -> dict:
    """Run one property on one case in this interpreter; print and return the verdict; raise if it fails.

    `check` is a property name (see PROPERTIES); `fields` are Case fields (rows, batch, devices, ...).
    The kernel must see four devices (the course's set-up cell does this).
    """
    from shardlab.checker.guard import BoundedImplementation, Guard
    from shardlab.core.devices import make_mesh
    from shardlab.core.fixtures import teaching_fixture
    from shardlab.learner import implementation as loader

    impl = BoundedImplementation(loader.load(implementation), loader.API, Guard())
    with tempfile.TemporaryDirectory(prefix="shardlab-case-") as workdir:
        ctx = Context(types.SimpleNamespace(), implementation, teaching_fixture(), make_mesh(4), workdir)
        ctx.impl, case = impl, Case(**fields)
        home, os.environ["HOME"] = os.environ.get("HOME"), launching.scratch_home([workdir])["HOME"]
        try:  # as in a check run: a "~" the code expands lands in the scratch folder, never the real home
            miss = _attempt(ctx, PROPERTIES[check], case)
        finally:
            if home is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = home
    verdict = {"case": asdict(case), "passed": miss is None}
    if miss is None:
        print(f"PASS  {check}  {_shape(case, PROPERTIES[check])}")
        return verdict
    verdict.update(expected=plain(miss.expected), observed=plain(miss.observed), diagnosis=miss.why)
    print(
        f"FAIL  {check}  {_shape(case, PROPERTIES[check])}\n  expected:  {verdict['expected']}\n"
        f"  observed:  {verdict['observed']}\n"
        f"  diagnosis: {miss.why}"
    )
    raise AssertionError(miss.why)
