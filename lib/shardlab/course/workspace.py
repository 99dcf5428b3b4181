"""`python -m shardlab workspace DIR`: a learner's own copy of the course notebooks (what `make lab` opens).

Saving in JupyterLab then changes the copy, never the course sources, and `git pull`
never touches the copy. Running it again adds notebooks that are new and refreshes copies
the learner has not edited; an edited copy is kept and the command says so.
"""

import sys
from pathlib import Path

from shardlab.core.files import replace, sha256_file
from shardlab.course import catalog
from shardlab.errors import ConfigError
from shardlab.io import read_record, write_json

LEDGER = ".shardlab-workspace.json"  # name -> sha256 of the course notebook as it was copied
LEDGER_BYTES = 1 << 16  # a ledger names the course's notebooks; a larger file is not one this command wrote


def _copy(source: Path, target: Path) -> None:
    """Write `source`'s bytes to `target` through a temporary name, so a reader never sees half a notebook."""
    replace(target, source.read_bytes(), mode=0o644)


def prepare(folder) -> dict:
    """Copy or refresh every course notebook into `folder`; return {name: 'copied'|'refreshed'|'kept'|'current'}."""
    folder = Path(folder)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ConfigError(f"workspace {folder} exists and is not a folder; choose another folder")
    folder.mkdir(parents=True, exist_ok=True)
    ledger, status = read_record(folder / LEDGER, LEDGER_BYTES), {}
    for name in catalog.NOTEBOOKS:
        source, target = catalog.NOTEBOOK_DIR / f"{name}.ipynb", folder / f"{name}.ipynb"
        course = sha256_file(source)
        if not target.exists():
            _copy(source, target)
            status[name] = "copied"
        elif target.is_symlink() or not target.is_file():
            status[name] = "kept"  # not ours to replace
            continue
        elif sha256_file(target) == course:
            status[name] = "current"
        elif sha256_file(target) == ledger.get(name):
            _copy(source, target)  # untouched since we copied it: take the course's new version
            status[name] = "refreshed"
        else:
            status[name] = "kept"  # the learner's edits, or a file we did not write
            continue
        ledger[name] = course
    write_json(folder / LEDGER, ledger)
    return status


def add_arguments(parser) -> None:
    parser.add_argument("folder", nargs="?", default="workspace", help="the learner's folder (default: workspace)")


def main(args) -> int:
    try:
        status = prepare(args.folder)
    except (ConfigError, OSError) as exc:
        print(f"[shardlab workspace] {exc}", file=sys.stderr)
        return 1
    kept = [name for name, s in status.items() if s == "kept"]
    print(f"[shardlab workspace] {args.folder}: " + ", ".join(f"{n} {s}" for n, s in status.items()))
    if kept:
        print(
            f"  kept your edited copies of {kept}; the course versions are in {catalog.NOTEBOOK_DIR} "
            "(rename your copy and run `make lab` again to get a fresh one)"
        )
    return 0
