"""Command line: `python -m shardlab run ...` (more sub-commands join as stages land)."""

import argparse
import sys


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m shardlab", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute every stage notebook with papermill into an output folder")
    run.add_argument("--out", default="receipts", help="output folder (default: receipts)")
    run.add_argument("--seed", type=int, default=17)
    run.add_argument("--batch-size", type=int, default=7)
    run.add_argument("--implementation", default="reference", help="'reference' or a learner's .py file")
    run.add_argument("--replace", action="store_true", help="replace a previous run in --out (only on success)")
    run.add_argument("--notebooks", nargs="*", default=None, help="subset of notebook names, in order")
    return top


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.command == "run":
        from shardlab.runner import main as run_main

        return run_main(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
