"""What every writer of files shares: a file's sha256, whose temporary a name is, and whether that process runs."""

import hashlib
import os


def sha256_file(path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks so a large file is never held whole."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def temp_pid(name: str, prefix: str, suffix: str = "") -> int | None:
    """The writer's pid in a temporary named `<prefix><pid>-<random><suffix>` (None if `name` is not one)."""
    pid = name[len(prefix) :].split("-", 1)[0]
    return int(pid) if name.startswith(prefix) and name.endswith(suffix) and pid.isdigit() else None


def pid_alive(pid: int) -> bool:
    """True while process `pid` exists (another user's counts), so its temporaries are not taken for stale."""
    try:
        return os.kill(pid, 0) is None
    except OSError as exc:  # ProcessLookupError: gone; PermissionError: alive, owned by another user
        return isinstance(exc, PermissionError)
