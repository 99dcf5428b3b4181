"""The command line's one parser and its value types: every bad argument is a UsageError, for every command.

`Parser` is the class of `python -m shardlab` and of every command's subparser. argparse
reports an unknown option, a missing argument, a bad choice or a value its type refuses
through `Parser.error`, which raises UsageError (a ConfigError) naming the command, what
is wrong and where the options are explained; `shardlab.__main__` prints it on one line
and exits 2 before the command has written anything. The value types below are the only
ones a command's options use (a test feeds each of them bad values through every
command's parser): each refuses a malformed or out-of-range value with its own sentence.
"""

import argparse
import math

from shardlab.core.config import BATCH_SIZE, SEED, check_batch_size, check_seed
from shardlab.errors import ConfigError, UsageError

LONGEST_WAIT_S = 86_400.0  # a bound of a day: a longer one would be no bound (and overflows some waits)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose refusals raise UsageError instead of printing usage and exiting."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)  # `--step 5` is not taken for `--steps 5`
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}; `{self.prog} --help` lists its arguments")


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _whole(text: str, least: int) -> int:
    value = _integer(text)
    if value < least:
        raise argparse.ArgumentTypeError(f"{value} is below {least}; give a whole number of at least {least}")
    return value


def count(text: str) -> int:
    """A whole number of at least 1 (processes, devices, steps, samples, rows, jobs)."""
    return _whole(text, 1)


def natural(text: str) -> int:
    """A whole number of at least 0 (0 keeps its option's stated meaning: never, all, none)."""
    return _whole(text, 0)


def seconds(text: str) -> float:
    """A finite number of seconds above 0 and at most a day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and 0 < value <= LONGEST_WAIT_S):
        raise argparse.ArgumentTypeError(f"{text} seconds is not a bound; give a number above 0 and at most a day")
    return value


def _checked(rule):
    """A value type from a core rule: a whole number the rule accepts (its ConfigError message, if not)."""

    def convert(text: str) -> int:
        try:
            return rule(_integer(text))
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = convert.__qualname__ = rule.__name__.removeprefix("check_")
    convert.__doc__ = f"A whole number {rule.__name__} accepts."
    return convert


seed = _checked(check_seed)
batch_size = _checked(check_batch_size)


def add_run_arguments(parser) -> None:
    """The experiment's --seed and --batch-size, with the course defaults (every command adds them here)."""
    parser.add_argument("--seed", type=seed, default=SEED, help=f"sampler and initial-state seed (default {SEED})")
    parser.add_argument(
        "--batch-size", type=batch_size, default=BATCH_SIZE, help=f"rows per step (default {BATCH_SIZE})"
    )
