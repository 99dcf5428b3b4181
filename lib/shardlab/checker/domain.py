"""The domain the course's rules hold over, as one table: what the random search draws and shrinks.

A `Case` is one configuration. `DOMAIN` gives each parameter its range (ends included), the
values a draw favours (the ends, and values next to a device multiple or the row count), and
the order in which shrinking tries to make it smaller. docs/checker.md prints this table.
"""

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from shardlab.core.config import DECAY, LEARNING_RATE
from shardlab.core.fixtures import Dataset, teaching_fixture, timing_fixture

FIXTURES = {"teaching": teaching_fixture, "timing": timing_fixture}  # 23 x 8 and 1,023 x 64
MAX_WALK = 96  # next_batch / transition calls in one case at most (the timing fixture uses big batches)
SHRINK_TRIES = 48  # evaluations a shrink may spend


@dataclass(frozen=True)
class Case:
    """One configuration of the experiment; `fixture` replaces rows x features by a course fixture."""

    rows: int = 23
    batch: int = 7
    devices: int = 4
    epochs: int = 2  # epoch boundaries a walk crosses (it runs epochs x batches-per-epoch + 1 calls)
    features: int = 3
    seed: int = 17
    learning_rate: float = LEARNING_RATE
    decay: float = DECAY
    fixture: str = ""
    save_at: str = "mid"  # where a checkpoint is taken: "start" (step 0), "end" (an epoch's last batch), "mid"
    path: str = "nested"  # how the save path is spelt: "bare" (cwd), "nested" folders, "other" file system,
    # "home": relative, through a folder named "~" (the exact path given, never the home folder)
    compiled: bool = True  # make_step(..., compiled=...): the jitted step or the bare mapped body
    data_form: str = "dataset"  # how data is passed: the course's Dataset, a plain tuple, or non-contiguous views
    file_name: str = "checkpoint.npz"  # the file name: with the .npz suffix, without, or another, spaces at its ends
    contents: str = "course"  # what a step's arrays hold: the course's data, non-finite or huge padding, large data
    layout: str = "first"  # which of the 4 logical devices the mesh holds, in which order (LAYOUTS)
    numbers: str = "float / float"  # the types make_step is given its learning rate / decay in (NUMBERS)

    def shape(self) -> tuple[int, int]:
        if self.fixture:
            return (1023, 64) if self.fixture == "timing" else (23, 8)
        return self.rows, self.features

    def call(self, check: str, spec: str, parameters) -> str:
        """The one line that reproduces this case (its `parameters` that differ from the defaults) in a cell."""
        unused = ("rows", "features") if self.fixture else ()  # a fixture has its own shape
        fields = {
            k: v for k, v in asdict(self).items() if k in parameters and v != getattr(Case, k) and k not in unused
        }
        text = ", ".join(f"{k}={v!r}" for k, v in fields.items())
        return f'check_case("{spec}", "{check}"{", " if text else ""}{text})'


# A file name to be written exactly as given: a space at each end, and an é both composed (U+00E9) and decomposed
# (e + U+0301), which str.strip and each Unicode normal form (NFC, NFD, NFKC, NFKD) change; and $HOME and %HOME%,
# which os.path.expandvars (and its Windows form) replace by the home folder (HOME is set wherever the checks run).
SPELT = " run-$HOME-%HOME%-\u00e9-e\u0301.ckpt "
# name -> (lowest, highest, shrink target): integer ranges include both ends; floats too.
DOMAIN = {
    "rows": (1, 64, 1),
    "batch": (1, None, 1),  # up to rows + 2: a batch larger than the dataset is in the domain
    "devices": (1, 4, 1),  # meshes of k of the 4 logical devices, which and in which order set by "layout"
    "epochs": (2, 4, 2),
    "features": (1, 9, 1),
    "seed": (0, 2**32 - 1, 0),  # every seed jax.random.PRNGKey accepts with 32-bit keys
    "learning_rate": (0.001, 0.1, LEARNING_RATE),
    "decay": (0.0, 0.99, DECAY),
    "fixture": ("", "timing", ""),
    "save_at": ("start", "mid", "start"),
    "path": ("bare", "other", "nested"),
    "compiled": (False, True, True),
    "data_form": ("dataset", "tuple", "dataset"),
    "file_name": ("checkpoint.npz", SPELT, "checkpoint.npz"),
    "contents": ("course", "large data", "course"),
    "layout": ("first", "interleaved", "first"),
    "numbers": ("float / float", "uint64 / 0-d uint8", "float / float"),
}
# One step cannot diverge, so a single-step property draws the learning rate from the whole range the
# course's Config accepts, (0, 10); a walk keeps to DOMAIN's range, where many steps stay finite.
ONE_STEP = {"learning_rate": (0.001, 9.99)}
SHRINK_ORDER = ("fixture", "rows", "batch", "devices", "epochs", "features", "seed", "learning_rate", "decay")
# the forms, shrunk to the course's own after the sizes
SHRINK_LAST = ("save_at", "path", "compiled", "data_form", "file_name", "contents", "layout", "numbers")
# The contents of a step's arrays: padded slots whose target is NaN, +-inf or 3e38 and whose features are 3e38 (a
# padded slot has mask 0 whatever it holds), or large data (features ~1e5, targets fitted to within ~10), where float32
# still gives the loss to its rounding bound but a loss expanded as a sum of squares loses every digit.
# Exact data: integer features up to 4096, integer weights and targets, where every product and sum of the course's
# formula is exact in float32 (only the division by the count rounds), but a form that builds X^T X does not.
# Gaps in the mask: the batch's slots (valid rows and padded ones) in a drawn order, so a padded slot sits between
# valid ones on a device and the mask is no prefix there: a masked mean is over the rows whose mask is 1, wherever.
CONTENTS = (
    "course",
    "NaN padding",
    "+inf padding",
    "-inf padding",
    "huge padding",
    "large data",
    "exact data",
    "mask with gaps",
)
# The types make_step is given its learning rate and decay in, as "learning rate / decay": every number Config
# accepts (0 < float(learning_rate) < 10, 0 <= float(decay) < 1), so a Python int or float, a NumPy scalar of each
# float and integer width, or a 0-d array; the momentum rule asks for each as given, with no type test. An integer
# learning rate is one of 1 ... 9 and an integer decay is 0; a narrow float holds the number it rounds the case's to.
# The one-step and transition searches take them in turn, one form per case (a walk at an integer learning rate on
# rows scaled down: walk_data).
NUMBERS = (
    "float / float",
    "float32 / float32",
    "int / float64",
    "float64 / 0-d float32",
    "0-d float64 / float16",
    "int64 / int",
    "float16 / 0-d float64",
    "uint8 / float32",
    "0-d float32 / float64",
    "int32 / 0-d float16",
    "int8 / float",
    "0-d int64 / 0-d float32",
    "int16 / float16",
    "uint16 / float64",
    "uint32 / float32",
    "uint64 / 0-d uint8",
)
CHOICES = {
    "fixture": ("", "", "", "", "teaching", "timing"),
    "save_at": ("start", "end", "mid"),
    "path": ("bare", "nested", "other", "home"),
    "compiled": (True, False),
    "data_form": ("dataset", "tuple", "views"),
    "file_name": ("checkpoint.npz", "checkpoint", SPELT),
    "contents": CONTENTS,
    "layout": ("first", "last", "reversed", "interleaved"),
    "numbers": NUMBERS,
}


def _integer_kind(kind: str) -> bool:
    return kind == "int" or (kind != "float" and np.dtype(kind.removeprefix("0-d ")).kind in "iu")


def typed(value: float, kind: str):
    """`value` as the number `kind` names: a Python float or int, a NumPy scalar of a dtype, or a 0-d array."""
    if kind == "float":
        return float(value)
    if kind == "int":
        return int(value)
    dtype = np.dtype(kind.removeprefix("0-d "))
    return np.asarray(value, dtype) if kind.startswith("0-d ") else dtype.type(value)


def hyperparameters(case: Case) -> dict:
    """The learning rate and decay make_step is given for `case`, each in the type its `numbers` form names: a Python
    float where that type cannot hold the case's value exactly (a value derived from the case's)."""
    found = {}
    for name, kind in zip(("learning_rate", "decay"), case.numbers.split(" / ")):
        value = getattr(case, name)
        number = typed(value, kind)
        found[name] = number if float(number) == value else float(value)
    return found


def numbers_words(case: Case) -> str:
    """The types of the case's learning rate and decay, as the report names them."""
    return ", ".join(
        f"{name} {type(value).__module__.replace('builtins', '').replace('numpy', 'np')}"
        f"{'.' if type(value).__module__ != 'builtins' else ''}{type(value).__name__}"
        + (f" of dtype {value.dtype}" if isinstance(value, np.ndarray) else "")
        for name, value in hyperparameters(case).items()
    )


def _held(value: float, kind: str, name: str) -> float:
    """The number a hyperparameter of `kind` holds for `value`: an integer learning rate 1 ... 9 and an integer decay
    0 (the integers Config accepts), a narrow float's rounding, else `value`."""
    if _integer_kind(kind):
        return float(min(max(round(value), 1), 9)) if name == "learning_rate" else 0.0
    return float(typed(value, kind))


# Which devices a case's mesh of k devices holds, by position in jax.devices(), in mesh order. Only "first" is a
# prefix of jax.devices(): a function that places on a mesh of its own making (jax.devices()[:k], sorted devices)
# instead of the mesh it is given puts its arrays elsewhere on the others (on 4 devices, "reversed" and
# "interleaved" hold every device in another order, where rows of a split batch land on other devices).
LAYOUTS = {
    "first": (0, 1, 2, 3),
    "last": (0, 1, 2, 3),  # the last k in ascending order: [3], [2, 3], [1, 2, 3] (mesh_positions)
    "reversed": (3, 2, 1, 0),  # [3], [3, 2], [3, 2, 1], [3, 2, 1, 0]
    "interleaved": (1, 3, 0, 2),
}


def mesh_positions(layout: str, devices: int) -> tuple:
    """Positions in jax.devices() of the `devices` devices a mesh of `layout` holds, in mesh order."""
    if layout == "last":
        return tuple(range(4 - devices, 4))
    return LAYOUTS[layout][:devices]


def data_for(case: Case) -> Dataset:
    """The case's data: a course fixture, or a small linear-regression set drawn from its shape alone."""
    if case.fixture:
        return FIXTURES[case.fixture]()
    rng = np.random.default_rng([case.rows, case.features, 2026])
    features = rng.normal(size=(case.rows, case.features)).astype(np.float32)
    w_true = rng.normal(size=case.features).astype(np.float32)
    targets = (features @ w_true + 0.1 * rng.normal(size=case.rows)).astype(np.float32)
    return Dataset(features, targets)


WALK_SCALE = 0.25  # a power of two: the rows scaled by it are exact in float32


def walk_data(case: Case) -> Dataset:
    """The data a walk of many steps takes: the case's, every feature and target times WALK_SCALE where its learning
    rate is an integer. The least integer Config accepts, 1, is ten times the walk's float range, and on the case's
    own rows a walk of tens of steps at 1 grows past what float32 holds; on rows a quarter the size, a gradient step of
    1 moves the weights as one of 1/16 does on the case's, inside that range."""
    data = data_for(case)
    if not _integer_kind(case.numbers.split(" / ")[0]):
        return data
    scale = np.float32(WALK_SCALE)
    return Dataset(data.features * scale, data.targets * scale)


def given(case: Case, data: Dataset):
    """`data` as the case passes it: the course's Dataset, a plain tuple, or Fortran-ordered and strided arrays."""
    if case.data_form == "tuple":
        return tuple(data)
    if case.data_form == "views":  # the same values in other memory layouts: Fortran order, a strided column
        both = np.stack([data.targets, data.targets], axis=1)
        return Dataset(np.asfortranarray(data.features), both[:, 0])
    return data


def _int(rng, low: int, high: int, near=(), among=()) -> int:
    """Uniform on [low, high] (or over `among`, values drawn so before), or (one time in three) one of the ends or of
    the `near` values."""
    edges = [v for v in (low, high, *near) if low <= v <= high]
    if rng.random() < 1 / 3:
        return int(rng.choice(edges))
    return int(rng.choice(among)) if len(among) else int(rng.integers(low, high + 1))


def _float(rng, low: float, high: float, default: float) -> float:
    """Uniform on [low, high], or (one time in three) an end or the course's value."""
    return float(rng.choice([low, high, default])) if rng.random() < 1 / 3 else float(rng.uniform(low, high))


def draw(rng: np.random.Generator, rows_among=()) -> Case:
    """One case from the domain; `rows_among`: row counts drawn before, which the uniform draw of rows picks from
    (the ends, the device count, twice it and 23 are still favoured as always)."""
    fixture = str(rng.choice(CHOICES["fixture"]))
    devices = _int(rng, 1, 4)
    rows = _int(rng, 1, 64, (devices, 2 * devices, 23), rows_among)
    total = {"": rows, "teaching": 23, "timing": 1023}[fixture]
    low = 256 if fixture == "timing" else 1  # keeps a timing-fixture walk within MAX_WALK calls
    batch = _int(rng, low, total + 2, (devices, 2 * devices, total, total - 1, total + 1))
    case = Case(
        rows=rows,
        batch=batch,
        devices=devices,
        epochs=_int(rng, 2, 4),
        features=_int(rng, 1, 9),
        seed=_int(rng, 0, 2**32 - 1, (1, 17, 29)),
        learning_rate=_float(rng, 0.001, 0.1, LEARNING_RATE),
        decay=_float(rng, 0.0, 0.99, DECAY),
        fixture=fixture,
        save_at=str(rng.choice(CHOICES["save_at"])),
        path=str(rng.choice(CHOICES["path"])),
    )
    return fit(case)


def fit(case: Case) -> Case:
    """The case moved inside the domain: batch at most rows + 2, a walk at most MAX_WALK calls."""
    rows = case.shape()[0]
    batch = max(1, min(case.batch, rows + 2))
    epochs = max(2, min(case.epochs, MAX_WALK // max(1, math.ceil(rows / batch)) - 1))
    kinds = dict(zip(("learning_rate", "decay"), case.numbers.split(" / ")))
    held = {name: _held(getattr(case, name), kind, name) for name, kind in kinds.items()}
    return replace(case, batch=batch, epochs=epochs, **held)


def smaller(case: Case, name: str) -> list[Case]:
    """Candidate cases with parameter `name` closer to its shrink target, the boldest first."""
    value, (_, _, target) = getattr(case, name), DOMAIN[name]
    if value == target:
        return []
    if isinstance(value, (str, bool, float)):
        options = [target]
    else:
        options = sorted({target, target + (value - target) // 2, value - 1} - {value})
    return [fit(replace(case, **{name: v})) for v in options if fit(replace(case, **{name: v})) != case]


def walk_calls(case: Case) -> int:
    """next_batch calls that cross `epochs` epoch boundaries and start one more epoch."""
    rows = case.shape()[0]
    return case.epochs * math.ceil(rows / case.batch) + 1
