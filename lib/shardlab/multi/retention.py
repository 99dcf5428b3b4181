"""Retention: keep the newest N complete checkpoints, remove older ones and leftovers, never the newest.

The order of removal makes a kill at any moment harmless:

1. decide from a verified scan: the newest `keep` complete steps stay, the newest one always;
2. for an older complete step, unlink its manifest first: from then on no reader accepts it;
3. then move its folder into <shared>/trash/ (one rename) and delete it there.

Leftovers are removed too: step folders without a manifest and Orbax temporary folders older
than the newest complete step, steps set aside in rejected/, and whatever trash/ holds (a
previous clean-up that was killed). Anything newer than the newest complete step is left
alone: it may be a save still in progress.
"""

import os
import re
import shutil

from shardlab.errors import ConfigError
from shardlab.multi import manifest

TRASH = "trash"
_STEP = re.compile(r"^(\d+)")


def _step_of(name: str) -> int | None:
    """The step an Orbax entry belongs to: '9' and '9.orbax-checkpoint-tmp-170...' are both step 9."""
    found = _STEP.match(name)
    return int(found.group(1)) if found else None


def plan(shared, keep: int) -> dict:
    """{'keep': steps kept, 'expire': older complete steps, 'leftovers': entry names} for `shared`."""
    if int(keep) < 1:
        raise ConfigError(f"keep must be at least 1 (the newest complete checkpoint is never removed); got {keep}")
    complete = manifest.scan(shared)["complete"]
    kept = complete[-int(keep) :]
    newest = complete[-1] if complete else None
    root = os.path.join(os.fspath(shared), manifest.ORBAX)
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    leftovers = [
        name
        for name in names
        if name not in {str(s) for s in complete}
        and newest is not None
        and (_step_of(name) is None or _step_of(name) < newest)
    ]
    return {"keep": kept, "expire": [s for s in complete if s not in kept], "leftovers": leftovers}


def _discard(shared, path: str) -> None:
    """Move `path` into <shared>/trash/ with one rename, then delete it there."""
    shutil.rmtree(manifest.move_aside(path, os.path.join(os.fspath(shared), TRASH)))


def enforce(shared, keep: int, fault=None) -> dict:
    """Carry out `plan`: older steps, leftovers, rejected/ and trash/ go; `fault(phase, step)` is the
    drills' hook between a manifest and its folder."""
    todo = plan(shared, keep)
    root = os.path.join(os.fspath(shared), manifest.ORBAX)
    for step in todo["expire"]:
        os.unlink(manifest.manifest_path(shared, step))  # first: the step stops counting
        if fault is not None:
            fault("cleanup", step)
        _discard(shared, os.path.join(root, str(step)))
    for name in todo["leftovers"]:
        _discard(shared, os.path.join(root, name))
        stale = manifest.manifest_path(shared, _step_of(name)) if name.isdigit() else None
        if stale and os.path.exists(stale):  # a manifest that did not verify against its folder
            os.unlink(stale)
    for folder in (manifest.REJECTED, TRASH):
        path = os.path.join(os.fspath(shared), folder)
        if os.path.isdir(path):
            for name in os.listdir(path):
                target = os.path.join(path, name)
                shutil.rmtree(target) if os.path.isdir(target) else os.unlink(target)
    return todo
