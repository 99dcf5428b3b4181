"""What `portfolio` may read and write: paths kept inside their folders, receipts as the run wrote them.

- `member(folder, rel)`: a path inside `folder` for a relative name taken from a run's files
  (`audit.json` can be edited by hand): absolute names, `..` and links out are refused.
- `source(receipts, path, implementation)`: a file to copy is a regular file inside the receipts
  folder, reached without following a link and listed in its manifest (once it has one), or the
  implementation file itself.
- `verify_receipts(receipts)`: every file the run's manifest lists still holds the bytes it recorded;
  an edited, relabelled or added-over receipt is refused and named.
- `check_report(path, receipts, implementation)`: a `--check-report` is used only if the run wrote it
  (its bytes are those of a `check_report.json` its manifest lists, wherever it was copied), or, for a
  learner's file, if it records that file's sha256 (`python -m shardlab check` writes it). What such a
  report says is still the checker's word as run on the learner's machine: it is not re-checked here.
"""

import os
import stat
from pathlib import Path

from shardlab import outdir
from shardlab.core import files
from shardlab.errors import OutputFolderError, PortfolioError
from shardlab.handin import bounded
from shardlab.io import inside

RUN_COMMAND = "run"  # the manifest section `python -m shardlab run` writes


def member(folder: Path, rel) -> Path:
    """`folder / rel` if `rel` is a relative name that stays inside `folder` (no `..`, no link on the way)."""
    text = str(rel)
    parts = Path(text).parts
    if not text or os.path.isabs(text) or ".." in parts or "\0" in text:
        raise PortfolioError(f"the path {text!r} recorded by the run leaves its folder; refusing to use it")
    path = folder
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise PortfolioError(f"{path} is a link; the portfolio copies no link")
    return path


def source(receipts: Path, path, implementation: str | None = None) -> Path:
    """`path` if it is the implementation file or a regular file inside `receipts` reached by no link."""
    path = Path(path)
    if implementation not in (None, "reference") and os.path.abspath(path) == os.path.abspath(implementation):
        return path
    if not inside(path, receipts):
        raise PortfolioError(
            f"{path} is outside the receipts folder {receipts}; the portfolio copies only the run's files"
        )
    checked = member(
        Path(os.path.abspath(receipts)), Path(os.path.abspath(path)).relative_to(os.path.abspath(receipts))
    )
    info = os.lstat(checked)
    if not stat.S_ISREG(info.st_mode):
        raise PortfolioError(f"{path} is not a regular file; the portfolio copies only the run's files")
    rel = checked.relative_to(os.path.abspath(receipts)).as_posix()
    if os.path.lexists(Path(receipts) / outdir.MANIFEST) and rel not in _manifest_files(Path(receipts)):
        raise PortfolioError(f"{rel} is not a file the run wrote (its {outdir.MANIFEST} does not list it)")
    return checked


def _manifest_files(receipts: Path) -> dict:
    try:
        commands = outdir.read_manifest(receipts)
    except OutputFolderError as exc:
        raise PortfolioError(str(exc)) from None
    if RUN_COMMAND not in commands:
        raise PortfolioError(
            f"{receipts} has no record of the files `make run` wrote (its {outdir.MANIFEST}); "
            f"run `make run IMPL=<your file> OUT={receipts}` again"
        )
    return commands[RUN_COMMAND]["files"]


def verify_receipts(receipts: Path) -> None:
    """PortfolioError naming every file of the run that no longer holds the bytes the run wrote.

    A listed file that is absent is not an edit (an item that needs it says it is missing); one that is
    there with other bytes, or as a link, is.
    """
    listed = _manifest_files(receipts)
    present = {rel: entry for rel, entry in listed.items() if os.path.lexists(member(receipts, rel))}
    edited = sorted(rel for rel, entry in present.items() if not outdir.holds(member(receipts, rel), entry))
    if edited:
        shown = ", ".join(edited[:5]) + (f" and {len(edited) - 5} more" if len(edited) > 5 else "")
        raise PortfolioError(
            f"{receipts} was changed after the run wrote it: {shown} differ from its {outdir.MANIFEST}; "
            f"run `make run IMPL=<your file> OUT={receipts}` again"
        )


def check_report(path, receipts: Path, implementation: str) -> dict:
    """The report at `path` if the run wrote it, or if it names `implementation` and that file's sha256."""
    path = Path(path)
    try:
        report = bounded.read_report(path)
    except (OSError, ValueError, RecursionError) as exc:
        raise PortfolioError(f"cannot read the check report {path} ({exc}); pass a check_report.json") from None
    if not bounded.is_report(report):
        raise PortfolioError(f"{path} is not a check report (no list of checks)")
    digest = files.sha256_file(path)
    for rel, entry in _manifest_files(receipts).items():  # the run's own report, wherever it was copied to
        digests = entry["sha256"] if isinstance(entry["sha256"], list) else [entry["sha256"]]
        if Path(rel).name == "check_report.json" and digest in digests:
            return report
    if implementation != "reference" and report.get("implementation_sha256") == files.sha256_file(implementation):
        return report
    raise PortfolioError(
        f"the check report {path} was not written by this run and does not name {implementation} with its "
        "sha256; run `make check IMPL=<your file> OUT=<folder>` and pass that folder's check_report.json"
    )
