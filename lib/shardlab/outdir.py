"""One output-folder policy for every command that writes files: write only inside OUT, replace only what we wrote.

A command writes its files into a staging folder *inside* OUT, and publishes them on
success. OUT holds a manifest (`.shardlab-manifest.json`) naming, per command, every
file and folder that command published, with each file's size and sha256. A rerun
removes or replaces only entries its own manifest section lists, and only while they
still hold the bytes it recorded; a folder holding anything else (a person's notes, an
edited receipt, another tool's output) is refused with a message saying what to do. A
failed, interrupted (SIGINT/SIGTERM) or refused run leaves OUT's earlier files as they
were and removes its staging folder. Published files are 0644 and folders 0755, like
any build output, whatever the umask or `mkdtemp` would give.

Publication is file by file, not one atomic rename of OUT (that would write beside OUT,
outside the folder given). The manifest is written first listing old and new entries
together, so a crash mid-publication leaves nothing the next run would take for foreign.
"""

import contextlib
import fnmatch
import json
import os
import shutil
import signal
import threading
from pathlib import Path

from shardlab.core import files
from shardlab.core.files import pid_alive, sha256_file, temp_pid
from shardlab.errors import OutputFolderError
from shardlab.io import write_json

MANIFEST = ".shardlab-manifest.json"
STAGING = ".shardlab-staging-"  # + pid + random suffix: a staging folder of a live or killed run
FILE_MODE, DIR_MODE = 0o644, 0o755
SHOWN = 5  # foreign entries named in a refusal
MANIFEST_BYTES = 1 << 24  # a manifest lists one folder's entries; a larger file is not one a command wrote


def _staging_pid(entry: Path) -> int | None:
    """The process id in a staging folder's name (None if `entry` is not a staging folder of ours)."""
    pid = temp_pid(entry.name, STAGING)
    return None if pid is None or entry.is_symlink() or not entry.is_dir() else pid


def read_manifest(folder) -> dict:
    """{command: {"files": {rel: {bytes, sha256}}, "dirs": [rel]}} of `folder` ({} without a manifest).

    The manifest is read through `core.files.read_bounded`, as every reader of a file it did not just write."""
    path = Path(folder) / MANIFEST
    if not path.exists() and not path.is_symlink():
        return {}
    if path.is_symlink() or not path.is_file():
        raise OutputFolderError(f"{path} is not a regular file; move it away or choose another output folder")
    try:
        found = json.loads(files.read_bounded(path, MANIFEST_BYTES).decode("utf-8"))
        commands = found["commands"]
        for section in commands.values():
            for entry in section["files"].values():
                entry["sha256"], entry["bytes"]  # noqa: B018 (shape check)
            list(section["dirs"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise OutputFolderError(
            f"{path} is not a shardlab manifest ({type(exc).__name__}); move the folder's files away or choose "
            "another output folder"
        ) from None
    return commands


def _walk(folder: Path) -> tuple[list[str], list[str]]:
    """(files, dirs) under `folder` as relative posix paths; symlinks and special files count as files."""
    files, dirs = [], []
    for root, subdirs, names in os.walk(folder):
        base = Path(root)
        for name in list(subdirs):
            entry = base / name
            if entry.is_symlink():
                subdirs.remove(name)
                files.append(entry.relative_to(folder).as_posix())
            else:
                dirs.append(entry.relative_to(folder).as_posix())
        files += [(base / name).relative_to(folder).as_posix() for name in names]
    return sorted(files), sorted(dirs)


def holds(path: Path, entry: dict) -> bool:
    """True if `path` is still the regular file a manifest entry records (same size and sha256)."""
    if path.is_symlink() or not path.is_file():
        return False
    digests = entry["sha256"] if isinstance(entry["sha256"], list) else [entry["sha256"]]
    return path.stat().st_size in (entry["bytes"] if isinstance(entry["bytes"], list) else [entry["bytes"]]) and (
        sha256_file(path) in digests
    )


def _check_writable(out: Path) -> None:
    """OutputFolderError unless `out` is (or can be created as) a folder we can write into."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputFolderError(f"output path {out} exists and is not a folder; choose another output folder")
    existing = out
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise OutputFolderError(f"cannot write to {existing}; choose a folder you can write to")


def _check_no_live_writer(out: Path) -> None:
    for entry in out.iterdir():
        pid = _staging_pid(entry)
        if pid is not None and pid != os.getpid() and pid_alive(pid):
            raise OutputFolderError(
                f"another shardlab command (process {pid}) is writing into {out}; wait for it or choose another folder"
            )


def _foreign(out: Path, commands: dict) -> list[str]:
    """Entries of `out` that no command's manifest section lists with their recorded bytes."""
    files, dirs = _walk(out)
    known_files = {rel: entry for section in commands.values() for rel, entry in section["files"].items()}
    known_dirs = {rel for section in commands.values() for rel in section["dirs"]}
    foreign = [
        rel
        for rel in files
        if rel != MANIFEST
        and _staging_pid(out / rel.split("/")[0]) is None
        and not (rel in known_files and holds(out / rel, known_files[rel]))
        and not _pending(commands, rel)
    ]
    return foreign + [
        rel + "/"
        for rel in dirs
        if rel not in known_dirs
        and not rel.split("/")[0].startswith(STAGING)
        and not _contains_known(rel, files)
        and not _pending(commands, rel)
    ]


def claim(folder, command: str, replace: bool = True) -> Path:
    """Check that `command` may write into `folder`; return its absolute path. Writes nothing.

    Raises OutputFolderError if the path is not a folder, is not writable, holds an entry
    no shardlab command recorded (or one changed since), or (without `replace`) an earlier
    output of the same command.
    """
    out = Path(os.path.abspath(os.fspath(folder)))
    _check_writable(out)
    if not out.exists():
        return out
    _check_no_live_writer(out)
    commands = read_manifest(out)
    foreign = _foreign(out, commands)
    if foreign:
        shown = ", ".join(sorted(foreign)[:SHOWN]) + (
            f" and {len(foreign) - SHOWN} more" if len(foreign) > SHOWN else ""
        )
        raise OutputFolderError(
            f"{out} holds files no shardlab command wrote there (or changed since): {shown}; move them away or "
            "choose another output folder"
        )
    if not replace and commands.get(command, {}).get("files"):
        raise OutputFolderError(f"{out} holds a previous `{command}` output; pass --replace or choose a new folder")
    if not os.access(out, os.W_OK | os.X_OK):
        raise OutputFolderError(f"cannot write to {out}; choose a folder you can write to")
    return out


def _contains_known(rel: str, files: list[str]) -> bool:
    """A folder holding some file is judged by its files (a foreign file is reported itself)."""
    return any(f.startswith(rel + "/") for f in files)


@contextlib.contextmanager
def _signals_raise():
    """Turn SIGTERM into SystemExit (SIGINT already raises) so `finally` clauses run; main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _make_staging(out: Path) -> Path:
    try:
        if not out.exists():
            out.mkdir(parents=True)
            os.chmod(out, DIR_MODE)
        staging = Path(files.temporary_dir(out, prefix=STAGING))
    except OSError as exc:
        raise OutputFolderError(
            f"cannot write to {out} ({exc.strerror or exc}); choose a folder you can write to"
        ) from None
    return staging


def _write_manifest(out: Path, commands: dict) -> None:
    write_json(out / MANIFEST, {"format": 1, "commands": commands})  # replaced atomically, 0644


def _entry(path: Path) -> dict:
    """Make the regular file `path` 0644 and return its manifest entry, {bytes, sha256}."""
    os.chmod(path, FILE_MODE)
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


def _staged(staging: Path, files: list, dirs: list, command: str) -> dict:
    """{rel: {bytes, sha256}} of the staged files, made 0644 (folders 0755); refuses anything but regular files."""
    new = {}
    for rel in files:
        path = staging / rel
        if path.is_symlink() or not path.is_file():
            raise OutputFolderError(f"{command} staged {rel}, which is not a regular file; nothing was published")
        new[rel] = _entry(path)
    for rel in dirs:
        os.chmod(staging / rel, DIR_MODE)
    return new


def _both(old: dict, new: dict) -> dict:
    """The manifest entries while publishing: a file in both lists its old and its new bytes."""
    union = {rel: dict(entry) for rel, entry in old.items()}
    for rel, entry in new.items():
        if rel in union:
            union[rel] = {k: [union[rel][k], entry[k]] for k in ("bytes", "sha256")}
        else:
            union[rel] = entry
    return union


def _make_dirs(out: Path, dirs: list, command: str) -> None:
    for rel in dirs:
        target = out / rel
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            raise OutputFolderError(f"{target} is in the way of a folder {command} writes; move it away")
        if not target.exists():
            target.mkdir()
            os.chmod(target, DIR_MODE)


def _remove(out: Path, files, dirs) -> None:
    """Remove the files `files` and then the folders `dirs` (deepest first) under `out`; a folder still holding
    another command's files stays, and an entry already gone is no error."""
    for rel in sorted(files):
        with contextlib.suppress(FileNotFoundError):
            (out / rel).unlink()
    for rel in sorted(dirs, key=lambda r: -r.count("/")):
        with contextlib.suppress(OSError):
            (out / rel).rmdir()


def _publish(staging: Path, out: Path, command: str) -> None:
    """Move the staged entries into `out`, drop this command's older entries, record the new manifest."""
    files, dirs = _walk(staging)
    commands = read_manifest(out)
    old = commands.get(command, {"files": {}, "dirs": []})
    others = {rel for name, s in commands.items() if name != command for rel in s["files"]}
    taken = sorted((set(files) & others) | {rel for rel in files if rel == MANIFEST or rel.startswith(STAGING)})
    if taken:
        raise OutputFolderError(f"{out}: {taken[:SHOWN]} belong to another shardlab command; choose another folder")
    new = _staged(staging, files, dirs, command)
    union = {"files": _both(old["files"], new), "dirs": sorted(set(old["dirs"]) | set(dirs))}
    _write_manifest(out, {**commands, command: union})
    _make_dirs(out, dirs, command)
    for rel in files:
        os.replace(staging / rel, out / rel)
    _remove(out, set(old["files"]) - set(new), set(old["dirs"]) - set(dirs))  # what the new output no longer has
    _write_manifest(out, {**commands, command: {"files": new, "dirs": dirs}})


@contextlib.contextmanager
def writing(folder, command: str, replace: bool = True):
    """Yield a staging folder inside `folder`; on success publish its contents as `command`'s output.

    On any exception, SIGINT or SIGTERM the staging folder is removed and `folder`'s
    earlier files are left as they were.
    """
    out = claim(folder, command, replace)
    created = not out.exists()
    published = False
    with _signals_raise():
        staging = _make_staging(out)
        try:
            files.remove_stale(out, prefix=STAGING, folders=True)  # staging folders of killed runs
            yield staging
            claim(out, command, replace)  # nobody dropped a file in meanwhile
            _publish(staging, out, command)
            published = True
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            if created and not published:
                with contextlib.suppress(OSError):
                    out.rmdir()  # only if still empty: it was ours


def _pending(commands: dict, rel: str) -> bool:
    """True if `rel` lies under a top-level name that a section claimed before writing (`owned_folder`'s `writes`)."""
    top = rel.split("/")[0]
    return any(
        fnmatch.fnmatchcase(top, pattern) for section in commands.values() for pattern in section.get("pending", [])
    )


def owned_folder(folder, command: str, writes: tuple = ()) -> Path:
    """Create (or reuse) `folder` for a notebook that writes through other functions; return its path.

    `writes` names (fnmatch patterns) the top-level entries the caller is about to write. They are
    recorded as pending first, so a run that stops before `seal` (a failed cell, a killed kernel)
    leaves entries the next call recognises and removes. Entries a sealed run recorded are
    removed only while they hold the recorded bytes; anything else in the folder is refused.
    The caller calls `seal` once it has written everything.
    """
    out = claim(folder, command)
    if out.exists():
        commands = read_manifest(out)
        section = commands.get(command, {"files": {}, "dirs": []})
        _remove(out, section["files"], section["dirs"])
        for entry in out.iterdir():
            if entry.name != MANIFEST and _pending({command: section}, entry.name):
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        commands = {k: v for k, v in commands.items() if k != command}
    else:
        try:
            out.mkdir(parents=True, mode=DIR_MODE)
        except OSError as exc:
            raise OutputFolderError(
                f"cannot create {out} ({exc.strerror or exc}); choose a folder you can write to"
            ) from None
        os.chmod(out, DIR_MODE)
        commands = {}
    _write_manifest(out, {**commands, command: {"files": {}, "dirs": [], "pending": list(writes)}})
    return out


def seal(folder, command: str, owns: tuple = ()) -> dict:
    """Record every entry now in `folder` (not listed for another command) as `command`'s; return the section.

    Top-level entries matching `owns` (fnmatch patterns) stay `command`'s as a whole, whatever is added
    inside them later (a trace viewer's cache beside a capture), so the next `owned_folder` replaces them.
    """
    out = Path(os.path.abspath(os.fspath(folder)))
    commands = read_manifest(out)
    others = {rel for name, s in commands.items() if name != command for rel in s["files"]}
    others_dirs = {rel for name, s in commands.items() if name != command for rel in s["dirs"]}
    files, dirs = _walk(out)
    section = {"files": {}, "dirs": [rel for rel in dirs if rel not in others_dirs], "pending": list(owns)}
    for rel in files:
        path = out / rel
        if rel == MANIFEST or rel in others or path.is_symlink() or not path.is_file():
            continue
        section["files"][rel] = _entry(path)
    for rel in section["dirs"]:
        os.chmod(out / rel, DIR_MODE)
    _write_manifest(out, {**commands, command: section})
    return section
