"""The one runner of stage 5's controller groups: a child and whatever it starts in its group die together."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ended, proc_state, running, until

from shardlab import process_group

# a child that starts a grandchild in its own process group, prints the grandchild's pid, then waits
PARENT = """import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def _spawn_parent() -> tuple[subprocess.Popen, int]:
    process = process_group.spawn([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    return process, int(process.stdout.readline())


def test_a_child_leads_its_own_group_and_kill_ends_its_grandchild_too():
    process, grandchild = _spawn_parent()
    try:
        assert os.getpgid(process.pid) == process.pid != os.getpgid(0)
        assert os.getpgid(grandchild) == process.pid and running(grandchild)
        process_group.kill(process)
        assert process.returncode == -9 and process not in process_group.LIVE
        assert ended([grandchild]), "the grandchild in the child's group outlived the kill"
    finally:
        process.stdout.close()


def test_kill_takes_several_groups_and_one_that_ended_already():
    first, second = _spawn_parent(), _spawn_parent()
    done = process_group.spawn([sys.executable, "-c", "pass"])
    done.wait()
    process_group.kill(first[0], second[0], done)
    assert (first[0].returncode, second[0].returncode, done.returncode) == (-9, -9, 0)
    assert ended([first[1], second[1]])
    assert not {first[0], second[0], done} & process_group.LIVE
    for process, _ in (first, second):
        process.stdout.close()


def test_stop_all_ends_every_child_still_running():
    children = [_spawn_parent() for _ in range(2)]
    assert {p for p, _ in children} <= process_group.LIVE
    process_group.stop_all()
    assert not {p for p, _ in children} & process_group.LIVE
    assert [p.returncode for p, _ in children] == [-9, -9]
    assert ended([pid for p, _ in children for pid in (p.pid, _)])
    for process, _ in children:
        process.stdout.close()


def test_signal_reaches_the_whole_group_and_reports_a_group_that_ended():
    process, grandchild = _spawn_parent()
    try:
        assert process_group.signal(process, signal.SIGSTOP) is True
        assert until(lambda: proc_state(process.pid) == proc_state(grandchild) == "T"), "the group was not stopped"
        assert process_group.signal(process, signal.SIGCONT) is True
        assert until(lambda: "T" not in (proc_state(process.pid), proc_state(grandchild)))
    finally:
        process_group.kill(process)
        process.stdout.close()
    assert ended([grandchild])
    done = process_group.spawn([sys.executable, "-c", "pass"])  # a group of one, ended and reaped
    done.wait()
    assert process_group.signal(done, signal.SIGCONT) is False
    process_group.kill(done)


def test_signal_pids_reaches_only_the_pids_named_in_any_session_and_passes_over_one_that_ended():
    process, grandchild = _spawn_parent()  # the same group: a group signal would stop both
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    reaped = subprocess.Popen([sys.executable, "-c", "pass"])
    reaped.wait()  # reaped: its pid names no process
    try:
        process_group.signal_pids([reaped.pid, grandchild, other.pid], signal.SIGSTOP)
        assert until(lambda: proc_state(grandchild) == "T" and proc_state(other.pid) == "T"), "a named process ran on"
        assert proc_state(process.pid) != "T", "a process not named was stopped with it"
        process_group.signal_pids([grandchild], signal.SIGCONT)
        assert until(lambda: proc_state(grandchild) != "T")
        process_group.signal_pids([reaped.pid, other.pid], signal.SIGKILL)
        assert other.wait(timeout=30) == -signal.SIGKILL
    finally:
        process_group.kill(process)
        process.stdout.close()
        other.kill()
        other.wait()
    assert ended([grandchild])


def test_a_child_not_remembered_outlives_stop_all_and_kill_ends_it():
    server = process_group.spawn([sys.executable, "-c", "import time; time.sleep(600)"], remembered=False)
    try:
        assert os.getpgid(server.pid) == server.pid and server not in process_group.LIVE
        process_group.stop_all()
        assert server.poll() is None and running(server.pid), "stop_all ended a child it was told to leave"
    finally:
        process_group.kill(server)
    assert server.returncode == -9


def test_until_returns_the_reason_and_leaves_nothing_of_the_group_running():
    process, grandchild = _spawn_parent()
    asked = []

    def stop():
        asked.append(running(grandchild))
        return "over the bound" if len(asked) == 3 else None

    try:
        assert process_group.until(process, stop, 0.01) == "over the bound"
        assert asked == [True, True, True]  # asked at each look until it gave a reason, the group running meanwhile
        assert process.returncode == -9 and process not in process_group.LIVE
        assert ended([grandchild]), "the grandchild outlived the bounded wait"
    finally:
        process.stdout.close()


def test_until_returns_none_for_a_child_that_ends_and_kills_the_group_when_the_test_raises():
    done = process_group.spawn([sys.executable, "-c", "pass"])
    assert process_group.until(done, lambda: None, 0.01) is None and done.returncode == 0
    process, grandchild = _spawn_parent()

    def refuse():
        raise KeyboardInterrupt

    try:
        try:
            process_group.until(process, refuse, 0.01)
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError("until swallowed the exception its test raised")
        assert process.returncode == -9 and ended([grandchild])
    finally:
        process.stdout.close()


# a child that starts a grandchild in a session of its own, writing to the shared log until killed
ESCAPER = """import subprocess, sys, time
child = subprocess.Popen(
    [sys.executable, "-c", "import time\\nwhile True:\\n    print('A' * 200, flush=True)\\n    time.sleep(0.001)"],
    start_new_session=True,
)
print(child.pid, flush=True)
time.sleep(600)
"""


def _escaped_pid(log) -> int | None:
    """The grandchild's pid: the log's one numeric token (the grandchild may write its lines before its parent
    prints the pid)."""
    return next((int(token) for token in log.read_text().split() if token.isdigit()), None)


def test_release_ends_a_writer_the_group_kill_missed_and_spares_a_reader(tmp_path):
    log = tmp_path / "log"
    with open(log, "ab") as out:
        process = process_group.spawn([sys.executable, "-c", ESCAPER], stdout=out)
    reader = subprocess.Popen(["tail", "-f", str(log)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while (log.stat().st_size < 500 or _escaped_pid(log) is None) and time.monotonic() < deadline:
            time.sleep(0.05)
        escaped = _escaped_pid(log)
        assert escaped is not None, "the escaper never printed its grandchild's pid"
        process_group.kill(process)
        time.sleep(0.2)
        assert running(escaped), "the grandchild should have escaped the group kill for this test to mean anything"
        process_group.release(str(log))
        assert not running(escaped)
        size = log.stat().st_size
        time.sleep(0.2)
        assert log.stat().st_size == size  # nothing writes to it any more
        assert reader.poll() is None  # a process that only reads the file is not touched
    finally:
        reader.kill()
        reader.wait()
        if (escaped := _escaped_pid(log)) is not None and running(escaped):
            os.kill(escaped, signal.SIGKILL)


def test_run_returns_what_subprocess_run_would_and_leaves_nothing_running():
    before = set(process_group.LIVE)
    done = process_group.run(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    assert process_group.LIVE == before


def test_run_past_its_timeout_kills_the_whole_group_and_raises_with_the_output_so_far():
    before = set(process_group.LIVE)
    try:
        process_group.run([sys.executable, "-c", PARENT], timeout=2, capture_output=True, text=True)
    except subprocess.TimeoutExpired as exc:
        grandchild = int(exc.stdout.split()[0])
    else:
        raise AssertionError("a child sleeping 600 s ended within a 2 s timeout")
    assert ended([grandchild]), "the grandchild in the child's group outlived the timeout"
    assert process_group.LIVE == before


# a child that says it is ready, then answers each line it reads; PR_SET_PDEATHSIG asks Linux to kill it when its
# parent ends, as bwrap --die-with-parent, the checker's worker and its fork server do
ANSWERS = """import sys
print("ready", flush=True)
for line in sys.stdin:
    print("here", flush=True)
"""
DIES_WITH_PARENT = "import ctypes, signal\nctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n" + ANSWERS


def _started_by_a_thread_that_ends(start) -> subprocess.Popen:
    """`start(**popen)` called by a short-lived thread that ends only once the child is ready, read from the
    thread's own id in /proc: the thread is gone (and what its end does to the child, done) when this returns."""
    import threading

    found = {}

    def launch():
        found["child"] = start(stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        found["ready"] = found["child"].stdout.readline()
        found["thread"] = threading.get_native_id()

    thread = threading.Thread(target=launch)
    thread.start()
    thread.join()
    while os.path.exists(f"/proc/self/task/{found['thread']}"):  # join returns a moment before the thread ends
        time.sleep(0.01)
    assert found["ready"] == "ready\n"
    return found["child"]


def _dies_with_its_parent(how: str):
    """A start of the child: it asks for PR_SET_PDEATHSIG itself, or bwrap --die-with-parent runs it."""
    if how == "prctl":
        return lambda **popen: process_group.spawn([sys.executable, "-c", DIES_WITH_PARENT], **popen)
    import shardlab.checker.sandbox as sandbox

    inner = [sys.executable, "-c", ANSWERS]
    return lambda **popen: sandbox.spawn(inner, sandbox.Sandbox(), **popen)


@pytest.mark.parametrize("how", ["prctl", pytest.param("bwrap", marks=pytest.mark.sandbox)])
def test_a_child_that_dies_with_its_parent_outlives_the_thread_that_asked_for_it(how):
    """Linux kills such a child when the *thread* that started it ends: spawn's own thread lasts as long as this
    process, so a child asked for by a background thread (the checker's early and fresh workers, in bwrap) lives
    until its owner ends it."""
    child = _started_by_a_thread_that_ends(_dies_with_its_parent(how))
    try:
        child.stdin.write("are you there?\n")
        child.stdin.flush()
        assert child.stdout.readline() == "here\n" and child.poll() is None, child.returncode
    finally:
        process_group.kill(child)
