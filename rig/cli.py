"""The rig's command lines refuse as the course's do: one `UsageError` line, exit code 2, nothing written."""

import sys

from shardlab.cli import Parser
from shardlab.errors import UsageError


def command(prog: str, description: str, add_arguments, main, argv=None) -> int:
    """Parse `argv` (default: sys.argv[1:]) with `add_arguments`'s options and return `main(args)`;
    a bad command line prints `[shardlab] <prog>: <what is wrong>; ...` on one line and returns 2."""
    parser = Parser(prog=prog, description=description)
    add_arguments(parser)
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    except UsageError as exc:
        print(f"[shardlab] {exc}", file=sys.stderr)
        return 2
    return main(args)
