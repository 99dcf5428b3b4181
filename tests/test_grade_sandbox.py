"""The grader's containment: the sandbox, a row for every entry, bounded reads, source-only loading, platform files."""

import csv
import io
import json
import os
import py_compile
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

import shardlab.checker.sandbox as sandbox
from rig.grade_attacks.attacks import holding
from shardlab import process_group
from shardlab.checker.cli import STAGES, checks_of
from shardlab.errors import ConfigError
from shardlab.handin import autograder, grade, platforms
from shardlab.learner import implementation

ORPHAN = """import os, signal, sys, time
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGALRM, signal.SIGINT):
    signal.signal(s, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", ["/bin/sh", "-c", "trap '' TERM HUP INT; while :; do sleep 1; done; : " + sys.argv[1]])
    os._exit(0)
try:
    open(sys.argv[2], "w").write("forked")
except OSError:  # a sandboxed file's own folder is read-only: its mark is then its command line
    pass
time.sleep(600)
"""


def _wait_for(path: Path, seconds: float = 20.0) -> None:
    end = time.time() + seconds
    while not path.exists():
        assert time.time() < end, f"{path} never appeared"
        time.sleep(0.05)


def _gone(token: str, seconds: float = 5.0) -> list[int]:
    end = time.time() + seconds
    while (left := holding(token)) and time.time() < end:
        time.sleep(0.1)
    return left


@pytest.mark.sandbox
def test_every_descendant_dies_with_the_sandbox(tmp_path):
    script, token = tmp_path / "orphan.py", f"orphan-token-{os.getpid()}-{time.time_ns()}"
    script.write_text(ORPHAN)
    flag = tmp_path / "forked"
    box = sandbox.Sandbox(readable=[tmp_path], writable=[tmp_path])
    process = sandbox.spawn([sys.executable, "-B", str(script), token, str(flag)], box)
    _wait_for(flag)
    time.sleep(0.5)
    assert holding(token), "the double-forked, setsid, signal-ignoring grandchild runs before the kill"
    process_group.kill(process)
    assert not _gone(token), "no descendant outlives the sandbox"


@pytest.mark.sandbox
def test_the_sandbox_dies_with_its_caller(tmp_path):
    """SIGKILL of the process that started the sandbox (grade itself) ends everything inside it."""
    script, token = tmp_path / "orphan.py", f"caller-token-{os.getpid()}-{time.time_ns()}"
    script.write_text(ORPHAN)
    flag = tmp_path / "forked"
    caller = (
        "import sys, time; from shardlab.checker import sandbox\n"
        f"b = sandbox.Sandbox(readable=[{str(tmp_path)!r}], writable=[{str(tmp_path)!r}])\n"
        f"sandbox.spawn([sys.executable, '-B', {str(script)!r}, {token!r}, {str(flag)!r}], b)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", caller], env={**os.environ})
    try:
        _wait_for(flag)
        time.sleep(0.5)
        assert holding(token)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert not _gone(token), "the sandbox's processes die with its caller"
    finally:
        parent.kill()


@pytest.mark.sandbox
def test_a_check_stops_with_the_process_that_started_it(tmp_path):
    """grade killed (SIGKILL) mid-check: the supervisor notices and ends the sandbox and all it started."""
    token = f"supervised-token-{os.getpid()}-{time.time_ns()}"
    flag = tmp_path / "forked"
    spec = tmp_path / "orphan_on_import.py"
    body = ORPHAN.replace("sys.argv[1]", repr(token)).replace("sys.argv[2]", repr(str(flag)))
    spec.write_text(body)  # forks on import, then sleeps there: the check is still running when its caller dies
    caller = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-m', 'shardlab', 'check', '--implementation', {str(spec)!r}, "
        "'--stage', '1', '--sandbox'], start_new_session=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", caller], env={**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        end = time.time() + 180  # the sandbox's folder is read-only for the file: its mark is its command line
        while not holding(token):
            assert time.time() < end, "the orphan never started"
            time.sleep(0.1)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert not _gone(token, 5), "the orphan died with the check whose caller died"
    finally:
        parent.kill()


@pytest.mark.sandbox
def test_the_sandbox_sees_only_what_it_is_given(tmp_path):
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    (other / "secret.py").write_text("secret")
    (mine / "own.py").write_text("own")
    marker = Path(f"/tmp/shardlab-sandbox-marker-{os.getpid()}")
    marker.write_text("the host's /tmp")
    home = os.path.realpath(os.path.expanduser("~"))
    # the installation's own site-packages (pyenv's, under the home folder here), which this venv does not read
    base_site = os.path.join(
        sys.base_prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages"
    )
    probe = f"""import os, socket
seen = {{}}
seen["home"] = sorted(os.listdir({home!r})) if os.path.isdir({home!r}) else []
seen["install"] = sorted(os.listdir({sys.base_prefix!r}))
seen["base_site"] = sorted(os.listdir({base_site!r})) if os.path.isdir({base_site!r}) else []
seen["other"] = os.path.exists({str(other / "secret.py")!r})
seen["own"] = open({str(mine / "own.py")!r}).read()
try:
    open({str(mine / "own.py")!r}, "w"); seen["own_writable"] = True
except OSError:
    seen["own_writable"] = False
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3); seen["network"] = True
except OSError:
    seen["network"] = False
seen["tmp"] = os.path.exists({str(marker)!r})
seen["passwd"] = os.path.exists("/etc/passwd")
seen["pid"] = os.getpid()
print(repr(seen))
"""
    try:
        done = subprocess.run(
            sandbox.command([sys.executable, "-B", "-c", probe], sandbox.Sandbox(readable=[mine])),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        marker.unlink()
    seen = eval(done.stdout)  # noqa: S307 (our own probe's repr of plain values)
    assert seen["own"] == "own" and not seen["own_writable"] and not seen["other"]
    assert not seen["network"] and not seen["tmp"] and not seen["passwd"] and seen["pid"] < 10
    # of the home folder, only the folders on the way to what the interpreter needs (pyenv's installation, the
    # venv, the checkout) are there, as empty mount points: no dotfile, no cache, no credentials
    needed = {sys.base_prefix, sys.prefix, str(REPO)}
    on_the_way = {Path(p).relative_to(home).parts[0] for p in map(os.path.realpath, needed) if p.startswith(home + "/")}
    assert set(seen["home"]) <= on_the_way, set(seen["home"]) - on_the_way
    assert sys.prefix == sys.base_prefix or base_site in sys.path or not seen["base_site"], seen["base_site"][:5]
    assert sys.prefix == sys.base_prefix or set(seen["install"]) <= {"bin", "lib"}, seen["install"]


def test_every_entry_gets_a_row_and_names_are_neutralised(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ok.py").write_text("x = 1\n")
    (subs / "ok.zip").write_text("beside ok.py: its portfolio, not a row")
    (subs / ".hidden.py").write_text("x = 1\n")
    (subs / "UPPER.PY").write_text("x = 1\n")
    (subs / "notes.txt").write_text("x")
    (subs / "empty").mkdir()
    (subs / "pair").mkdir()
    (subs / "pair" / "a.py").write_text("x = 1\n")
    (subs / "pair" / "b.py").write_text("x = 1\n")
    (subs / "linked").mkdir()
    os.symlink("/etc/hostname", subs / "linked" / "model.py")
    os.symlink(subs / "ok.py", subs / "link.py")
    os.mkfifo(subs / "pipe.py")
    (subs / "two\nlines.py").write_text("x = 1\n")
    (subs / "=SUM(A1).py").write_text("x = 1\n")
    found = {row["name"]: row for row in grade.discover(subs)}
    assert set(found) == {
        "ok.py",
        ".hidden.py",
        "UPPER.PY",
        "notes.txt",
        "empty",
        "pair",
        "linked",
        "link.py",
        "pipe.py",
        "two\\nlines.py",
        "=SUM(A1).py",
    }
    gradable = {n for n, r in found.items() if "problem" not in r}
    assert gradable == {"ok.py", "two\\nlines.py", "=SUM(A1).py"}
    assert found["ok.py"]["portfolio"] == subs / "ok.zip"
    assert "FIFO" in found["pipe.py"]["problem"] and "link" in found["link.py"]["problem"]
    assert "link" in found["linked"]["problem"] and "2 .py files" in found["pair"]["problem"]
    folders = [r["folder"] for r in found.values()]
    assert len(set(folders)) == len(folders) and all("/" not in f and "\n" not in f for f in folders)
    assert not any(f.startswith(".") for f in folders)
    table = grade.table_csv([{"submission": "=SUM(A1).py", "diagnosis": "-1", "stage": 1}])
    cells = list(csv.DictReader(io.StringIO(table)))[0]
    assert cells["submission"] == "'=SUM(A1).py" and cells["diagnosis"] == "'-1"


def test_a_portfolio_zip_is_read_within_bounds(tmp_path):
    nested, bomb, fifo = tmp_path / "nested.zip", tmp_path / "bomb.zip", tmp_path / "fifo.zip"
    with zipfile.ZipFile(nested, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("portfolio/portfolio.json", "[" * 100_000 + "]" * 100_000)
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("portfolio/portfolio.json", b" " * 50_000_000)
    os.mkfifo(fifo)
    start = time.perf_counter()
    for path in (nested, bomb, fifo):
        assert grade.portfolio_status(path, "0" * 64).startswith("unreadable"), path
    assert time.perf_counter() - start < 60, "a FIFO never blocks the read"


def test_the_source_is_graded_never_a_planted_pyc(tmp_path):
    rest = "\nnext_batch = make_step = transition = contract = save = restore = initial\n"
    honest = "def initial(seed, data, mesh):\n    return 'source'\n" + rest
    forged = "def initial(seed, data, mesh):\n    return 'forged'\n" + rest
    assert len(honest) == len(forged)
    path = tmp_path / "model.py"
    decoy = tmp_path / "decoy.py"
    path.write_text(honest)
    decoy.write_text(forged)
    st = path.stat()
    os.utime(decoy, ns=(st.st_atime_ns, st.st_mtime_ns))
    cache = tmp_path / "__pycache__" / f"model.{sys.implementation.cache_tag}.pyc"
    py_compile.compile(str(decoy), cfile=str(cache), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    cache_bytes = cache.read_bytes()
    decoy.unlink()
    module = implementation.load(str(path))
    assert module.initial(0, None, None) == "source"
    assert cache.read_bytes() == cache_bytes and sorted(p.name for p in tmp_path.iterdir()) == [
        "__pycache__",
        "model.py",
    ]


def test_grade_refuses_without_a_sandbox_unless_told(tmp_path, monkeypatch):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "empty").mkdir()
    monkeypatch.setattr(sandbox, "unavailable", lambda: "bubblewrap is not installed (test)")
    with pytest.raises(ConfigError, match="bubblewrap is not installed"):
        grade.grade(subs, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    body = grade.grade(subs, tmp_path / "out", unsandboxed=True)
    assert [r["sandbox"] for r in body["submissions"]["empty"]["rows"]] == [grade.UNSANDBOXED] * len(STAGES)
    assert grade.UNSANDBOXED in (tmp_path / "out" / grade.TABLE).read_text()
    assert "without a sandbox" in (tmp_path / "out" / grade.PAGE).read_text()


def _validate_gradescope(found: dict) -> None:
    """Gradescope's published results.json shape (autograder specifications): numbers, statuses, visibilities."""
    visibilities = {"hidden", "after_due_date", "after_published", "visible"}
    assert isinstance(found["score"], (int, float)) and isinstance(found["tests"], list)
    assert found.get("visibility", "visible") in visibilities
    assert found.get("stdout_visibility", "visible") in visibilities
    for test in found["tests"]:
        assert isinstance(test["name"], str) and isinstance(test["output"], str)
        assert isinstance(test["score"], (int, float)) and isinstance(test["max_score"], (int, float))
        assert 0 <= test["score"] <= test["max_score"] and test["status"] in ("passed", "failed")
        assert test["visibility"] in visibilities
    assert abs(found["score"] - sum(t["score"] for t in found["tests"])) < 1e-6


def _validate_prairielearn(found: dict) -> None:
    """PrairieLearn's external-grading results.json: gradable, score in [0, 1], tests with points."""
    assert isinstance(found["gradable"], bool) and 0.0 <= found["score"] <= 1.0
    for test in found.get("tests", []):
        assert isinstance(test["name"], str)
        assert 0 <= test["points"] <= test["max_points"]


def _rows(passed: dict, verdicts: dict) -> list[dict]:
    return [
        {
            "submission": "alice.py",
            "stage": s,
            "verdict": verdicts[s],
            "passed": passed[s],
            "checks": passed[s],
            "first_failure": "",
            "diagnosis": "",
            "sandbox": "yes",
        }
        for s in sorted(STAGES)
    ]


def test_platform_files_have_the_published_shapes_and_one_weights_table(tmp_path):
    full = {s: len(checks_of(s)) for s in STAGES}
    half = {1: full[1], 2: full[2] // 2, 3: 0, 4: 0}
    rows = _rows(half, {1: "pass", 2: "fail", 3: "not reached", 4: "not reached"})
    expected = 25.0 + 25.0 * (full[2] // 2) / full[2]
    body = {"submissions": {"alice.py": {"sha256": "a" * 64, "folder": "alice.py", "rows": rows}}}
    platforms.write_all(tmp_path, body)
    scope = json.loads((tmp_path / "gradescope" / "alice.py.json").read_text())
    _validate_gradescope(scope)
    assert (
        abs(scope["score"] - expected) < 0.02 and [t["status"] for t in scope["tests"]] == ["passed"] + ["failed"] * 3
    )
    learn = json.loads((tmp_path / "prairielearn" / "alice.py.json").read_text())
    _validate_prairielearn(learn)
    assert learn["gradable"] and abs(learn["score"] - expected / 100) < 1e-3
    (line,) = list(csv.DictReader(io.StringIO((tmp_path / "lms.csv").read_text())))
    assert abs(float(line["points"]) - expected) < 0.02 and float(line["out_of"]) == 100.0
    blocked = platforms.prairielearn(_rows({s: 0 for s in STAGES}, {s: "not gradable" for s in STAGES}))
    _validate_prairielearn(blocked)
    assert blocked["gradable"] is False and blocked["score"] == 0.0


@pytest.mark.slow  # a bundle built and run: make test's, not the inner loop's
def test_the_autograder_bundle_runs_in_gradescopes_layout(tmp_path):
    bundle = autograder.bundle(tmp_path / "bundle", REPO)
    root = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
        assert {"setup.sh", "run_autograder", "requirements-cpu.txt", "pyproject.toml"} <= names
        assert "lib/shardlab/checker/cli.py" in names and not any("__pycache__" in n for n in names)
        archive.extractall(root / "source")
    (root / "submission").mkdir()
    (root / "submission" / "model.py").write_text("def initial(seed, data, mesh:\n    pass\n")
    (root / "venv").symlink_to(sys.prefix, target_is_directory=True)  # setup.sh's venv: this test's own
    env = {**os.environ, "AUTOGRADER_ROOT": str(root)}
    env["PYTHONPATH"] = f"{root / 'source' / 'lib'}"
    done = subprocess.run(
        ["bash", str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads((root / "results" / "results.json").read_text())
    _validate_gradescope(found)
    assert found["score"] == 0 and "implementation_loads" in found["tests"][0]["output"]
    assert not list((root / "submission").glob("__pycache__")), "nothing written beside the submission"


@pytest.mark.sandbox
def test_the_reduced_attack_campaign_holds(tmp_path):
    from rig.grade_attacks.__main__ import run

    found = run(tmp_path / "campaign", reduced=True, timeout=120.0, jobs=2, receipts=None)  # portfolio: own tests
    failed = [r for r in found if not r["as_expected"]]
    assert not failed, failed
    names = {r["attack"] for r in found}
    assert {"orphan_and_rewriter", "sibling_overwrite", "pyc_shadowing", "honest:honest_stub.py"} <= names


SANDBOXED_HOSTILE = {  # body of `initial` -> the verdict the supervisor must give it from outside the sandbox
    "memory": ("    hog = []\n    while True:\n        hog.append(np.ones(10**7))", "`initial` used more than 300 MB"),
    "loop": ("    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    while True:\n        pass", "did not return"),
}


@pytest.mark.sandbox
@pytest.mark.parametrize("kind", sorted(SANDBOXED_HOSTILE))
def test_the_supervisor_bounds_a_sandboxed_interpreter(tmp_path, kind):
    """Memory is read from the sandboxed interpreter's host pid; a loop ignoring SIGALRM is stopped from outside."""
    from argparse import Namespace

    from shardlab.checker import command, watch

    body, verdict = SANDBOXED_HOSTILE[kind]
    spec = tmp_path / f"{kind}.py"
    spec.write_text(
        "import signal\n\nimport numpy as np\n\nfrom shardlab.learner.reference import *  # noqa\n\n\n"
        f"def initial(seed, data, mesh):\n{body}\n"
    )
    bounds = watch.Bounds(60 if kind == "memory" else 2, 300 * 1024**2, 200_000, 240, sandboxed=True)
    out = tmp_path / "out"
    assert command.main(Namespace(implementation=str(spec), stage="1", only=True, output=str(out), bounds=bounds)) == 1
    report = json.loads((out / command.REPORT).read_text())
    first = report["checks"][0]
    assert first["name"] == "initial_state_fields" and verdict in first["diagnosis"], first
    assert report["implementation_sha256"] == grade.sha256_file(spec)


SWALLOW = (  # a loop that catches every stop, Overrun included, and says so on the console
    "    while True:\n        try:\n            time.sleep(1000)\n"
    "        except BaseException:\n            print('swallowed a stop', flush=True)\n"
)


@pytest.mark.sandbox
@pytest.mark.parametrize("where", ["import", "initial"])
def test_a_call_that_swallows_every_stop_ends_within_its_bound(tmp_path, where):
    """Code that catches every repeated alarm (at import, or in a call) holds its slot for the call bound and a few
    repeats, not the run's: its interpreter is ended after guard.ENDED_AFTER caught stops, and the verdict says so."""
    from argparse import Namespace

    from shardlab.checker import command, guard, watch

    spec = tmp_path / f"swallow_{where}.py"
    head = "import time\n\nfrom shardlab.learner.reference import *  # noqa\n\n\n"
    spec.write_text(
        head + ("if True:\n" + SWALLOW if where == "import" else "def initial(seed, data, mesh):\n" + SWALLOW)
    )
    bounds = watch.Bounds(2, 2 * 1024**3, 200_000, 240, sandboxed=True)
    out = tmp_path / "out"
    assert command.main(Namespace(implementation=str(spec), stage="1", only=True, output=str(out), bounds=bounds)) == 1
    first = json.loads((out / command.REPORT).read_text())["checks"][0]
    function = "importing the file" if where == "import" else "initial"
    assert first["name"] == ("implementation_loads" if where == "import" else "initial_state_fields"), first
    assert f"`{function}` did not return within its time bound and caught every stop" in first["diagnosis"], first
    # the stops it caught, counted from its own lines: the bound's alarm and its repeats, then the end
    caught = (out / watch.LOG).read_text().count("swallowed a stop")
    assert 1 <= caught <= guard.ENDED_AFTER, caught


def test_the_supervisor_accepts_exactly_the_fields_of_a_result():
    """The progress channel's shape check names the same fields as the report's Result, no more, no fewer."""
    from dataclasses import MISSING, asdict, fields

    from shardlab.checker import cli, watch

    declared = {f.name: f for f in fields(cli.Result)}
    optional = {n for n, f in declared.items() if f.default is not MISSING}
    assert set(watch.RESULT_OPTIONAL) == optional
    assert set(watch.RESULT_FIELDS) | set(watch.RESULT_VALUES) == set(declared) - optional
    good = asdict(cli.Result("a_check", 1, True, 1, 1, "", 0.5))
    assert watch._shaped(good)
    assert not watch._shaped({**good, "extra": 1}) and not watch._shaped({**good, "stage": "1"})
    assert not watch._shaped({k: v for k, v in good.items() if k != "observed"})


def _tree(root: int) -> list[tuple[int, str]]:
    """(pid, state) of every descendant of `root`, read from /proc (independently of the sandbox module)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    children = [int(c) for c in handle.read().split()]
            except OSError:
                continue
            for child in children:
                try:
                    with open(f"/proc/{child}/stat") as handle:
                        found.append((child, handle.read().rsplit(")", 1)[1].split()[0]))
                except OSError:
                    continue
                todo.append(child)
    return found


def _slow_down(share: float, period: float, done, cycles: list) -> None:
    """Until `done` is set, stop every process this test started `share` of each `period` (SIGSTOP, then SIGCONT):
    they run as on a machine busy with other work, while this process, which holds grade's bound, runs freely. A
    process found stopped already (the checker stops its worker between calls) is left as it is; one the checker
    stops while it is held here is continued with the rest, which a correct file, running nothing between its
    calls, does not notice."""
    while not done.is_set():
        stopped = [pid for pid, state in _tree(os.getpid()) if state not in "tT"]
        process_group.signal_pids(stopped, signal.SIGSTOP)
        time.sleep(share * period)
        process_group.signal_pids(stopped, signal.SIGCONT)
        cycles.append(len(stopped))
        time.sleep((1 - share) * period)


@pytest.mark.sandbox
def test_a_correct_file_checked_on_a_slowed_machine_passes_or_times_out(tmp_path):
    """Slowed down (every process of its check stopped three quarters of the time), the course's correct file still
    passes every stage 3 check, or is stopped at a time bound and says so: never a failed check of its correctness.
    Stage 3 starts a fresh interpreter beside the run's two lanes of checks, where speed once decided a verdict."""
    import threading

    from shardlab.checker import watch
    from shardlab.handin import bounded

    copy = grade.private_copy(REPO / "tests" / "heldout" / "base3.py", tmp_path / "source", grade.SOURCE_BYTES)
    done, cycles = threading.Event(), []
    slower = threading.Thread(target=_slow_down, args=(0.75, 0.05, done, cycles))
    slower.start()
    try:
        outcome = bounded.check(str(copy), tmp_path / "run", timeout=900, stage=3, sandboxed=True, graded=True)
    finally:
        done.set()
        slower.join()
    assert any(cycles), "the check's processes were never stopped: nothing was slowed"
    if outcome.stopped == "timeout":  # grade's own bound: a time-out, as its row says
        return
    assert outcome.stopped is None and outcome.report, outcome.output[-2000:]
    checks = [c for c in outcome.report["checks"] if c["stage"] == 3]
    assert [c["name"] for c in checks] == [check.__name__ for check in checks_of(3)]
    failed = [(c["name"], c["diagnosis"]) for c in checks if not c["passed"]]
    assert all(watch.timed_out(diagnosis) for _, diagnosis in failed), failed
