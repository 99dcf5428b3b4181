"""Where untrusted code runs: one process runner for every child the checker and `grade` start, optionally sandboxed.

`spawn` starts a child in its own session and process group through `shardlab.process_group`, the one
runner every child of a shardlab command goes through (the checker's, `grade`'s and the drills'
controller groups); `process_group.kill` ends the child and its whole group, `process_group.until`
waits for it within the caller's bounds and then kills it, `process_group.stop_all` ends every child
still running (the caller was interrupted); `unavailable`'s probe of bubblewrap runs to its end, or to
its bound and the kill of its whole group, in `process_group.run`.

With a `Sandbox`, the child runs under bubblewrap (`bwrap`, Debian's `bubblewrap`), chosen because it
is a small, widely used tool built for exactly this (Flatpak's sandbox) and it needs no daemon and no
root: on this kind of machine user, PID and network namespaces are available to it. The child then sees

- a read-only view of the interpreter, the virtual environment and shardlab's code (`/usr` too),
  and nothing else of the host's files: no other submission, no output folder, no home folder. Of an
  installation inside a home folder (pyenv's) only its `bin` and `lib` are seen, with its own
  site-packages replaced by an empty folder when the venv does not use them; the home folder itself
  then shows only the folders on the way to it;
- read-only `readable` folders (the private copy of the submission) and writable `writable` ones
  (its scratch folder and the progress channel), both private to this submission;
- a private `/tmp`, no network (its own empty network namespace), its own IPC and host name;
- its own PID namespace: when bwrap's first process ends, the kernel kills every process in that
  namespace, including double-forked, `setsid` or signal-ignoring descendants. bwrap dies with its
  parent (`--die-with-parent`), so the deadline, Ctrl-C and the caller's own death end everything;
- no capabilities, no controlling terminal (`--new-session`), an address-space bound (RLIMIT_AS).

What it does not contain: CPU time beyond the wall-time bounds the caller applies, the kernel itself
(a kernel bug is a way out of any namespace), and the read-only files it can see (it can read the
course's code, which is public anyway).
"""

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field

from shardlab import process_group
from shardlab.io import inside

ADDRESS_SPACE = 8 * 1024**3  # bytes of virtual memory a sandboxed interpreter may map (JAX on CPU needs ~2 GB)
PROBE_SECONDS = 20.0


@dataclass
class Sandbox:
    """What one sandboxed child may see: folders read-only or writable, and its address-space bound."""

    readable: list = field(default_factory=list)
    writable: list = field(default_factory=list)
    address_space: int = ADDRESS_SPACE


def _base_site_packages() -> list[str]:
    """The Python installation's own site-packages, when the venv does not read them (hidden in the sandbox).

    An installation under a home folder (pyenv's `~/.pyenv/versions/...`) holds whatever the host installed
    there; the venv's interpreter needs only its standard library.
    """
    if sys.prefix == sys.base_prefix:
        return []
    try:
        with open(os.path.join(sys.prefix, "pyvenv.cfg"), encoding="utf-8") as handle:
            config = handle.read().replace(" ", "").lower()
    except OSError:
        return []
    if "include-system-site-packages=true" in config:
        return []
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    found = {sysconfig.get_paths(vars=base)[k] for k in ("purelib", "platlib")}
    return sorted(p for p in found if os.path.isdir(p) and not p.startswith("/usr/"))


def _runtime_paths() -> list[str]:
    """Folders the interpreter and shardlab need, read-only: the Python install, the venv, shardlab's import root.

    Not the working folder or other `PYTHONPATH` entries: a submissions folder inside them stays invisible. Of
    the installation only `bin` and `lib` (the interpreter, its library and the standard library), not the
    rest of the folder around it.
    """
    found = sysconfig.get_paths()
    base = {os.path.join(sys.base_prefix, name) for name in ("bin", "lib")}
    paths = {*base, sys.prefix, os.path.realpath(sys.prefix)}
    paths.add(os.path.dirname(os.path.abspath(sys.executable)))
    paths |= {found[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in found}
    paths |= {os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}  # where shardlab is
    kept = sorted(p for p in {os.path.abspath(p) for p in paths} if os.path.isdir(p) and not p.startswith("/usr/"))
    # a folder inside another listed one adds nothing (bwrap would mount it twice)
    return [p for p in kept if not any(p != q and inside(p, q) for q in kept)]


def command(inner: list, box: Sandbox) -> list:
    """`inner` wrapped in bwrap with the view `box` describes (paths are the same inside as outside)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise FileNotFoundError("bwrap")
    args = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        target = os.path.join("/", name)
        if os.path.islink(target):
            args += ["--symlink", os.readlink(target), target]
        elif os.path.isdir(target):
            args += ["--ro-bind", target, target]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache", "--proc", "/proc", "--dev", "/dev"]
    args += ["--tmpfs", "/tmp"]
    for path in _runtime_paths():
        args += ["--ro-bind", path, path]
    for path in _base_site_packages():
        args += ["--tmpfs", path, "--remount-ro", path]
    for path in box.readable:
        args += ["--ro-bind", str(path), str(path)]
    for path in box.writable:
        args += ["--bind", str(path), str(path)]
    return args + ["--", *inner]


def unavailable() -> str | None:
    """None if a sandboxed interpreter starts here; else why not (bwrap missing, namespaces refused)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian: apt-get install bubblewrap; or make sandbox as root)"
    if shutil.which("prlimit") is None:
        return "prlimit (util-linux) is not installed, so the sandbox's memory bound cannot be set"
    probe = command([sys.executable, "-B", "-c", "import os; print(os.getpid())"], Sandbox())
    try:
        done = process_group.run(probe, PROBE_SECONDS, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not start an interpreter: {exc}"
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        return f"bwrap refused to build the sandbox here (namespaces disabled?): {done.stderr.strip()[-300:]}"
    return None


def limited(argv: list, address_space: int) -> list:
    """`argv` under an address-space bound and no core files (prlimit: nothing runs between fork and exec)."""
    tool = shutil.which("prlimit")
    if tool is None:
        raise FileNotFoundError("prlimit (util-linux)")
    return [tool, f"--as={address_space}", "--core=0", "--", *argv]


def environment(env: dict | None = None) -> dict:
    """The environment `spawn` gives a child asked to run with `env` (default: this process's)."""
    return {**(os.environ if env is None else env), "PYTHONDONTWRITEBYTECODE": "1"}


def spawn(inner: list, box: Sandbox | None = None, **popen) -> subprocess.Popen:
    """Start `inner` (sandboxed if `box`) leading its own process group (shardlab.process_group); `kill` ends it."""
    env = environment(popen.pop("env", None))
    argv = limited(command(inner, box), box.address_space) if box is not None else inner
    return process_group.spawn(argv, env=env, **popen)


def _read_small(path: str) -> bytes:
    """A small /proc file's bytes read with `os` calls alone (a file object from `open()` costs several times more)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = [os.read(descriptor, 65536)]
        while parts[-1]:
            parts.append(os.read(descriptor, 65536))
        return b"".join(parts)
    finally:
        os.close(descriptor)


def descendants(root: int) -> list[int]:
    """`root` and every process descended from it, read from /proc (those gone meanwhile left out of the walk)."""
    todo, seen = [root], []
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(x) for x in _read_small(f"/proc/{pid}/task/{task}/children").split()]
        except (OSError, ValueError):
            continue
    return seen


def host_pid(root: int, inner: int | None) -> int:
    """The host pid of the descendant of `root` that sees itself as `inner` (its PID namespace's number).

    Unsandboxed, that is `root` itself; in a sandbox, bwrap's descendant whose NSpid ends in `inner`.
    """
    if inner is None or inner == root:
        return root
    for pid in descendants(root)[1:]:
        try:
            with open(f"/proc/{pid}/status") as handle:
                ids = next((line.split()[1:] for line in handle if line.startswith("NSpid:")), [])
        except OSError:
            continue
        if ids and ids[-1] == str(inner):
            return pid
    return root
