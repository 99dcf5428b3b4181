"""The warm worker: every learner file is loaded by a fork of one server, and no file's doings reach the next.

The server (checker/forkserver.py) imports JAX and the worker's modules once; each start is a fork of
it from before any learner file ran. What a file does to its own interpreter (a builtin, a NumPy or
JAX attribute, a course module's function, the environment) must be invisible to the next file, and a
forked worker must say hello exactly as a new interpreter does.
"""

import os
import signal
import subprocess
import textwrap

import conftest
import pytest
from conftest import ended

import shardlab.checker.cli as runner
import shardlab.checker.early as early
import shardlab.checker.forkserver as forkserver
import shardlab.checker.remote as remote
import shardlab.checker.sandbox as sandbox

OBSERVE = textwrap.dedent(
    """
    import builtins
    import os

    import jax.numpy
    import numpy

    import shardlab.core.batch
    import shardlab.learner.reference
    from shardlab.learner.reference import *  # noqa: F401,F403


    def contract(data, config):
        return {
            "builtin": hasattr(builtins, "PLANTED"),
            "numpy": hasattr(numpy, "PLANTED"),
            "jax": jax.numpy.mean.__name__ == "planted",
            "course": shardlab.core.batch.next_batch.__name__ == "planted",
            "reference": shardlab.learner.reference.next_batch.__name__ == "planted",
            "environment": "PLANTED" in os.environ,
            "parent": os.getppid(),
            "started": {k: v for k, v in os.environ.items() if k.startswith(("JAX_", "XLA_", "TF_", "TPU_", "PYTHON"))},
            "main": __import__("sys").modules["__main__"].__spec__.name,
            "path": __import__("sys").path[0],
            "cwd": os.getcwd(),
        }
    """
)
PLANT = textwrap.dedent(
    """

    def planted(*args, **kwargs):
        raise RuntimeError("planted by another file")


    builtins.PLANTED = numpy.PLANTED = True
    jax.numpy.mean = shardlab.core.batch.next_batch = shardlab.learner.reference.next_batch = planted
    os.environ["PLANTED"] = "1"
    """
)
CHANGES = ("builtin", "numpy", "jax", "course", "reference", "environment")


@pytest.fixture
def server(monkeypatch):
    monkeypatch.delenv(forkserver.OFF, raising=False)
    found = early.warm()
    assert found is not None and found.process.poll() is None
    return found


def observed(spec, scratch) -> tuple[dict, object]:
    impl = remote.RemoteImplementation(remote.Worker(str(spec), call_seconds=60, scratch=str(scratch)))
    try:
        assert "error" not in impl.worker.start()
        return impl.contract(None, None), impl.worker.process
    finally:
        impl.close()


def test_a_file_that_changes_its_interpreter_leaves_the_next_file_untouched(tmp_path, server):
    planter, observer = tmp_path / "planter.py", tmp_path / "observer.py"
    planter.write_text(OBSERVE + PLANT)
    observer.write_text(OBSERVE)
    first, first_process = observed(planter, tmp_path)
    after, after_process = observed(observer, tmp_path)
    assert isinstance(first_process, forkserver.Forked) and isinstance(after_process, forkserver.Forked)
    assert first["parent"] == after["parent"] == server.process.pid  # both forks of the one server
    assert first_process.pid != after_process.pid
    assert all(first[change] for change in CHANGES), first  # the planter's changes are seen where it runs
    assert not any(after[change] for change in CHANGES), after  # and nowhere else


def test_a_verdict_does_not_depend_on_the_file_checked_before_it(tmp_path, server):
    """The reference is the course's own module: a file that replaced its functions before must not fail it."""
    planter = tmp_path / "planter.py"
    planter.write_text(OBSERVE + PLANT + "\nnext_batch = planted\n")
    kept = {"batch_lengths_keep_the_remainder", "next_batch_leaves_step_alone"}
    skip = [check.__name__ for check in runner.checks_of(1) if check.__name__ not in kept]
    planted = runner.run_checks(str(planter), 1, only=True, skip=skip)
    reference = runner.run_checks("reference", 1, only=True, skip=skip)
    assert {r.name for r in planted} == {r.name for r in reference} == kept
    assert not any(r.passed for r in planted), [r.name for r in planted if r.passed]
    assert all(r.passed for r in reference), [(r.name, r.diagnosis) for r in reference if not r.passed]


@pytest.mark.slow  # a new server and a new worker interpreter, each importing JAX: make test's, not the inner loop's
def test_a_forked_worker_is_the_interpreter_a_new_one_would_be(tmp_path, monkeypatch):
    """The same hello, environment and `__main__`, also when the caller lacks what JAX's import sets itself."""
    spec = tmp_path / "observer.py"
    spec.write_text(OBSERVE)
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)  # `import jax` sets it if unset
    monkeypatch.delenv(forkserver.OFF, raising=False)
    monkeypatch.setattr(forkserver, "_SERVER", [])
    monkeypatch.setattr(conftest, "LAZY_SERVER", [])  # no server but this test's
    server = early.warm()  # started without it, as `python -m shardlab.checker` starts its server
    hellos, seen = {}, {}
    try:
        for how, servers in (("forked", [server]), ("new", [])):
            monkeypatch.setattr(forkserver, "_SERVER", servers)
            impl = remote.RemoteImplementation(remote.Worker(str(spec), scratch=str(tmp_path)))
            try:
                hellos[how] = impl.worker.start()
                kind = type(impl.worker.process)
                seen[how] = impl.contract(None, None)
            finally:
                impl.close()
            assert kind is (forkserver.Forked if servers else subprocess.Popen)
    finally:
        server.close()
    for hello, found in zip(hellos.values(), seen.values()):
        assert hello.pop("pid") > 0 and "error" not in hello and found.pop("parent") > 0
    assert hellos["forked"] == hellos["new"]
    assert hellos["new"]["environment"]["devices"] == 4 and hellos["new"]["environment"]["platform"] == "cpu"
    assert seen["forked"] == seen["new"]
    assert seen["new"]["main"] == "shardlab.checker.worker" and "TF_CPP_MIN_LOG_LEVEL" in seen["new"]["started"]
    assert seen["new"]["path"] == seen["new"]["cwd"] == str(tmp_path)  # it starts in, and imports from, its folder


def test_an_environment_the_server_did_not_start_with_gets_a_new_interpreter(tmp_path, server, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")  # read when XLA starts
    worker = remote.Worker("reference", scratch=str(tmp_path))
    try:
        assert "error" not in worker.start()
        assert type(worker.process) is subprocess.Popen
    finally:
        worker.stop()


@pytest.mark.slow  # a new server, importing JAX: make test's, not the inner loop's
def test_a_worker_ends_with_its_server(tmp_path):
    env = sandbox.environment(early.environment(None, [str(tmp_path)]))
    server = forkserver.Server(env)
    inbound, outbound = os.pipe(), os.pipe()  # the channel: the worker reads one and writes the other
    try:
        request = {"implementation": "reference", "call_seconds": 5.0, "poison": "{}", "env": env, "cwd": str(tmp_path)}
        forked = server.launch(request, inbound[0], outbound[1])
        assert forked is not None and forked.poll() is None
        os.kill(server.process.pid, signal.SIGKILL)
        assert forked.wait(timeout=60) == -signal.SIGKILL
        assert ended([forked.pid], seconds=30)  # PR_SET_PDEATHSIG: the worker was killed with its server
    finally:
        for descriptor in (*inbound, *outbound):
            os.close(descriptor)
        server.close()


@pytest.mark.slow  # two new servers, each importing JAX: make test's, not the inner loop's
def test_a_server_killed_from_outside_is_started_again(tmp_path, monkeypatch):
    monkeypatch.delenv(forkserver.OFF, raising=False)
    monkeypatch.setattr(forkserver, "_SERVER", [])
    first = early.warm()
    try:
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait()
        worker = remote.Worker("reference", scratch=str(tmp_path))
        try:
            assert "error" not in worker.start()
            assert isinstance(worker.process, forkserver.Forked)
            again = forkserver._SERVER[0]
            assert again is not first and again.process.poll() is None
        finally:
            worker.stop()
    finally:
        forkserver.stop()


@pytest.mark.slow  # a new server, importing JAX: make test's, not the inner loop's
def test_a_lazy_server_starts_at_the_first_launch_only(tmp_path, monkeypatch):
    """The suite's fork server (conftest.py) starts at the first file a test checks, from the environment kept."""
    monkeypatch.delenv(forkserver.OFF, raising=False)
    monkeypatch.setattr(forkserver, "_SERVER", [])
    monkeypatch.setattr(conftest, "LAZY_SERVER", [early.server_environment()])
    monkeypatch.setattr(forkserver, "launch", conftest._starting_the_server(forkserver.launch))
    try:
        assert forkserver._SERVER == []  # nothing started yet
        worker = remote.Worker("reference", scratch=str(tmp_path))
        try:
            assert "error" not in worker.start()
            assert isinstance(worker.process, forkserver.Forked)
            assert len(forkserver._SERVER) == 1 and conftest.LAZY_SERVER == []
        finally:
            worker.stop()
    finally:
        forkserver.stop()
