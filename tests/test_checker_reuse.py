"""The checker's speed mechanisms keep verdicts true: reuse only while nothing a check depends on changed,
the compilation cache outside the learner's folder, and the order and rounding rules of the new checks."""

import importlib.util
import textwrap

import numpy as np
import pytest

from shardlab.checker import cli as runner
from shardlab.checker import compile_cache, reuse
from shardlab.checker.properties import rounding_bounds
from shardlab.checker.stage3 import _order_fault

BASE = """
from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import next_batch as _next_batch

SCALE = 1


def _helper(x):
    return x * SCALE


def next_batch(state, data, batch_size, mesh):
    _helper(1)
    return _next_batch(state, data, batch_size, mesh)


def contract(data, config):
    from shardlab.learner.reference import contract as theirs

    return theirs(data, config)
"""


def _load(path):
    spec = importlib.util.spec_from_file_location(f"mine_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _digests(tmp_path, text, name="mine.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return reuse.function_digests(_load(path), ("next_batch", "contract", "initial"))


def test_a_function_digest_follows_its_helpers_and_constants_only(tmp_path):
    base = _digests(tmp_path, BASE)
    assert all(base.values())
    helper = _digests(tmp_path, BASE.replace("return x * SCALE", "return x * SCALE + 0"), "b.py")
    assert helper["next_batch"] != base["next_batch"] and helper["contract"] == base["contract"]
    constant = _digests(tmp_path, BASE.replace("SCALE = 1", "SCALE = 2"), "c.py")
    assert constant["next_batch"] != base["next_batch"]
    other = _digests(tmp_path, BASE.replace("return theirs(data, config)", "return dict(theirs(data, config))"), "d.py")
    assert other["next_batch"] == base["next_batch"] and other["contract"] != base["contract"]
    moved = _digests(tmp_path, "\n\n\n" + BASE, "e.py")  # lines moved, nothing changed
    assert moved == base


def test_a_statement_that_only_binds_names_leaves_the_functions_that_do_not_use_them_alone(tmp_path):
    """A docstring, a quiet import and a literal count only where a function refers to them; code that runs does not."""
    base = _digests(tmp_path, BASE)
    quiet = '"""My sampler."""\nimport ctypes\nimport numpy as np\nfrom shardlab.core import files\nLIMIT = (1, 2)\n'
    assert _digests(tmp_path, quiet + BASE, "q.py") == base
    for effect in ("print(end='')", "LIMIT = len('ab')", "import ml_dtypes"):
        loud = _digests(tmp_path, f"import numpy as np\n{effect}\n" + BASE, f"loud_{abs(hash(effect))}.py")
        assert all(loud[name] != base[name] for name in base), effect  # it may change any function
    # a file of the reference's functions and its own save: the functions it did not write hash as the reference's
    mine = _digests(tmp_path, "import os\nfrom shardlab.learner.reference import *  # noqa: F403\n", "r.py")
    from shardlab.learner import reference

    assert mine == reuse.function_digests(reference, ("next_batch", "contract", "initial"))


def test_an_object_without_source_is_never_reused(tmp_path):
    uses = _digests(tmp_path, BASE.replace("_helper(1)", "_helper(1)\n    BOX") + "\n\nBOX = object()\n", "h.py")
    assert uses["next_batch"] is None and uses["contract"] is not None


@pytest.mark.slow  # checks a file several times, compiling each time
def test_a_passed_check_is_reused_until_a_function_it_reached_changes(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "cache"))
    path = tmp_path / "mine.py"
    path.write_text(textwrap.dedent(BASE))
    names = ("next_batch_leaves_step_alone", "replay_is_deterministic")
    skip = [c.__name__ for c in runner.checks_of(1) if c.__name__ not in names]

    def run():
        results = runner.run_checks(str(path), 1, only=True, skip=skip, reuse=True)
        assert [r.name for r in results] == list(names) and all(r.passed for r in results)
        return [r.diagnosis == runner.REUSED for r in results]

    assert run() == [False, False]
    assert run() == [True, True]
    assert "reused: nothing it depends on changed" in runner.describe(
        runner.run_checks(str(path), 1, only=True, skip=skip, reuse=True)[0]
    )
    path.write_text(textwrap.dedent(BASE.replace("return x * SCALE", "return x * SCALE * 1")))
    assert run() == [False, False]  # next_batch's helper changed: both checks reach next_batch
    path.write_text(
        textwrap.dedent(
            BASE.replace("return x * SCALE", "return x * SCALE * 1").replace(
                "return theirs(data, config)", "return dict(theirs(data, config))"
            )
        )
    )
    assert run() == [True, True]  # contract changed: neither check reaches it
    assert not any(r.diagnosis for r in runner.run_checks(str(path), 1, only=True, skip=skip))  # reuse is opt-in


def test_the_compilation_cache_is_the_checkers_and_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV, "off")
    assert compile_cache.folder() is None
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "c"))
    assert compile_cache.folder() == str(tmp_path / "c") and (tmp_path / "c").is_dir()
    monkeypatch.delenv(compile_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache.folder().startswith(str(tmp_path / "xdg"))


@pytest.mark.parametrize(
    "operations, fault",
    [
        (["open t", "write 3", "write 3", "fsync 3", "close 3", "link t", "unlink t"], None),
        (["open t", "fsync 3", "write 3", "write 3", "close 3", "link t"], "fsync came before the last write"),
        (
            ["open t", "write 3", "close 3", "rename t"],
            "no fsync (or fdatasync) of the file between the last write and publishing",
        ),
        (["open p", "write 3", "close 3"], None),  # written in place: the interrupted-save check judges it
        (["open t", "write 3", "fsync 3", "write 3", "replace t"], "fsync came before the last write"),
    ],
)
def test_the_order_of_a_saves_operations(operations, fault):
    found = _order_fault(operations)
    assert (found is None) if fault is None else (fault in found)


def test_rounding_bounds_hold_float32_and_refuse_an_expanded_square():
    """Independent float32 NumPy computations: the residual form stays within the bound, the expanded one not."""
    caught = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        rows, width = int(rng.integers(2, 40)), int(rng.integers(1, 9))
        x = (rng.normal(size=(rows, width)) * 1e5 / np.sqrt(width)).astype(np.float32)
        w = rng.normal(size=width).astype(np.float32)
        y = (x.astype(np.float64) @ w + 10 * rng.normal(size=rows)).astype(np.float32)
        mask = np.ones(rows, np.float32)
        r64 = x.astype(np.float64) @ w - y
        want = float(r64 @ r64 / rows)
        bound = rounding_bounds(x, y, mask, w, np.zeros(width, np.float32), 0.03, 0.8)["loss"]
        r32 = x @ w - y
        assert abs(float(r32 @ r32 / np.float32(rows)) - want) <= bound, seed
        p = x @ w
        expanded = (np.sum(p * p) - np.float32(2) * np.sum(p * y) + np.sum(y * y)) / np.float32(rows)
        caught += abs(float(expanded) - want) > bound
    assert caught >= 190, caught


@pytest.mark.slow  # checks three files
def test_a_copy_under_another_name_reuses_and_two_files_keep_their_passes(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "cache"))
    names = ("next_batch_leaves_step_alone",)
    skip = [c.__name__ for c in runner.checks_of(1) if c.__name__ not in names]
    first, copy, edited = tmp_path / "mine.py", tmp_path / "elsewhere" / "copy.py", tmp_path / "edited.py"
    copy.parent.mkdir()
    first.write_text(textwrap.dedent(BASE))
    copy.write_text(textwrap.dedent(BASE))
    edited.write_text(textwrap.dedent(BASE.replace("return x * SCALE", "return x * SCALE * 1")))

    def reused(path):
        (result,) = runner.run_checks(str(path), 1, only=True, skip=skip, reuse=True)
        assert result.passed
        return result.diagnosis == runner.REUSED

    assert [reused(first), reused(copy)] == [False, True]  # the same functions, another name and folder
    assert [reused(edited), reused(first), reused(edited)] == [False, True, True]  # each file keeps its pass
