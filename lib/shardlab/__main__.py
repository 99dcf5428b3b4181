"""Command line for shardlab: `python -m shardlab COMMAND --help` for each command.

Each command lives in its own module, which provides `add_arguments(parser)` and
`main(args) -> int`; COMMANDS maps the command name to (module, one-line help).
"""

import argparse
import importlib
import sys

COMMANDS = {
    "run": ("shardlab.course.execute", "execute every stage notebook with papermill into an output folder"),
    "multi": ("shardlab.multi.plain", "start P controller processes on loopback once (supervise --budget 0)"),
    "supervise": (
        "shardlab.multi.cli",
        "run a supervised multi-controller job: restarts through failures, prints each attempt, writes OUT/ledger.json",
    ),
    "drills": (
        "shardlab.multi.drills",
        "run the stage 5 drills (kills, freezes, preemption, async saves, launches); write OUT/drills.json",
    ),
    "workspace": (
        "shardlab.course.workspace",
        "copy the course notebooks into your own folder (`make lab` opens it)",
    ),
    "starter": ("shardlab.learner.starter", "copy the starter template to a new file for your own implementation"),
    "check": ("shardlab.checker.cli", "check an implementation stage by stage in a fresh interpreter"),
    "bench": (
        "shardlab.perf.bench",
        "measure whole loops and three optimisations side by side; write bench.json and a figure",
    ),
    "portfolio": (
        "shardlab.handin.portfolio",
        "assemble what a learner hands in from a finished run: one offline page, a folder and a zip",
    ),
    "grade": (
        "shardlab.handin.grade",
        "check every submission in a folder stage by stage, each bounded in its own process; one table",
    ),
    "torture": ("shardlab.torture", "kill, corrupt and misuse the checkpoint path; write OUT/torture.json with counts"),
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m shardlab", description="shardlab course commands")
    sub = top.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        importlib.import_module(module).add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return top


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    module, _ = COMMANDS[args.command]
    return int(importlib.import_module(module).main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
