"""The completion manifest: a step counts only once its manifest is published, last.

Layout of a shared checkpoint folder:

    <shared>/orbax/<step>/...        Orbax CheckpointManager steps (pieces from every process)
    <shared>/manifests/<step>.json   one manifest per complete step, written after the pieces
    <shared>/rejected/...            steps set aside at a restart because they had no manifest

A reader lists the manifests, verifies each against the files on disk and takes the newest
step that verifies; an Orbax step folder without a manifest is ignored, whatever Orbax says.
"""

import hashlib
import json
import os
import tempfile

from shardlab.core.errors import CheckpointExistsError, CorruptCheckpointError, IncompleteCheckpointError
from shardlab.core.schema import FIELDS, digests

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


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync(path: str) -> None:
    """Flush a file's (or a folder's) data and metadata to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_digests(folder: str, sync: bool = False) -> dict:
    """Relative path -> {bytes, sha256} of every file under `folder` (fsynced first if `sync`)."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            path = os.path.join(root, name)
            if sync:
                _fsync(path)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            found[rel] = {"bytes": os.path.getsize(path), "sha256": _sha256_file(path)}
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
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(manifest, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise CheckpointExistsError(f"{path} already exists; a published step is never overwritten") from None
    finally:
        os.unlink(tmp)
    _fsync(folder)  # the new name itself is durable
    return path


def read(shared, step: int) -> dict:
    """The manifest of `step`, checked against the files on disk; CorruptCheckpointError if not."""
    path = manifest_path(shared, step)
    try:
        with open(path) as handle:
            manifest = json.load(handle)
    except FileNotFoundError:
        raise IncompleteCheckpointError(f"step {step} has no manifest at {path}; it was never completed") from None
    except (OSError, ValueError) as exc:
        raise CorruptCheckpointError(f"{path} is not a readable JSON manifest ({exc})") from None
    expected = {"format_version": FORMAT_VERSION, "status": "complete", "step": int(step)}
    wrong = {k: manifest.get(k) for k, v in expected.items() if not isinstance(manifest, dict) or manifest.get(k) != v}
    if wrong:
        raise CorruptCheckpointError(f"{path}: expected {expected}, found {wrong}")
    found = file_digests(step_dir(shared, step)) if os.path.isdir(step_dir(shared, step)) else {}
    listed = manifest.get("files") or {}
    differ = sorted(name for name in set(found) | set(listed) if found.get(name) != listed.get(name))
    if differ or not listed:
        raise CorruptCheckpointError(
            f"step {step}: the files under {step_dir(shared, step)} do not match its manifest "
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


def set_aside(shared, keep: int) -> list[str]:
    """Move every Orbax entry that is not a complete step <= `keep` into <shared>/rejected/; return names."""
    found = scan(shared)
    moved = []
    root = os.path.join(os.fspath(shared), ORBAX)
    target = os.path.join(os.fspath(shared), REJECTED)
    for name, step in _orbax_steps(shared).items():
        if step is not None and step in found["complete"] and step <= keep:
            continue
        os.makedirs(target, exist_ok=True)
        destination = os.path.join(target, f"{name}.{len(os.listdir(target))}")
        os.rename(os.path.join(root, name), destination)
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
