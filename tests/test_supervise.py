"""`python -m shardlab supervise`: a supervised job from the command line, a controller killed from outside,
bad arguments refused by name, and the controller command line built from the program's own option table."""

import argparse
import inspect
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from test_multi import numpy_weights

from shardlab.errors import ConfigError, LaunchError
from shardlab.multi import group_supervisor, program, supervise

pytestmark = pytest.mark.stage5


def parse(argv):
    parser = argparse.ArgumentParser()
    program.add_arguments(parser)
    return vars(parser.parse_args(argv))


def test_the_controller_command_line_parses_back_to_every_value_given():
    rng = np.random.default_rng(5)
    for _ in range(25):  # values nobody listed: drawn per option from its own kind
        values = {"shared": f"/s{rng.integers(99)}", "out": "/o"}
        for name, _default, kind, _ in program.OPTIONS:
            if name in values or rng.random() < 0.3:
                continue
            values[name] = {
                "flag": bool(rng.integers(2)),
                int: int(rng.integers(0, 50)),
                float: float(rng.uniform(1, 30)),
            }.get(kind, f"{rng.integers(3)}:update:{rng.integers(9)}")
        found = parse(program.argv(**values))
        assert {k: found[k] for k in values} == values


def test_the_controller_command_line_refuses_an_unknown_or_missing_option():
    with pytest.raises(LaunchError, match="no option"):
        program.argv(shared="/s", out="/o", stepz=3)
    with pytest.raises(LaunchError, match="needs"):
        program.argv(out="/o")


def test_the_command_s_restart_budget_is_the_supervisor_s_and_its_help_states_it():
    from shardlab.__main__ import parser

    command = parser(only="supervise").commands["supervise"]
    budget = inspect.signature(group_supervisor.supervise).parameters["budget"].default
    assert command.parse_args(["--out", "o"]).budget == budget == 3
    assert f"restarts allowed (default {budget})" in " ".join(command.format_help().split())


def run_cli(args, **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "shardlab", "supervise", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        **kw,
    )


@pytest.mark.parametrize(
    "args, error, words",
    [
        (["--save-every", "0", "--keep", "2"], ConfigError, "--keep 2 needs --save-every"),
        (["--save-every", "0", "--async-save"], ConfigError, "--async-save needs"),
    ],
)
def test_bad_combinations_are_named_before_anything_starts(tmp_path, capsys, args, error, words):
    from shardlab.__main__ import parser

    parsed = parser().parse_args(["supervise", *args, "--out", str(tmp_path / "out")])
    with pytest.raises(error, match=words):
        supervise.check(parsed)
    assert supervise.main(parsed) == 2
    assert f"{error.__name__}: " in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_mpirun_without_an_mpi_runtime_is_named(tmp_path, monkeypatch, capsys):
    from shardlab.__main__ import parser

    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))  # no mpiexec beside it
    monkeypatch.setenv("PATH", str(tmp_path))  # nor on PATH
    parsed = parser().parse_args(["supervise", "--launch", "mpirun", "--out", str(tmp_path / "out")])
    assert supervise.main(parsed) == 2
    assert "LaunchError: the mpirun launch path needs an MPI runtime" in capsys.readouterr().err


def _published(out) -> bool:
    """A checkpoint of attempt 0 was published (read from the run's staging folder inside OUT)."""
    for entry in out.glob(".shardlab-staging-*/attempts/attempt-0/progress_*.jsonl"):
        if '"published"' in entry.read_text():
            return True
    return False


@pytest.mark.controllers
@pytest.mark.long  # a supervised job of 40 steps, killed and restarted: make test-long's
def test_a_controller_killed_from_another_shell_is_restarted_and_the_run_equals_numpy(tmp_path, data):
    out, steps = tmp_path / "job", 40
    proc = run_cli(["--steps", str(steps), "--save-every", "5", "--budget", "1", "--out", str(out)])
    lines, deadline = [], time.time() + 120
    while time.time() < deadline:
        lines.append(proc.stdout.readline())
        if "attempt 0: started" in lines[-1]:
            break
    victim = int(lines[-1].split("p1=")[1].split()[0].rstrip(","))
    while not _published(out) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(victim, signal.SIGKILL)  # what a person does from another shell
    rest, _ = proc.communicate(timeout=180)
    text = "".join(lines) + rest
    assert proc.returncode == 0, text
    assert "attempt 0: failed: process 1 killed (SIGKILL)" in text
    assert "attempt 1: started" in text and "attempt 1: complete" in text
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["completed"] and ledger["restarts"] == 1 and ledger["failures"] == 1
    first, second = ledger["attempts"]
    assert (first["kind"], first["process"]) == ("failed", 1)
    assert second["resume"] == "latest" and second["resumed_from"] % 5 == 0 and second["resumed_from"] >= 5
    assert ledger["against_single_process"]["matches"] and ledger["against_single_process"]["steps"] == [1, steps]
    final = json.loads((out / "attempts" / "supervisor.json").read_text())["attempts"][-1]["reports"]["0"]["final"]
    np.testing.assert_allclose(final["weights"], numpy_weights(data, 17, 7, steps), rtol=1e-5, atol=1e-6)
    assert not list(out.glob(".shardlab-staging-*"))  # published: no staging folder left in OUT


def test_a_result_event_has_the_reports_fields_and_no_verdict_is_never_all_passed():
    """A result event with exactly a Result's fields counts; a run that reported no verdict never says 'all passed'."""
    from shardlab.checker import command
    from shardlab.checker import watch as watched

    base = {"name": "c", "stage": 1, "passed": True, "expected": 1, "observed": 1, "diagnosis": "", "seconds": 0.0}
    assert watched._shaped(base) and not watched._shaped({**base, "passed": "yes"})
    assert not watched._shaped({**base, "other": 1}) and not watched._shaped({k: base[k] for k in list(base)[:-1]})
    assert "all checks passed" not in command.summary([]) and "no check ran" in command.summary([])
