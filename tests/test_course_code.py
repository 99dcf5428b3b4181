"""Graded, a file that calls the course's own seven functions at run time is seen, whatever route reached them.

The routes are ones the syntax tree cannot follow (checker/provenance.py): a helper with `importlib`,
`sys.modules`, `getattr` on `shardlab` itself, the reference's source executed again, and a file that
swallows what the course's code raised. Each is checked against what the same call gives unsealed (the
course's real result), and the originals' absence is checked by scanning every live object for a function
compiled from the course's files, not by asking the seal.
"""

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
from shardlab.core.config import NUM_DEVICES
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
    files = {os.path.realpath(sys.modules[m].__file__): names for m, names in seal.SEALED.items()}

    def alive():  # every live function compiled from a sealed module under a sealed name
        functions = [f for f in gc.get_objects() if isinstance(f, types.FunctionType)]
        return sorted(
            f"{f.__code__.co_filename}:{f.__name__}" for f in functions
            if f.__name__ in files.get(os.path.realpath(f.__code__.co_filename), ())
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
    assert len(control["before"]) >= 8 and control["after"] == control["before"]  # the scan finds the originals
    assert sealed["before"] == control["before"] and sealed["after"] == []
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
    record = grade.grade(submissions, tmp_path / "out", jobs=2)
    rows = {name: entry["rows"] for name, entry in record["submissions"].items()}
    for name in HONEST:
        assert [r["verdict"] for r in rows[f"{name}.py"]] == ["pass"] * 4, rows[f"{name}.py"]
    for name in HEAD:
        mine = rows[f"{name}.py"]
        assert all(platforms.stage_points(r) == 0 for r in mine), mine
        assert {r["verdict"] for r in mine} <= {"course code", "fail", "not reached"}, mine
        if name in REACHED:
            first = next(r for r in mine if r["verdict"] == "course code")
            assert "reached the course's own shardlab." in first["diagnosis"], first
