"""Command line for shardlab: `python -m shardlab COMMAND --help` for each command.

Each command lives in its own module, which provides `add_arguments(parser)` and
`main(args) -> int`; COMMANDS maps the command name to (module, one-line help). A bad
command line (shardlab.cli) is refused on one line with exit code 2, before the command runs.
"""

import importlib
import sys

from shardlab.cli import Parser
from shardlab.errors import UsageError

COMMANDS = {
    "run": ("shardlab.course.execute", "execute every stage notebook with papermill into an output folder"),
    "supervise": (
        "shardlab.multi.supervise",
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
    "hint": (
        "shardlab.learner.hints",
        "one layer of hints for one of the seven functions: `hint FUNCTION [LEVEL]`, a nudge first, the recipe last",
    ),
    "cells": (
        "shardlab.learner.cells",
        "rewrite the notebooks' rule and hint cells and the starter's rules from the course's (--check only compares)",
    ),
    "check": ("shardlab.checker.command", "check an implementation stage by stage in a fresh interpreter"),
    "portfolio": (
        "shardlab.handin.portfolio",
        "assemble what a learner hands in from a finished run: one offline page, a folder and a zip",
    ),
    "grade": (
        "shardlab.handin.grade",
        "check every submission in a folder stage by stage, each bounded in its own process; one table",
    ),
}


def parser(only: str | None = None) -> Parser:
    """The top parser; `.commands` maps each command's name to its subparser.

    With `only`, only that command's module is imported and its arguments added (a command
    line is parsed without importing every other command's libraries).
    """
    top = Parser(prog="python -m shardlab", description="shardlab course commands")
    sub = top.add_subparsers(dest="command", required=True)  # subparsers are Parsers too
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        if only in (None, name):
            importlib.import_module(module).add_arguments(command)
    top.commands = sub.choices
    return top


def parse(argv=None):
    """The parsed command line; UsageError (naming the command) for anything argparse or a value type refuses."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # The top parser has no option but -h, so a command line that parses starts with its command.
    top = parser(only=argv[0] if argv and argv[0] in COMMANDS else "")
    args, extra = top.parse_known_args(argv)
    if extra:  # argparse names the top parser for these; the command's own parser says whose they are
        top.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv=None) -> int:
    try:
        args = parse(argv)
    except UsageError as exc:
        print(f"[shardlab] {exc}", file=sys.stderr)
        return 2
    module, _ = COMMANDS[args.command]
    return int(importlib.import_module(module).main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
