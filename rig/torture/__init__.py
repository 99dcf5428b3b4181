"""`python -m rig.torture` (`make torture`): kill, corrupt and misuse the checkpoint path and output folders; count it.

Categories (one record each in `categories.CATEGORIES`): kills during save, corrupted files,
bad parameters, the multi-process save path of stage 5, output folders, hostile restores,
save refusals, stale temporaries, the Orbax path, and a hypothesis fuzzer over NPZ structure
and contract JSON. Per category torture.json reports trials, refused, restored_exact and the
failure columns of `outcome.FAILURES` that must be 0 (wrong_accepts, lost, unclear_errors,
leaks, hangs, writes_outside_out); the command exits 1 otherwise. Seeds are fixed; kill
*timings* still depend on the machine's load, which is why every kill records where it
landed. Every file of the campaign is written inside OUT.
"""

import os
import shutil
import sys

from rig import cli
from rig.torture.categories import FULL, NAMES, REDUCED, campaign, summary  # noqa: F401 (the package face)
from shardlab.cli import seed


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="torture_out", help="folder for torture.json (default: torture_out)")
    parser.add_argument("--reduced", action="store_true", help="fewer trials, same categories (what make test runs)")
    parser.add_argument("--seed", type=seed, default=0, help="seed of every random choice (default 0)")
    parser.add_argument("--only", nargs="*", choices=NAMES, default=list(NAMES), help="categories to run")


def command(argv=None) -> int:
    """`python -m rig.torture ARGV`: a bad command line is one UsageError line and exit code 2, as for the course's."""
    return cli.command("python -m rig.torture", __doc__.splitlines()[0], add_arguments, main, argv)


def main(args) -> int:
    import shardlab as sl
    from shardlab import outdir
    from shardlab.core.config import NUM_DEVICES
    from shardlab.errors import OutputFolderError
    from shardlab.io import write_json

    try:
        outdir.claim(args.out, "torture")  # refuse a bad folder before the campaign, not after it
        sl.setup_devices(NUM_DEVICES)
        with outdir.writing(args.out, "torture") as staging:  # every file of the campaign stays inside OUT
            report = campaign(args.reduced, args.seed, args.only, work=staging / "work")
            shutil.rmtree(staging / "work")
            write_json(staging / "torture.json", report)
    except OutputFolderError as exc:
        print(f"[shardlab torture] {exc}", file=sys.stderr)
        return 1
    print(summary(report))
    print(f"[shardlab] wrote {os.path.join(args.out, 'torture.json')}")
    return 0 if report["ok"] else 1
