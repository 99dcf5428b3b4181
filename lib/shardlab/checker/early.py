"""The implementation's interpreter, started before the checking interpreter has imported JAX.

Both interpreters spend their first seconds importing JAX and starting XLA. Started one after the
other, the checking interpreter's start and the worker's add up; `python -m shardlab.checker` therefore
makes the run's scratch folders and launches the first worker (`launch`) before its own heavy imports,
and `checker/remote.py` adopts that process for the first call. Nothing here imports JAX, NumPy or a
check; the worker it starts is exactly the one `remote.Worker.start` would start (one command, one
environment), so only when it starts changes, never what it runs.
"""

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

import shardlab.checker.compile_cache as compile_cache
import shardlab.checker.forkserver as forkserver
import shardlab.checker.sandbox as sandbox
from shardlab.learner.implementation import REACHED_ENV


@dataclass
class Launched:
    """A worker process whose hello has not been read yet, and its two ends of the channel."""

    process: "subprocess.Popen | forkserver.Forked"
    send_fd: int
    reply_fd: int


def environment(box, scratch: list) -> dict:
    """The worker's environment: CPU JAX; sandboxed, a compilation cache of this run's own (no other sees it)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop(REACHED_ENV, None)  # what the checks reach is noted by the checker (cli.run_checks), not the worker
    if box is not None and scratch:
        env[compile_cache.ENV] = os.path.join(scratch[0], ".compilation-cache")
    return env


HOME = "home"  # the worker's home folder, inside the run's scratch folder


def scratch_home(scratch: list) -> dict:
    """HOME for the learner's code: a folder of the run's scratch area (made here), never the real home. A save
    that expands a path starting with "~" then writes there, where the checks see it, and nowhere else."""
    if not scratch:
        return {}
    home = os.path.join(scratch[0], HOME)
    os.makedirs(home, mode=0o700, exist_ok=True)
    # the compilation cache stays the one the real home gives (compile_cache.folder reads HOME): named here
    return {"HOME": home, compile_cache.ENV: os.environ.get(compile_cache.ENV) or compile_cache.folder() or "off"}


def warm(scratch: list | None = None) -> "forkserver.Server | None":
    """Start this process's fork server (once), for the unsandboxed workers `launch` starts from now on."""
    return forkserver.start(server_environment(scratch))


def server_environment(scratch: list | None = None) -> dict:
    """The environment of the fork server `warm` starts (and so of every worker forked from it)."""
    return sandbox.environment(environment(None, list(scratch or [])))


def new_hash_seed(env: dict) -> dict:
    """`env` with a PYTHONHASHSEED of its own, never the one `env` holds: `hash()` of a str or bytes in that
    interpreter differs from this run's other workers' (forks share their server's), as it does between two
    runs of a program."""
    taken, seed = env.get("PYTHONHASHSEED"), None
    while seed is None or seed == taken:
        seed = str(secrets.randbelow(4_294_967_295) + 1)  # 0 would turn the salt off
    return {**env, "PYTHONHASHSEED": seed}


def another_name(executable: str) -> str:
    """The same interpreter under another name in its own folder (a venv's `python` and `python3`), if there is one.

    A fresh interpreter started that way has another `sys.executable`, as a learner's own `python3` beside the
    checker's `python` has: a contract that records the interpreter's path differs there, as it must not."""
    folder, name = os.path.split(executable)
    real = os.path.realpath(executable)
    for other in ("python3", "python", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
        path = os.path.join(folder, other)
        if other != name and os.path.exists(path) and os.path.realpath(path) == real:
            return path
    return executable


def launch(spec: str, call_seconds: float, poisoned: dict, box, scratch: list, fresh: bool = False) -> Launched:
    """Start `python -m shardlab.checker.worker` for `spec`; the caller reads its hello.

    Unsandboxed, and with this process's fork server running (checker/forkserver.py), the worker is a
    fork of that server, which has done the worker's imports already; otherwise a new interpreter.
    `fresh`: a new interpreter with a hash seed of its own (a fork server only serves its own seed), started
    under another name of the same interpreter where its folder has one (`another_name`).
    """
    inbound, outbound = os.pipe(), os.pipe()  # checker -> worker, worker -> checker
    python = another_name(sys.executable) if fresh else sys.executable
    command = [python, "-B", "-m", "shardlab.checker.worker", "--implementation", spec]
    command += ["--channel", f"{inbound[0]},{outbound[1]}", "--call-seconds", str(float(call_seconds))]
    command += ["--poison", json.dumps(poisoned)]
    cwd = scratch[0] if scratch else None
    base = new_hash_seed(environment(box, scratch)) if fresh else environment(box, scratch)
    home = scratch_home(scratch)
    base = {**home, **base, **{k: v for k, v in home.items() if k == "HOME"}}  # a cache the environment names stays
    try:
        process = None
        if box is None and not fresh:
            env = sandbox.environment(base)
            process = forkserver.launch(spec, call_seconds, poisoned, env, cwd, inbound[0], outbound[1])
        if process is None:
            process = sandbox.spawn(
                command,
                box,
                pass_fds=(inbound[0], outbound[1]),
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env=base,
            )
    finally:
        os.close(inbound[0])
        os.close(outbound[1])
    return Launched(process, inbound[1], outbound[0])


@contextlib.contextmanager
def other_file_system(workdir: str):
    """A new scratch folder on another file system than `workdir` (/dev/shm), removed afterwards; None if none."""
    shm = "/dev/shm"
    if not os.path.isdir(shm) or not os.access(shm, os.W_OK) or os.stat(shm).st_dev == os.stat(workdir).st_dev:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="shardlab-check-", dir=shm)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def box_for(spec: str, workdir: str, other: str | None, sandboxed: bool):
    """(sandbox or None, writable folders) of a worker for `spec` in this run's scratch folders."""
    readable = [os.path.dirname(spec)] if spec != "reference" else []
    writable = [workdir] + [other] * bool(other)
    return (sandbox.Sandbox(readable=readable, writable=writable) if sandboxed else None), writable


@dataclass
class Early:
    """The run's scratch folders and its first worker, made before the checking interpreter's imports.

    `launched` is the worker, or a thread still starting it (`in_background`): read, it waits for that thread.
    """

    workdir: str
    other: str | None
    _launched: "Launched | threading.Thread | None"

    @property
    def launched(self) -> Launched | None:
        if isinstance(self._launched, threading.Thread):
            self._launched.join()
            found = getattr(self._launched, "found", None)
            if isinstance(found, BaseException):
                raise found
            self._launched = found
        return self._launched


def in_background(start) -> threading.Thread:
    """A thread running `start()` (a launch that waits for the fork server's imports) while this one imports JAX."""

    def run():
        try:
            thread.found = start()
        except BaseException as exc:  # raised where the worker is first needed, as a launch here would
            thread.found = exc

    thread = threading.Thread(target=run, name="shardlab-first-worker", daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def scratch(early: "Early | None"):
    """(workdir, other): `early`'s folders (kept by its maker), or new ones removed afterwards."""
    if early is not None:
        yield early.workdir, early.other
        return
    with tempfile.TemporaryDirectory(prefix="shardlab-check-") as workdir, other_file_system(workdir) as other:
        yield workdir, other
