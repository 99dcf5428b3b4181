"""The completion manifest: a step counts only once its manifest is published, last.

Layout of a shared checkpoint folder:

    <shared>/orbax/<step>/...        Orbax CheckpointManager steps (pieces from every process)
    <shared>/manifests/<step>.json   one manifest per complete step, written after the pieces
    <shared>/rejected/...            steps set aside at a restart because they had no manifest

A reader lists the manifests, verifies each against the files on disk and takes the newest
step that verifies; an Orbax step folder without a manifest is ignored, whatever Orbax says.
"""

import json
import os
import stat

from shardlab.core import files
from shardlab.core.schema import FIELDS, digests
from shardlab.errors import BoundedReadError, CheckpointExistsError, CorruptCheckpointError, IncompleteCheckpointError

FORMAT_VERSION = 1
ORBAX = "orbax"
MANIFESTS = "manifests"
REJECTED = "rejected"


def step_dir(shared, step: int) -> str:
    """Where Orbax keeps the pieces of `step`."""
    return os.path.join(os.fspath(shared), ORBAX, str(int(step)))


def manifest_path(shared, step: int) -> str:
    """Where the manifest of `step` is published."""
    return os.path.join(os.fspath(shared), MANIFESTS, f"{int(step)}.json")


def file_digests(folder: str, sync: bool = False) -> dict:
    """Relative path -> {bytes, sha256} of every file under `folder` (fsynced first if `sync`)."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            if not stat.S_ISREG(os.lstat(path).st_mode):  # a FIFO or link is never opened: it cannot match
                found[rel] = {"bytes": -1, "sha256": "not a regular file"}
                continue
            if sync:
                files.sync(path)
            found[rel] = {"bytes": os.path.getsize(path), "sha256": files.sha256_file(path)}
    return dict(sorted(found.items()))


def state_digests(host: dict) -> dict:
    """Logical state name -> {shape, dtype, sha256} (the schema's digest of each field)."""
    return digests(host)


def build(step: int, world: dict, host: dict, files: dict, contract: dict) -> dict:
    """The manifest of a complete step: format, status, step, writer world, state, files, contract."""
    return {
        "format_version": FORMAT_VERSION,
        "status": "complete",
        "step": int(step),
        "writer_world": dict(world),
        "state": state_digests(host),
        "files": files,
        "contract": contract,
    }


def publish(shared, manifest: dict) -> str:
    """Write the manifest to a temporary file, fsync, link it into place (never overwriting)."""
    path = manifest_path(shared, manifest["step"])
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    text = json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8")
    try:
        files.publish_new(*files.temporary(folder, ".json"), path, lambda handle: handle.write(text))
    except FileExistsError:
        raise CheckpointExistsError(f"{path} already exists; a published step is never overwritten") from None
    return path


MAX_MANIFEST_BYTES = 1 << 24  # a manifest lists a few dozen files; anything larger is not one of ours


def _load(path: str):
    """The JSON value at `path`, read without following a symlink or blocking on a FIFO."""
    try:
        raw = files.read_bounded(path, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise IncompleteCheckpointError(f"there is no manifest at {path}; the step was never completed") from None
    except OSError as exc:
        raise CorruptCheckpointError(f"{path} cannot be opened as a manifest ({exc.strerror})") from None
    except BoundedReadError as exc:
        said = (
            "is not a regular file (a folder, FIFO or device)"
            if exc.size is None
            else f"has {exc.size} bytes, far more than any manifest"
        )
        raise CorruptCheckpointError(f"{path} {said}; ignored") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise CorruptCheckpointError(f"{path} is not a readable JSON manifest ({type(exc).__name__})") from None


def _entry_ok(entry) -> bool:
    return isinstance(entry, dict) and set(entry) == {"bytes", "sha256"}


def read(shared, step: int) -> dict:
    """The manifest of `step`, checked against the files on disk; CorruptCheckpointError if not.

    Any JSON value and any file type is either a manifest of this step or a named refusal.
    """
    path = manifest_path(shared, step)
    manifest = _load(path)
    if not isinstance(manifest, dict):
        raise CorruptCheckpointError(f"{path} holds a JSON {type(manifest).__name__}, not a manifest object")
    expected = {"format_version": FORMAT_VERSION, "status": "complete", "step": int(step)}
    wrong = {k: manifest.get(k) for k, v in expected.items() if manifest.get(k) != v or type(manifest.get(k)) is bool}
    if wrong:
        raise CorruptCheckpointError(f"{path}: expected {expected}, found {wrong}")
    listed, state = manifest.get("files"), manifest.get("state")
    if not isinstance(listed, dict) or not listed or not all(_entry_ok(e) for e in listed.values()):
        raise CorruptCheckpointError(f"{path}: `files` should map each file to its bytes and sha256")
    if not isinstance(state, dict) or not all(isinstance(state.get(name), dict) for name in FIELDS):
        raise CorruptCheckpointError(f"{path}: `state` should hold the checksums of all of {list(FIELDS)}")
    folder = step_dir(shared, step)
    found = file_digests(folder) if os.path.isdir(folder) and not os.path.islink(folder) else {}
    differ = sorted(name for name in set(found) | set(listed) if found.get(name) != listed.get(name))
    if differ:
        raise CorruptCheckpointError(
            f"step {step}: the files under {folder} do not match its manifest "
            f"(first differences: {differ[:3]}); the step cannot be trusted"
        )
    return manifest


def _orbax_steps(shared) -> dict[str, int | None]:
    """Entry name -> step for every folder under <shared>/orbax (None for temporary folders)."""
    root = os.path.join(os.fspath(shared), ORBAX)
    if not os.path.isdir(root):
        return {}
    return {name: int(name) if name.isdigit() else None for name in sorted(os.listdir(root))}


def scan(shared) -> dict:
    """{'complete': [steps], 'ignored': {entry: reason}} for a shared checkpoint folder."""
    complete, ignored = [], {}
    for name, step in _orbax_steps(shared).items():
        if step is None:
            ignored[name] = "temporary folder (a save that never finished)"
            continue
        try:
            read(shared, step)
        except (IncompleteCheckpointError, CorruptCheckpointError) as exc:
            ignored[name] = str(exc)
        else:
            complete.append(step)
    return {"complete": sorted(complete), "ignored": ignored}


def newest_complete(shared) -> int:
    """The newest step with a verified manifest; IncompleteCheckpointError if there is none."""
    found = scan(shared)
    if not found["complete"]:
        raise IncompleteCheckpointError(
            f"{shared} holds no complete step (ignored: {sorted(found['ignored'])}); start a fresh run instead"
        )
    return found["complete"][-1]


def move_aside(path: str, folder: str) -> str:
    """Move `path` into `folder` (made if absent) with one rename, as `<name>.<n>`, n the entries already there;
    return where it went. A second entry of the same name is kept beside the first, never over it."""
    os.makedirs(folder, exist_ok=True)
    destination = os.path.join(folder, f"{os.path.basename(path)}.{len(os.listdir(folder))}")
    os.rename(path, destination)
    return destination


def set_aside(shared, keep: int) -> list[str]:
    """Move every Orbax entry that is not a complete step <= `keep` into <shared>/rejected/; return names."""
    found = scan(shared)
    moved = []
    root = os.path.join(os.fspath(shared), ORBAX)
    target = os.path.join(os.fspath(shared), REJECTED)
    for name, step in _orbax_steps(shared).items():
        if step is not None and step in found["complete"] and step <= keep:
            continue
        destination = move_aside(os.path.join(root, name), target)
        moved.append(name)
        stale = manifest_path(shared, step) if step is not None else None
        if stale and os.path.exists(stale):
            os.rename(stale, destination + ".manifest.json")
    return moved


def check_state(manifest: dict, host: dict) -> None:
    """Raise CorruptCheckpointError unless a restored host state matches the manifest's checksums."""
    found = state_digests(host)
    differ = [name for name in FIELDS if found[name] != manifest["state"][name]]
    if differ:
        raise CorruptCheckpointError(
            f"step {manifest['step']}: restored field(s) {differ} differ from the manifest's checksums; "
            "the pieces on disk are not the state that was published"
        )
