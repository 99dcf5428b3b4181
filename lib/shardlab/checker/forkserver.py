"""Warm starts of the implementation's interpreter: a process that has imported JAX forks one worker per start.

A new worker interpreter spends seconds importing JAX and the checker's modules before it loads the
learner's file. A fork server does those imports once: `python -B -m shardlab.checker.forkserver`
imports them, never starts JAX's backend (no array, no device: no thread that a fork would break),
and then, for each start the checker asks for, forks a child that runs `shardlab.checker.worker`
as `__main__`, exactly as `python -B -m shardlab.checker.worker ARGS` would: it sets up the four
CPU devices, enables the compilation cache and loads the file. Each child is a copy of the server
as it was before any learner file ran, so nothing one file does (monkeypatching a module, a global,
a builtin) is seen by the next one; the server itself never imports a learner's file.

The server is started and ended by `process_group` (`spawn`, `kill`), like every child of the checker.
The child leads its own session and process group (`process_group.kill` ends it whole), gets the
checker's stdout and stderr, and dies with the server; the server dies with the process that
started it, or when that process closes the control socket. The checker reads the child's exit
status from the server (`Forked`, which answers like `subprocess.Popen`, TimeoutExpired included, so
that `process_group` ends and waits for it as for a child it started: the child itself is `os.fork`ed
in the server, since a new interpreter would not share the server's imports).

A start falls back to a new interpreter (the caller's `spawn`) whenever the fork would not be that
interpreter: a sandboxed worker, an environment that differs in what JAX, XLA or Python read when
they start, or a server with more threads than NumPy's BLAS pool (which it stops around a fork) — a
started JAX backend would add its own.
"""

import contextlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time

# environment variables read when an interpreter, JAX, XLA or a numeric library starts: a fork serves
# only an environment that agrees with the server's on every one of them
STARTUP_PREFIXES = ("JAX_", "XLA_", "TF_", "PYTHON", "OPENBLAS", "OMP_", "MKL_", "LD_", "MALLOC")
MESSAGE_BYTES = 1 << 20
READY_SECONDS = 120.0


def startup_environment(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES)}


# ---------------------------------------------------------------------------------------------- the server


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _child(request: dict, fds: list, closing: list, server: int, added: dict) -> None:
    """In the forked child: become `python -B -m shardlab.checker.worker ARGS` and never return."""
    code = 1
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the worker ends with the server...
        if os.getppid() != server:  # ...even one that died before this line
            os._exit(1)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for descriptor in closing:
            with contextlib.suppress(OSError):
                os.close(descriptor)
        os.setsid()
        read, write, stdout, stderr = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        for descriptor in (devnull, stdout, stderr):
            if descriptor > 2:
                os.close(descriptor)
        os.environ.clear()
        os.environ.update(request["env"])
        for name, value in added.items():  # as the worker's own imports would set them (os.environ.setdefault)
            os.environ.setdefault(name, value)
        os.chdir(request["cwd"])
        sys.path[0] = os.getcwd()  # `python -m` puts the folder it starts in first on the path
        argv = ["--implementation", request["implementation"], "--channel", f"{read},{write}"]
        argv += ["--call-seconds", str(float(request["call_seconds"])), "--poison", request["poison"]]
        import importlib.util
        import runpy

        sys.argv = [importlib.util.find_spec("shardlab.checker.worker").origin, *argv]

        runpy.run_module("shardlab.checker.worker", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class _Server:
    """The server's loop: fork requests on the control socket, exit statuses back on each child's socket."""

    def __init__(self, control: socket.socket, threads: int, added: dict):
        self.control, self.children = control, {}  # pid -> the socket its status goes back on
        self.added = added  # what the imports set in the environment (JAX: TF_CPP_MIN_LOG_LEVEL, if unset)
        self.threads = threads  # the main thread and NumPy's BLAS pool (which stops itself for a fork)
        self.wake_read, wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.wake_write = wake_write

    def serve(self) -> int:
        self.control.sendall(json.dumps({"ready": os.getpid(), "added": self.added}).encode())
        while True:
            ready, _, _ = select.select([self.control, self.wake_read], [], [], 1.0)
            self._reap()
            if self.wake_read in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_read, 4096)
            if self.control in ready:
                try:
                    message, fds, _, _ = socket.recv_fds(self.control, MESSAGE_BYTES, 8)
                except OSError:
                    return 0
                if not message:
                    return 0  # the checker closed the control socket: no further starts
                self._fork(message, fds)

    def _fork(self, message: bytes, fds: list) -> None:
        status = socket.socket(fileno=fds[-1])
        try:
            request = json.loads(message)
            if len(fds) != 5:
                raise ValueError(f"{len(fds)} descriptors, not 5")
            why = None
            if _threads() > self.threads:  # a started JAX backend, for one (its CPU client's thread pools)
                why = f"the server has {_threads()} threads, more than the {self.threads} NumPy's BLAS started"
        except (ValueError, TypeError) as exc:
            why = f"an unreadable request ({exc})"
        if why:
            status.sendall(f"refused {why}\n".encode())
            status.close()
            for descriptor in fds[:-1]:
                os.close(descriptor)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        closing = [self.control.fileno(), self.wake_read, self.wake_write, status.fileno()]
        closing += [s.fileno() for s in self.children.values()]
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            _child(request, fds[:4], closing, server, self.added)
        for descriptor in fds[:4]:
            os.close(descriptor)
        self.children[pid] = status
        with contextlib.suppress(OSError):
            status.sendall(f"pid {pid}\n".encode())

    def _reap(self) -> None:
        while self.children:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            status = self.children.pop(pid, None)
            if status is not None:
                with contextlib.suppress(OSError):
                    status.sendall(f"exit {os.waitstatus_to_exitcode(wait_status)}\n".encode())
                status.close()


def _preload() -> None:
    """Import what every worker imports before it loads a file (never JAX's backend: no array, no device)."""
    import jax  # noqa: F401
    import jax.numpy  # noqa: F401

    import shardlab.checker.compile_cache  # noqa: F401
    import shardlab.checker.guard  # noqa: F401
    import shardlab.checker.probes  # noqa: F401
    import shardlab.checker.reuse  # noqa: F401
    import shardlab.checker.wire  # noqa: F401
    import shardlab.core.devices  # noqa: F401
    import shardlab.learner.implementation  # noqa: F401
    import shardlab.learner.reference  # noqa: F401


def serve(control_fd: int) -> int:
    """The server's body: die with the parent, import what every worker imports, then fork on request."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the server ends with the checker
    control = socket.socket(fileno=control_fd)
    import numpy  # noqa: F401  its BLAS starts its threads now, and stops them around every fork (pthread_atfork)

    threads, before = _threads(), dict(os.environ)
    _preload()
    added = {name: value for name, value in os.environ.items() if name not in before}
    return _Server(control, threads, added).serve()


# ---------------------------------------------------------------------------------------------- the checker's side


class Forked:
    """A worker forked by the server, as the checker sees it: `subprocess.Popen`'s pid, poll, wait and returncode."""

    def __init__(self, pid: int, status: socket.socket):
        self.pid, self.status, self.returncode, self._text = pid, status, None, b""
        self.args = ["fork of", "shardlab.checker.worker"]

    def _read(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        ready, _, _ = select.select([self.status], [], [], timeout)
        if not ready:
            return
        chunk = self.status.recv(256)
        if not chunk:  # the server is gone, and with it every child it forked (PR_SET_PDEATHSIG)
            self.returncode = -signal.SIGKILL
        else:
            self._text += chunk
            if not self._text.endswith(b"\n"):
                return
            self.returncode = int(self._text.split()[1])
        self.status.close()

    def poll(self):
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                import subprocess

                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read(left)
        return self.returncode

    def send_signal(self, number: int) -> None:
        from shardlab import process_group

        if self.poll() is None:
            process_group.signal_pids([self.pid], number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Server:
    """The checker's handle on one fork server (started by `start`)."""

    def __init__(self, env: dict):
        import subprocess

        from shardlab import process_group

        self.env = dict(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-B", "-m", "shardlab.checker.forkserver", "--control", str(theirs.fileno())]
        try:  # its own group, killed by `close`; not among the children stop_all ends (it serves the next check too)
            self.process = process_group.spawn(
                command, remembered=False, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=self.env
            )
        finally:
            theirs.close()
        self.control, self.lock, self.ready, self.added = ours, threading.Lock(), None, {}

    def _wait_ready(self) -> bool:
        if self.ready is None:
            readable, _, _ = select.select([self.control], [], [], READY_SECONDS)
            try:
                hello = json.loads(self.control.recv(MESSAGE_BYTES)) if readable else {}
                self.added = {str(k): str(v) for k, v in hello.get("added", {}).items()}
                self.ready = "ready" in hello
            except (OSError, ValueError, AttributeError):
                self.ready = False
        return self.ready

    def serves(self, env: dict) -> bool:
        """True if a fork is the interpreter `env` would start: the same environment where a start reads it.

        A variable the server's imports set themselves (`added`) may also be unset or already set that way.
        """
        if self.process.poll() is not None:
            return False
        wanted, started = startup_environment(env), startup_environment(self.env)
        for name in set(wanted) | set(started):
            if wanted.get(name) != started.get(name):
                with self.lock:
                    ready = self._wait_ready()
                if not (ready and name in self.added and wanted.get(name) in (None, self.added[name])):
                    return False
        return True

    def launch(self, request: dict, read: int, write: int) -> Forked | None:
        """Fork a worker for `request` with the channel `read`, `write`; None if the server cannot."""
        with self.lock:
            if not self._wait_ready():
                return None
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sys.stdout.flush()
                sys.stderr.flush()
                fds = [read, write, 1, 2, theirs.fileno()]  # the console a spawned worker would inherit
                socket.send_fds(self.control, [json.dumps(request).encode()], fds)
            except (OSError, ValueError):
                ours.close()
                return None
            finally:
                theirs.close()
            line = b""
            while not line.endswith(b"\n"):
                readable, _, _ = select.select([ours], [], [], READY_SECONDS)
                chunk = ours.recv(256) if readable else b""
                if not chunk:
                    ours.close()
                    return None
                line += chunk
            words = line.split()
            if words[0] != b"pid":
                ours.close()
                return None
            return Forked(int(words[1]), ours)

    def close(self) -> None:
        from shardlab import process_group

        try:
            self.control.close()
        finally:
            process_group.kill(self.process)


_SERVER: list = []  # the server this process started, if any


OFF = "SHARDLAB_CHECK_FORK"  # "off": every worker is a new interpreter (to measure what the server saves)


def start(env: dict) -> Server | None:
    """Start this process's fork server (once) with `env`, the environment its workers get (None: turned off)."""
    if os.environ.get(OFF, "").lower() == "off":
        return None
    if not _SERVER:
        _SERVER.append(Server(env))
    return _SERVER[0]


def stop() -> None:
    while _SERVER:
        _SERVER.pop().close()


def launch(spec: str, call_seconds: float, poisoned: dict, env: dict, cwd: str | None, read: int, write: int):
    """A worker forked by this process's server (a `Forked`), or None: then the caller starts a new interpreter.

    A server that has died (killed from outside) is started again, with the environment it had.
    """
    if not _SERVER:
        return None
    if _SERVER[0].process.poll() is not None:
        _SERVER[0].close()
        _SERVER[0] = Server(_SERVER[0].env)
    if not _SERVER[0].serves(env):
        return None
    request = {
        "implementation": spec,
        "call_seconds": float(call_seconds),
        "poison": json.dumps(poisoned),
        "env": env,
        "cwd": cwd or os.getcwd(),  # where a new interpreter would start
    }
    forked = _SERVER[0].launch(request, read, write)
    if forked is not None:
        from shardlab import process_group

        process_group.LIVE.add(forked)
    return forked


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m shardlab.checker.forkserver")
    parser.add_argument("--control", type=int, required=True, help="the checker's end of the control socket")
    return serve(parser.parse_args(argv).control)


if __name__ == "__main__":
    sys.exit(main())
