"""Every bad command line, for every command, is refused the same way: one UsageError line, exit 2, nothing written.

The cases are read from the parsers themselves (every subparser's actions), so an option
added later is fed bad values too; the values each value type must refuse are written down
here, not read from shardlab.cli.
"""

import argparse
import importlib
import os
import subprocess
import sys

import pytest

from shardlab import cli
from shardlab.__main__ import COMMANDS, main, parse, parser
from shardlab.errors import ConfigError, UsageError

PROG = "python -m shardlab"
REFUSED = {  # value type -> values it must refuse
    cli.count: ["abc", "", "1.5", "1e3", "0", "-3", "nan"],
    cli.natural: ["abc", "", "1.5", "-1", "-3", "inf"],
    cli.seconds: ["abc", "", "0", "-1", "nan", "inf", "-inf", "1e999", str(24 * 3600 + 1)],
    cli.seed: ["abc", "", "1.5", "-1", str(2**32)],
    cli.batch_size: ["abc", "", "1.5", "0", "-3"],
}
ACCEPTED = {  # value type -> (text, value) it must accept
    cli.count: [("1", 1), ("12", 12)],
    cli.natural: [("0", 0), ("3", 3)],
    cli.seconds: [("0.5", 0.5), (str(24 * 3600), 86400.0)],
    cli.seed: [("0", 0), (str(2**32 - 1), 2**32 - 1)],
    cli.batch_size: [("1", 1), ("7", 7)],
}


def arguments(sub):
    """The actions of a subparser a user writes (all but -h)."""
    return [a for a in sub._actions if not isinstance(a, argparse._HelpAction)]


def base(name, sub, out) -> list[str]:
    """A command line `sub` accepts: its positionals first, then every required option, each given `out`."""
    positionals = [str(out) for a in arguments(sub) if not a.option_strings and a.nargs is None]
    required = [part for a in arguments(sub) if a.option_strings and a.required for part in (a.option_strings[0], out)]
    return [name, *positionals, *map(str, required)]


def bad_arguments(sub, argv: list[str], first: int) -> list[tuple[list[str], str]]:
    """(argv, words the refusal must hold) for every bad argument of the parser `sub`, each a change of `argv` (a
    line it accepts, whose arguments start at index `first`)."""
    found = [(argv + ["--no-such-option"], "unrecognized arguments: --no-such-option")]
    found += [(argv + ["stray1", "stray2"], "unrecognized arguments:")]
    for action in arguments(sub):
        flag = action.option_strings[0] if action.option_strings else None
        if action.type is not None:
            found += [(argv + [f"{flag}={bad}"], f"argument {flag}") for bad in REFUSED[action.type]]
        if action.choices:
            found.append((argv + [f"{flag}=no-such-choice"], "invalid choice: 'no-such-choice'"))
        if flag and action.nargs is None:
            found.append((argv + [flag], f"argument {flag}: expected one argument"))
        if flag and flag.startswith("--") and flag[:-1] not in sub._option_string_actions:  # never a prefix
            found.append((argv + [flag[:-1], "1"], f"unrecognized arguments: {flag[:-1]}"))
        if action.required:  # without it: a positional sits right after the name, an option before its value
            at = argv.index(flag) if flag else first
            found.append((argv[:at] + argv[at + (2 if flag else 1) :], "the following arguments are required"))
    return found


def cases(out) -> list[tuple[str, list[str], str]]:
    """(command, argv, words the refusal must hold) for every bad argument of every command's parser."""
    found = [("", [], "required: command"), ("", ["no-such-command"], "invalid choice: 'no-such-command'")]
    found += [("run", ["--no-such-option", "run"], "unrecognized arguments: --no-such-option")]
    for name, sub in parser().commands.items():
        found += [(name, argv, words) for argv, words in bad_arguments(sub, base(name, sub, out), 1)]
    return found


def test_every_typed_option_has_a_value_type_of_the_table():
    """An option typed with bare int or float would accept -3 or nan: it must use a type from shardlab.cli."""
    untyped = {
        f"{name} {a.option_strings[0]}": getattr(a.type, "__name__", a.type)
        for name, sub in parser().commands.items()
        for a in arguments(sub)
        if a.type is not None and a.type not in REFUSED
    }
    assert not untyped, f"options whose type is not one of shardlab.cli's value types: {untyped}"
    assert set(REFUSED) == set(ACCEPTED)


def test_the_enumeration_reaches_every_command_and_typed_option(tmp_path):
    found = cases(tmp_path / "out")
    assert {name for name, _, _ in found} == {"", *COMMANDS}
    typed = {
        (name, a.option_strings[0])
        for name, sub in parser().commands.items()
        for a in arguments(sub)
        if a.type is not None
    }
    fed = {(name, words.removeprefix("argument ")) for name, _, words in found if words.startswith("argument -")}
    assert typed <= fed and len(typed) >= 19  # seeds of four commands, batch sizes of three, counts, seconds, ...


@pytest.mark.parametrize("kind", list(REFUSED), ids=lambda kind: kind.__name__)
def test_each_value_type_refuses_and_accepts_what_it_should(kind):
    for text in REFUSED[kind]:
        with pytest.raises(argparse.ArgumentTypeError, match="."):
            kind(text)
    for text, value in ACCEPTED[kind]:
        assert kind(text) == value and type(kind(text)) is type(value)


def test_the_base_command_lines_parse_and_accept_good_values(tmp_path):
    """So each refusal below comes from its one bad argument alone."""
    out = tmp_path / "out"
    for name, sub in parser().commands.items():
        assert parse(base(name, sub, out)).command == name
        for action in arguments(sub):
            if action.type is not None:
                text, value = ACCEPTED[action.type][-1]
                parsed = vars(parse(base(name, sub, out) + [f"{action.option_strings[0]}={text}"]))
                assert parsed[action.dest] in (value, [value])
    assert not out.exists()


@pytest.mark.slow  # every argument of every command: seconds of parsing
def test_every_bad_argument_of_every_command_is_one_usage_error_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the commands' default folders (receipts, drills_out, ...) are relative
    ran = []
    for module, _ in COMMANDS.values():  # a command that starts is a refusal that came too late
        monkeypatch.setattr(importlib.import_module(module), "main", lambda args: ran.append(args.command) or 0)
    found = cases(tmp_path / "out")
    for name, argv, words in found:
        with pytest.raises(UsageError) as refused:
            parse(argv)
        message, prog = str(refused.value), f"{PROG} {name}".strip()
        assert isinstance(refused.value, ConfigError)
        assert message.startswith(f"{prog}: ") and words in message, (argv, message)
        assert message.endswith(f"; `{prog} --help` lists its arguments"), message
        assert main(argv) == 2
        said = capsys.readouterr()
        assert said.out == "" and said.err == f"[shardlab] {message}\n", argv
    assert ran == []
    assert os.listdir(tmp_path) == []
    assert len(found) > 100


def test_a_command_line_parses_only_when_it_starts_with_its_command(tmp_path):
    """parse() builds only the first word's command; anything before it is refused, never parsed without it."""
    assert parse(["supervise", "--steps", "3", "--out", str(tmp_path / "b")]).steps == 3
    for argv in (["--", "supervise", "--steps", "3"], ["--steps", "3", "supervise"], ["-x", "supervise"]):
        with pytest.raises(UsageError):
            parse(argv)
    assert not (tmp_path / "b").exists()


@pytest.mark.slow  # one child interpreter per command: make test's, not the inner loop's
def test_the_real_command_line_refuses_in_its_own_words(tmp_path):
    for argv, words in (
        (["supervise", "--steps", "abc"], "argument --steps: 'abc' is not a whole number"),
        (["supervise", "--batch-size", "-3"], "argument --batch-size: batch_size must be a positive integer"),
        (["run", "--seed", "1.5", "--out", str(tmp_path / "receipts")], "argument --seed: '1.5' is not a whole"),
        (["grade", "--out", str(tmp_path / "grade")], "the following arguments are required: submissions"),
        (["drills", "--timeout", "inf"], "argument --timeout: inf seconds is not a bound"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "shardlab", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2, done.stderr
        assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith(f"[shardlab] {PROG} {argv[0]}: ") and words in done.stderr
        assert "usage:" not in done.stderr and "Traceback" not in done.stderr
    assert os.listdir(tmp_path) == []


RIG_COMMANDS = {  # each campaign of the rig: the module whose `command` a `python -m` line runs
    "python -m rig.bench": "rig.bench",
    "python -m rig.loops": "rig.loops",
    "python -m rig.torture": "rig.torture",
    "python -m rig.grade_attacks": "rig.grade_attacks.__main__",
}


@pytest.mark.parametrize("prog", sorted(RIG_COMMANDS))
def test_every_bad_argument_of_a_rig_command_is_one_usage_line_and_writes_nothing(prog, tmp_path, monkeypatch, capsys):
    """The rig's campaigns refuse as the course's commands do: one line naming the command, exit code 2, before
    the campaign starts and before OUT is made."""
    module = importlib.import_module(RIG_COMMANDS[prog])
    ran = []
    monkeypatch.setattr(module, "main", lambda args: ran.append(args) or 0)  # a campaign that starts came too late
    monkeypatch.chdir(tmp_path)  # the campaigns' default folders are relative
    sub = cli.Parser(prog=prog)
    module.add_arguments(sub)
    out = tmp_path / "out"
    found = bad_arguments(sub, ["--out", str(out)], 0)
    for argv, words in found:
        assert module.command(argv) == 2, argv
        said = capsys.readouterr()
        assert said.out == "" and said.err.startswith(f"[shardlab] {prog}: ") and said.err.count("\n") == 1, argv
        assert words in said.err, (argv, said.err)
    assert ran == [] and os.listdir(tmp_path) == []
    assert len(found) > 4
