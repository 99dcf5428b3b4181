"""Graded, a file that calls the course's own seven functions at run time is seen, whatever route reached them.

The routes are ones the syntax tree cannot follow (checker/provenance.py): a helper with `importlib`,
`sys.modules`, `getattr` on `shardlab` itself, the reference's source executed again, a file that swallows
what the course's code raised, and a file whose own functions are assembled from the course's helpers one
level below the seven (`sampler.advance`, `batch.pad`, `update.map_step`, ...). Each is checked against
what the same call gives unsealed (the course's real result), and the originals' absence is checked by
scanning every live object for a function compiled from the course's files, not by asking the seal.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import shardlab.checker.seal as seal
from shardlab.checker import remote
from shardlab.core.config import NUM_DEVICES, Config
from shardlab.core.devices import make_mesh
from shardlab.core.fixtures import teaching_fixture
from shardlab.errors import CourseCodeError
from shardlab.handin import bounded, grade, platforms
from shardlab.learner import reference
from shardlab.learner.implementation import API

HEAD = {
    "facade": "import importlib\n\n\ndef _impl(name):\n"
    '    return getattr(importlib.import_module("shardlab.learner." + "reference"), name)\n',
    "sys_modules": "import sys\n\nimport shardlab.core.state  # noqa: F401\n\n\ndef _impl(name):\n"
    '    found = getattr(sys.modules["shardlab.core.state"], name, None)\n'
    '    return found or getattr(sys.modules["shardlab.learner.reference"], name)\n',
    "top_level": "import shardlab\n\n_course = shardlab\n\n\ndef _impl(name):\n    return getattr(_course, name)\n",
    "reloaded": "import importlib.util\n\nimport shardlab.learner.reference as _ref\n\n\ndef _impl(name):\n"
    "    spec = importlib.util.spec_from_file_location('again', _ref.__file__)\n"
    "    module = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(module)\n"
    "    return getattr(module, name)\n",
    "swallows": "import importlib\n\n\ndef _impl(name):\n    def quiet(*args, **kwargs):\n        try:\n"
    "            return getattr(importlib.import_module('shardlab.learner.reference'), name)(*args, **kwargs)\n"
    "        except BaseException:\n            return None\n\n    return quiet\n",
}
# the course object each route reaches for `initial`, as this (unsealed) interpreter resolves it
REACHED = {
    "facade": "shardlab.learner.reference.initial",
    "sys_modules": "shardlab.core.state.initial",
    "top_level": "shardlab.core.state.initial",
    "reloaded": "shardlab.learner.reference",  # its source, refused before anything runs
}


def _file(name: str) -> str:
    body = "".join(f"\n\ndef {f}(*args, **kwargs):\n    return _impl({f!r})(*args, **kwargs)\n" for f in API)
    return HEAD[name] + body


def _write(folder: Path, names) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / f"{name}.py").write_text(_file(name))


def _initial_in_worker(path: Path, scratch: Path):
    """What the file's `initial` returns or raises in a worker (checker/worker.py) on the teaching fixture."""
    impl = remote.RemoteImplementation(remote.Worker(str(path), call_seconds=60, scratch=str(scratch)))
    try:
        hello = impl.worker.start()
        assert "error" not in hello, hello
        try:
            return impl.initial(0, teaching_fixture(), make_mesh(NUM_DEVICES))
        except Exception as exc:
            return exc
    finally:
        impl.close()


# a file of "its own" seven functions, each built from the course's helpers one level below the seven
COMPOSER = textwrap.dedent(
    """
    import json
    import os

    import numpy as np

    from shardlab.core import archive, checkpoint, files, sampler, schema, state, update
    from shardlab.core import batch as batches


    def initial(seed, data, mesh):
        zeros = np.zeros(np.shape(data[0])[1], np.float32)
        sampled = sampler.initial_sampler(seed, len(data[0]))
        return {"weights": state.replicate(zeros, mesh), "momentum": state.replicate(zeros, mesh), **sampled, "step": 0}


    def next_batch(current, data, batch_size, mesh):
        moved, ids = sampler.advance(current, batch_size)
        return moved, batches.Batch(*batches.place(*batches.pad(data, ids, mesh.size), mesh), ids)


    def make_step(mesh, learning_rate=0.03, decay=0.8, compiled=True):
        built = update.map_step(update._sharded_body, mesh, learning_rate, decay, compiled)
        return built


    def transition(current, data, batch_size, step, mesh):
        moved, got = next_batch(current, data, batch_size, mesh)
        weights, momentum, loss, _ = step(got.features, got.targets, got.mask, current["weights"], current["momentum"])
        return state.updated(moved, weights, momentum), float(loss), got.ids


    def contract(data, config):
        features, targets = np.asarray(data[0]), np.asarray(data[1])
        found = {"schema_version": 1, "data_sha256": checkpoint.data_hash(data), "num_features": features.shape[1]}
        found.update(features_shape=list(features.shape), features_dtype=features.dtype.str)
        found.update(targets_shape=list(targets.shape), targets_dtype=targets.dtype.str)
        return {**found, **config.as_dict()}


    def save(path, current, expected):
        arrays = checkpoint.members(current, expected)
        fd, tmp = files.temporary(os.path.dirname(os.path.abspath(path)), ".npz")
        files.publish_new(fd, tmp, path, lambda handle: np.savez(handle, **arrays))
        return path


    def restore(path, expected, mesh):
        arrays = archive.read_members(path, expected)
        checkpoint.check_contract(json.loads(str(arrays["contract"][()])), expected)
        host = schema.host_copy(arrays)
        placed = {name: state.replicate(host[name], mesh) for name in ("weights", "momentum")}
        return {**host, **placed}
    """
)
# the helper each of the composer's functions reaches first, none of them one of the seven
HELPERS = {
    "initial": "shardlab.core.sampler.initial_sampler",
    "make_step": "shardlab.core.update.map_step",
    "contract": "shardlab.core.checkpoint.data_hash",
}


def _calls_in_worker(path: Path, scratch: Path) -> dict:
    """What the file's initial, make_step and contract return or raise in a worker, on the teaching fixture."""
    impl = remote.RemoteImplementation(remote.Worker(str(path), call_seconds=60, scratch=str(scratch)))
    calls = {
        "initial": lambda: impl.initial(0, teaching_fixture(), make_mesh(NUM_DEVICES)),
        "make_step": lambda: impl.make_step(make_mesh(NUM_DEVICES)),
        "contract": lambda: impl.contract(teaching_fixture(), Config()),
    }
    found = {}
    try:
        hello = impl.worker.start()
        assert "error" not in hello, hello
        for name, call in calls.items():
            try:
                found[name] = call()
            except Exception as exc:
                found[name] = exc
        return found
    finally:
        impl.close()


@pytest.mark.slow
def test_the_course_s_helpers_below_the_seven_are_sealed_too(tmp_path, monkeypatch):
    path = tmp_path / "composer.py"
    path.write_text(COMPOSER)
    found = _calls_in_worker(path, tmp_path)  # unsealed, the file computes what the course computes
    expected = reference.initial(0, teaching_fixture(), make_mesh(NUM_DEVICES))
    assert sorted(found["initial"]) == sorted(expected)
    for field in expected:
        assert np.array_equal(np.asarray(found["initial"][field]), np.asarray(expected[field])), field
    assert found["contract"] == reference.contract(teaching_fixture(), Config())
    monkeypatch.setenv(seal.SEAL_ENV, "1")
    found = _calls_in_worker(path, tmp_path)
    for name, course in HELPERS.items():
        assert type(found[name]) is CourseCodeError, (name, found[name])
        message = seal.reached(found[name])
        assert message and message.startswith(f"`{name}` reached the course's own {course} while graded"), message


@pytest.mark.slow
def test_every_route_to_the_course_is_seen_in_a_sealed_worker(tmp_path, monkeypatch):
    _write(tmp_path, HEAD)
    expected = reference.initial(0, teaching_fixture(), make_mesh(NUM_DEVICES))
    for name in ("facade", "swallows"):  # unsealed, the files really are the course: the same state
        found = _initial_in_worker(tmp_path / f"{name}.py", tmp_path)
        assert not isinstance(found, BaseException), (name, found)
        assert sorted(found) == sorted(expected)
        for field in expected:
            assert np.array_equal(np.asarray(found[field]), np.asarray(expected[field])), (name, field)
    monkeypatch.setenv(seal.SEAL_ENV, "1")
    for name, course in REACHED.items():
        found = _initial_in_worker(tmp_path / f"{name}.py", tmp_path)
        assert type(found) is CourseCodeError, (name, found)
        message = seal.reached(found)
        assert message and message.startswith(f"`initial` reached the course's own {course} while graded"), message
    assert _initial_in_worker(tmp_path / "swallows.py", tmp_path) is None  # nothing usable comes back


SCRIPT = textwrap.dedent(
    """
    import gc, json, os, sys, types
    from shardlab.core.devices import setup_devices
    setup_devices(4)
    import shardlab.checker.seal as seal
    import shardlab.learner.reference
    for name in seal.IMPLEMENTATION:
        __import__(name)
    files = {os.path.realpath(sys.modules[m].__file__) for m in seal.IMPLEMENTATION}

    def alive():  # every live function compiled from a module of the course's implementation of the seven
        functions = [f for f in gc.get_objects() if isinstance(f, types.FunctionType)]
        return sorted(
            f"{f.__code__.co_filename}:{f.__qualname__}" for f in functions
            if os.path.realpath(f.__code__.co_filename) in files
        )

    found = {"before": alive()}
    if sys.argv[1] == "seal":
        seal.seal()
    found["after"] = alive()

    def named_tuple():  # a file's own function keeps its defaults to change: typing.NamedTuple sets __new__'s
        import typing

        class Row(typing.NamedTuple):
            x: int = 0

        return Row()

    state = sys.modules["shardlab.core.state"]
    attempts = {
        "reload": lambda: __import__("importlib").reload(state),
        "open": lambda: open(state.__file__, "rb").read(),
        "dir_fd": lambda: os.open("state.py", os.O_RDONLY, dir_fd=os.open(os.path.dirname(state.__file__), 0)),
        "symlink": lambda: (os.symlink(state.__file__, "link.py"), open("link.py").read()),
        "code": lambda: [setattr(f, "__code__", (lambda *a: None).__code__) for f in gc.get_objects()
                         if isinstance(f, types.FunctionType) and f.__code__ is seal._hook.__code__],
        "defaults": lambda: [setattr(f, "__defaults__", f.__defaults__[:2] + ((),) * (len(f.__defaults__) - 2))
                             for f in gc.get_objects()
                             if isinstance(f, types.FunctionType) and f.__code__ is seal._hook.__code__],
        "which": lambda: setattr(seal._which, "__code__", (lambda *a: None).__code__),
        "named_tuple": named_tuple,
        # a program the file starts reads what the hook cannot see: starting one is refused, by either route
        "program": lambda: __import__("subprocess").run(["cat", state.__file__], capture_output=True, check=True),
        "fork_exec": lambda: __import__("_posixsubprocess").fork_exec(),
        "fork": lambda: os._exit(0) if os.fork() == 0 else os.wait(),  # only the checker's forked saves may fork
    }
    found["refused"] = {}
    for what, attempt in attempts.items():
        try:
            attempt()
            found["refused"][what] = False
        except BaseException as exc:
            found["refused"][what] = type(exc).__name__
    try:
        open(state.__file__, "rb").read()
        found["open_after_code"] = False
    except BaseException as exc:
        found["open_after_code"] = type(exc).__name__
    print(json.dumps(found))
    """
)


@pytest.mark.slow  # two fresh interpreters that import the library and JAX
def test_sealed_originals_are_gone_and_their_source_cannot_be_read_again(tmp_path):
    runs = {}
    for mode in ("seal", "control"):
        done = subprocess.run(
            [sys.executable, "-B", "-c", SCRIPT, mode],
            cwd=tmp_path / mode if (tmp_path / mode).mkdir() is None else None,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        runs[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    control, sealed = runs["control"], runs["seal"]
    assert control["after"] == control["before"]  # the scan finds the originals: the seven and their helpers
    for helper in (
        "sampler.py:advance",
        "batch.py:pad",
        "update.py:map_step",
        "files.py:publish_new",
        "state.py:updated",
    ):
        assert any(found.endswith(helper) for found in control["before"]), helper
    assert sealed["before"] == control["before"]
    assert sealed["after"] == []  # none is left: the checker's own guards call none of them (shardlab.io.inside)
    assert not any(control["refused"][what] for what in ("open", "dir_fd", "symlink"))
    guarded = ("reload", "open", "dir_fd", "symlink", "code", "defaults", "which", "program", "fork_exec", "fork")
    assert all(sealed["refused"][what] == "CourseCodeError" for what in guarded), json.dumps(sealed["refused"])
    assert sealed["refused"]["named_tuple"] is False and control["refused"]["named_tuple"] is False
    assert control["refused"]["program"] is False and control["refused"]["fork_exec"] == "TypeError"
    assert control["refused"]["fork"] is False
    assert sealed["open_after_code"] == "CourseCodeError" and control["open_after_code"] is False


def test_a_check_failed_by_the_course_s_code_makes_its_stage_course_code():
    message = seal.MESSAGE.format(function="`initial`", course="shardlab.core.state.initial", what="x")
    assert seal.reached(CourseCodeError(message)) == message
    assert seal.reached(RuntimeError(message)) is None and seal.reached(CourseCodeError("other")) is None
    checks = [{"name": f"c{s}", "stage": s, "passed": True} for s in (1, 2, 3, 4)]
    checks += [{"name": "c1b", "stage": 1, "passed": False, "diagnosis": seal.COURSE_CODE + message}]
    checks += [{"name": "c2b", "stage": 2, "passed": False, "diagnosis": "the weights differ"}]
    rows = grade.stage_rows(bounded.Outcome(0, "", {"checks": checks, "environment": {}}, None, 1.0), 60.0)
    assert [r["verdict"] for r in rows] == ["course code", "fail", "pass", "pass"]
    assert rows[0]["diagnosis"] == message and platforms.stage_points(rows[0]) == 0
    assert platforms.stage_points(rows[2]) > 0
    swallowed = {"checks": checks, "environment": {"course_code": {"3": message}}}  # a reply said so; checks passed
    rows = grade.stage_rows(bounded.Outcome(0, "", swallowed, None, 1.0), 60.0)
    assert [r["verdict"] for r in rows] == ["course code", "fail", "course code", "pass"]
    assert rows[2]["diagnosis"] == message and platforms.stage_points(rows[2]) == 0


HONEST = ("base1", "base2")


@pytest.mark.sandbox
@pytest.mark.slow
def test_grade_gives_nothing_for_the_course_s_code_and_passes_honest_files(tmp_path):
    submissions = tmp_path / "submissions"
    _write(submissions, HEAD)
    for name in HONEST:
        shutil.copy(Path(__file__).parent / "heldout" / f"{name}.py", submissions / f"{name}.py")
    (submissions / "composer.py").write_text(COMPOSER)
    record = grade.grade(submissions, tmp_path / "out", jobs=2)
    rows = {name: entry["rows"] for name, entry in record["submissions"].items()}
    composed = rows["composer.py"]  # every stage it reaches is the course's helpers' work, none the seven
    assert {r["verdict"] for r in composed} <= {"course code", "not reached"}, composed
    assert composed[0]["verdict"] == "course code" and all(platforms.stage_points(r) == 0 for r in composed)
    seven = {f"{module}.{name}" for module, names in seal.SEALED.items() for name in names}
    for row in (r for r in composed if r["verdict"] == "course code"):
        assert seal.reach(seal.COURSE_CODE + row["diagnosis"]).course not in seven, row
    for name in HONEST:
        assert [r["verdict"] for r in rows[f"{name}.py"]] == ["pass"] * 4, rows[f"{name}.py"]
    for name in HEAD:
        mine = rows[f"{name}.py"]
        assert all(platforms.stage_points(r) == 0 for r in mine), mine
        assert {r["verdict"] for r in mine} <= {"course code", "fail", "not reached"}, mine
        if name in REACHED:
            first = next(r for r in mine if r["verdict"] == "course code")
            assert "reached the course's own shardlab." in first["diagnosis"], first


@pytest.mark.slow  # one worker, bounded at 1 s a call
def test_a_time_bound_the_file_catches_still_ends_its_loading(tmp_path):
    marks = tmp_path / "caught.txt"
    path = tmp_path / "slow.py"
    note = f"open({str(marks)!r}, 'a').write(repr(exc) + '\\n')"
    swallow = f"try:\n    time.sleep(30)\nexcept BaseException as exc:\n    {note}\n"
    path.write_text("import time\n\n" + swallow * 2 + "\n\nfrom shardlab.learner.reference import *  # noqa\n")
    worker = remote.Worker(str(path), call_seconds=1, scratch=str(tmp_path))
    try:
        hello = worker.start()
    finally:
        worker.stop()
    caught = marks.read_text().splitlines()
    assert len(caught) == 2 and all(line.startswith("Overrun(") for line in caught), caught  # each sleep was cut
    assert "error" in hello and hello["error"]["known"], hello
    assert hello["error"]["text"].startswith("`importing the file` did not return within 1 s"), hello["error"]


def test_what_the_starter_hands_the_learner_is_never_sealed():
    import ast

    from shardlab.learner import starter

    tree = ast.parse(Path(starter.__file__).with_name("templates").joinpath("starter.py").read_text())
    handed = []  # (module, name) of every course object the starter imports; a module is (its name, "*")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shardlab"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                is_module = node.module == "shardlab" and importlib.util.find_spec(full) is not None
                handed.append((full, "*") if is_module else (node.module, alias.name))
    assert ("shardlab.errors", "*") in handed and ("shardlab.core.batch", "Batch") in handed, handed
    course = seal.sealed()
    for module, name in handed:
        allowed = seal.HANDED.get(module, ())
        assert allowed == "*" or name in allowed, (module, name)
        assert name not in course.get(module, ()) and (name != "*" or module not in course), (module, name)
    assert course["shardlab.core.sampler"] and "advance" in course["shardlab.core.sampler"]  # the seal is not empty
