"""File mechanics, one home: every writer and reader of the course's files goes through these.

- `temporary(folder, suffix)` / `temporary_dir(folder, suffix)`: a new file (open) or folder named
  `<prefix><pid>-<random><suffix>` in `folder`, the one temporary-name scheme (prefix `.tmp-`
  unless a staging folder names itself); `temp_pid` reads the pid back, `remove_stale` removes the
  temporaries of processes that are gone;
- `publish_new(fd, tmp, path, write)`: a new file exclusively: fill the temporary, flush, fsync,
  hard-link it to `path` (fails if the name exists, even for two racing writers), unlink the
  temporary, fsync the folder. A reader sees no file or a whole one, never an overwrite;
- `replace(path, data)`: a file replaced atomically (a temporary beside it and one `os.replace`);
- `read_bounded(path, limit)`: a regular file's bytes, never following a symlink or blocking on
  a FIFO, refused with BoundedReadError beyond `limit` bytes; `zip_member(archive, member, limit)`
  the same bound for one member of a zip (the checkpoint's arrays, a portfolio's manifest);
- `new_folders(folder)`: makes `folder` and its missing parents; if the block it guards raises,
  removes those it made (deepest first, each only while empty) and re-raises;
- `sha256_file(path)` and `sync(path)` (fsync of a file or folder).
"""

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import zipfile

from shardlab.core.errors import BoundedReadError

TEMP = ".tmp-"  # + pid + "-" + random + suffix: every temporary file, and the Orbax staging folders


def sha256_file(path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks so a large file is never held whole."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def temporary(folder, suffix: str = "", prefix: str = TEMP) -> tuple[int, str]:
    """(fd, path) of a new file `<prefix><pid>-<random><suffix>` in `folder`, open for writing, private (0600)."""
    return tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}-", suffix=suffix, dir=folder)


def temporary_dir(folder, suffix: str = "", prefix: str = TEMP) -> str:
    """A new folder `<prefix><pid>-<random><suffix>` in `folder` (0700)."""
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", suffix=suffix, dir=folder)


def temp_pid(name: str, prefix: str = TEMP, suffix: str = "") -> int | None:
    """The writer's pid in a temporary named `<prefix><pid>-<random><suffix>` (None if `name` is not one)."""
    pid = name[len(prefix) :].split("-", 1)[0]
    return int(pid) if name.startswith(prefix) and name.endswith(suffix) and pid.isdigit() else None


def pid_alive(pid: int) -> bool:
    """True while process `pid` exists (another user's counts), so its temporaries are not taken for stale."""
    try:
        return os.kill(pid, 0) is None
    except OSError as exc:  # ProcessLookupError: gone; PermissionError: alive, owned by another user
        return isinstance(exc, PermissionError)


def remove_stale(folder, suffix: str = "", prefix: str = TEMP, folders: bool = False, own: bool = False) -> list[str]:
    """Remove the temporaries in `folder` whose process is gone (with `own`, this process's too); return their names.

    Files (or, with `folders`, real folders, removed whole) named by the scheme; anything else,
    and the temporaries of live processes, stay. A file is only unlinked: a temporary that is a
    second hard link to a published file loses that name, the file keeps its own.
    """
    removed = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        pid, entry = temp_pid(name, prefix, suffix), os.path.join(folder, name)
        if pid is None or (pid_alive(pid) and not (own and pid == os.getpid())):
            continue
        if (os.path.isdir(entry) and not os.path.islink(entry)) != folders:
            continue
        if folders:
            shutil.rmtree(entry, ignore_errors=True)
        else:
            try:
                os.unlink(entry)
            except OSError:  # another cleaner was faster, or the folder is read-only
                continue
        removed.append(name)
    return removed


def sync(path) -> None:
    """Flush a file's (or a folder's) data and metadata to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def fsyncs_noted(note):  # while the block runs, each os.fsync(fd) calls note(fd) first (fsync raises no audit event)
    from unittest import mock

    with mock.patch.object(os, "fsync", lambda fd, real=os.fsync: (note(fd), real(fd))[1]):
        yield


@contextlib.contextmanager
def new_folders(folder):
    """Make `folder` and its missing parents; if the block raises, remove the ones made here, then re-raise.

    A writer that raises thus leaves the tree as it found it: only folders missing before are removed,
    deepest first, and each only while empty (never one that existed or that now holds something).
    """
    missing, head = [], os.path.abspath(folder)
    while not os.path.lexists(head):
        missing.append(head)
        head = os.path.dirname(head)
    try:
        os.makedirs(folder, exist_ok=True)
        yield
    except BaseException:
        for made in missing:
            with contextlib.suppress(OSError):  # not made here after all (a failed makedirs), or no longer empty
                os.rmdir(made)
        raise


def publish_new(fd: int, tmp: str, path: str, write) -> str:
    """Publish a new file at `path` from the temporary (fd, tmp) that `temporary` made in its folder.

    `write(handle)` fills it; it is flushed and fsynced, hard-linked to `path` (FileExistsError
    if the name exists: never an overwrite) and its temporary name removed, whatever happened;
    then the folder is fsynced so the new name is durable too. OSError otherwise.
    """
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    finally:
        os.unlink(tmp)
    sync(os.path.dirname(os.path.abspath(path)))
    return path


def replace(path, data: bytes | str, mode: int | None = None) -> str:
    """Write `data` to `path` through a temporary beside it and one os.replace (a reader never sees half a file)."""
    path = os.fspath(path)
    fd, tmp = temporary(os.path.dirname(os.path.abspath(path)), ".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o644 if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def open_regular(path):
    """(a binary file object, its stat) of the regular file `path`, opened without following a symlink or
    blocking on a FIFO. Opening errors propagate as OSError; a folder, FIFO or device is BoundedReadError."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # checked before a file object is made: a folder cannot be one
        os.close(fd)
        raise BoundedReadError(f"{path} is not a regular file (a folder, FIFO or device)")
    return os.fdopen(fd, "rb"), info


def read_bounded(path, limit: int) -> bytes:
    """The bytes of the regular file `path`, read without following a symlink or blocking on a FIFO.

    Opening errors propagate as OSError (FileNotFoundError; ELOOP for a symlink); a folder,
    FIFO or device, or more than `limit` bytes, is BoundedReadError, with nothing more read.
    """
    handle, info = open_regular(path)
    with handle:
        if info.st_size > limit:
            raise BoundedReadError(f"{path} has {info.st_size} bytes, more than {limit}", info.st_size)
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise BoundedReadError(f"{path} has more than {limit} bytes", len(data))
    return data


def zip_member(archive: zipfile.ZipFile, member: "str | zipfile.ZipInfo", limit: int):
    """Member `member` of `archive`, open for reading, if it declares at most `limit` bytes (BoundedReadError if more).

    zipfile ends a member at the size it declares and checks its CRC there, so nothing read from the
    handle exceeds `limit`: a zip bomb is refused before one byte is decompressed. KeyError if absent.
    """
    info = member if isinstance(member, zipfile.ZipInfo) else archive.getinfo(member)
    if info.file_size > limit:
        raise BoundedReadError(f"{info.filename} declares {info.file_size} bytes, more than {limit}", info.file_size)
    return archive.open(info)
