"""A time bound's verdict says the code was stopped, never what it got wrong: `grade` reports it as a time-out."""

import os
import time

import pytest

from shardlab.checker import guard, interrupt, probes, watch


def test_every_time_bound_verdict_is_read_as_a_time_out_and_no_other_verdict_is():
    stopped = [
        guard.loop_verdict("restore", 20),
        f"{guard.loop_verdict('restore', 20)}; {guard.NOT_AGAIN}",
        f"`initial` {guard.ended_verdict(guard.SWALLOWED_STATUS, 'the interpreter running it')}",
        f"`the implementation` {watch.TOTAL_BOUND} 90 s and was stopped",
    ]
    judged = [
        f"`initial` {guard.memory_verdict(2 * 1024**3)}",
        f"`initial` {guard.ended_verdict(-9, 'the interpreter running it')}",
        "the implementation raised RuntimeError at model.py:3: `save` did not return within 20 s",
        "restore gave back another cursor",
    ]
    assert [watch.timed_out(text) for text in stopped] == [True] * len(stopped)
    assert [watch.timed_out(text) for text in judged] == [False] * len(judged)


def _save(path: str, who: str) -> None:
    """A save with one file operation; the rival saver never ends (`sleeps`) or dies at once (`dies`)."""
    if who == "sleeps":
        time.sleep(600)
    if who == "dies":
        os._exit(7)
    with open(path, "w") as handle:
        handle.write(who)


def test_a_rival_that_never_reports_is_a_time_out_and_one_that_died_is_judged(tmp_path, monkeypatch):
    """The first save waits for its rival however long it takes; the bound on both children stops a rival that never
    ends, and that stop is the time bound's verdict. A rival that died is seen at once and the race is judged."""
    bound = interrupt.CHILD_TIMEOUT
    monkeypatch.setattr(interrupt, "CHILD_TIMEOUT", 1.0)
    path = str(tmp_path / "checkpoint.npz")
    with pytest.raises(guard.Overrun) as stopped:
        probes.interrupted_save(_save, 1, "race", str(tmp_path / "sleeps.json"), (path, "first"), (path, "sleeps"))
    assert watch.timed_out(str(stopped.value)), stopped.value
    # the bound back at its own value: a first save that waits out a dead rival is still stopped, but one forked and
    # run on a loaded machine is never taken for a hung one
    monkeypatch.setattr(interrupt, "CHILD_TIMEOUT", bound)
    path = str(tmp_path / "again.npz")
    outcome = probes.interrupted_save(_save, 1, "race", str(tmp_path / "dies.json"), (path, "first"), (path, "dies"))
    assert outcome["status"] == "done" and outcome["rival"] == "died before it reported", outcome
    assert outcome["first"] == "saved" and open(path).read() == "first"
