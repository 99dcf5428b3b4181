"""Two lanes of checks give the verdicts one lane gives: the same results in the same order, and a diagnosis
that points at an earlier check sees that check's verdict, never a later one's, whichever lane finishes first."""

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from shardlab.checker import cli as runner
from shardlab.checker import lanes, search
from shardlab.checker.guard import Guard
from shardlab.checker.watch import Watch

BROKEN = Path(__file__).parent / "broken"


def _result(name: str, passed: bool = True):
    return SimpleNamespace(name=name, passed=passed)


def test_results_are_passed_on_in_the_checks_order_whichever_lane_posts_first():
    shown = []
    board = lanes.Board(["a", "b", "c", "d"], shown.append)
    board.post(2, _result("c"))
    board.post(1, _result("b"))
    assert shown == []  # "a" is not in yet
    board.post(0, _result("a"))
    assert [r.name for r in shown] == ["a", "b", "c"]
    board.post(3, _result("d"))
    assert [r.name for r in shown] == ["a", "b", "c", "d"]


def test_a_check_sees_an_earlier_verdict_once_it_is_in_and_never_a_later_one():
    board = lanes.Board(["a", "b", "c"])
    seen = board.seen()
    seen.at = 2  # the lane runs "c": "a" and "b" came before it
    board.post(2, _result("c", passed=False))
    assert seen.get("c") is None  # its own verdict, and any later one, is not "above" it
    assert seen.get("nowhere", "absent") == "absent"
    later = threading.Timer(0.3, lambda: board.post(0, _result("a", passed=False)))
    start = time.monotonic()
    later.start()
    assert seen.get("a") is False  # waited for the other lane's verdict
    assert time.monotonic() - start >= 0.25
    board.stop()  # the other lane ended early: nobody waits for "b"
    assert seen.get("b") is None


def test_the_search_of_later_stages_is_the_second_lane(monkeypatch):
    planned = ["x", "random_a", "y", "random_b"]
    assert lanes.split(planned, {"random_a", "random_b"}) == [[0, 2], [1, 3]]
    assert lanes.split(planned, set()) == [[0, 1, 2, 3]]
    monkeypatch.setenv(lanes.ENV, "1")
    assert lanes.split(planned, {"random_a", "random_b"}) == [[0, 1, 2, 3]]


def test_the_second_lane_ends_with_the_checks_planned_after_its_search(monkeypatch):
    after = lanes.AFTER_THE_SEARCH[0]
    assert lanes.split(["x", "random_a", after, "y"], {"random_a"}) == [[0, 3], [1, 2]]
    assert lanes.split([after, "random_a", "y"], {"random_a"}) == [[0, 2], [1]]  # planned before it: the first lane
    assert lanes.split([after, "y"], set()) == [[0, 1]]  # no search, one lane
    planned = [c.__name__ for n in (1, 2, 3, 4) for c in runner.checks_of(n)]
    searched = {c.__name__ for n in (2, 3, 4) for c in search.checks_for(n)} - {"contracts_agree_in_a_fresh_process"}
    first, second = lanes.split(planned, searched)
    assert [planned[i] for i in second] == [*[n for n in planned if n in searched], *lanes.AFTER_THE_SEARCH]
    assert sorted(first + second) == list(range(len(planned)))
    monkeypatch.setenv(lanes.ENV, "1")
    assert lanes.split(planned, searched) == [list(range(len(planned)))]


def test_the_supervisor_follows_the_call_open_longest_in_either_lane(tmp_path):
    progress = tmp_path / "progress.jsonl"
    events = [
        {"event": "start", "environment": {}, "pid": 7},
        {"event": "check", "name": "one", "stage": 2, "lane": 0, "pid": 7},
        {"event": "check", "name": "two", "stage": 2, "lane": 1, "pid": 7},
        {"event": "call", "function": "make_step", "rss": 0, "at": 10.0, "lane": 0, "pid": 7},
        {"event": "call", "function": "transition", "rss": 0, "at": 11.0, "lane": 1, "pid": 7},
        {"event": "return", "function": "transition", "lane": 1, "pid": 7},
    ]
    progress.write_text("".join(json.dumps(e) + "\n" for e in events))
    watch = Watch(str(progress))
    watch.read(lambda result: None)
    assert watch.open_call["function"] == "make_step" and watch.check["name"] == "one"
    with progress.open("a") as handle:
        handle.write(json.dumps({"event": "return", "function": "make_step", "lane": 0, "pid": 7}) + "\n")
    watch.read(lambda result: None)
    assert watch.open_call is None


def _run(spec: str, skip: list, progress) -> list:
    results = runner.run_checks(spec, 2, skip=skip, guard=Guard(progress), search_seed=5, search_cases=2)
    return [(r.name, r.stage, r.passed, r.expected, r.observed, r.diagnosis) for r in results]


def test_two_lanes_give_the_verdicts_of_one(tmp_path, monkeypatch):
    """A broken step fails enumerated and randomised checks alike: the same verdicts, in the same order, with the
    search of stage 2 run by the second lane's worker."""
    searched = {c.__name__ for c in search.checks_for(2)}
    kept = {"initial_state_fields", "gradient_on_a_full_batch", "gradient_on_tail_batches", *searched}
    skip = [c.__name__ for n in (1, 2) for c in runner.checks_of(n) if c.__name__ not in kept]
    spec = str(BROKEN / "missing_factor_two.py")
    two = _run(spec, skip, tmp_path / "two.jsonl")
    monkeypatch.setenv(lanes.ENV, "1")
    one = _run(spec, skip, tmp_path / "one.jsonl")
    assert two == one
    assert {name for name, *_ in one} == kept and not all(passed for _, _, passed, *_ in one)
    assert {name for name, _, passed, *_ in one if not passed} & searched  # the second lane's checks fail too
    lane_of = {}
    for line in (tmp_path / "two.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "check" and "lane" in event:
            lane_of[event["name"]] = event["lane"]
    assert {name for name, lane in lane_of.items() if lane == 1} == searched
    assert {name for name, lane in lane_of.items() if lane == 0} == kept - searched


def test_a_passing_checks_values_reach_its_result_as_json_literals():
    """`expect` hands a pass's values on as they are; the result holds them made plain once (lists and numbers)."""
    import numpy as np

    from shardlab.checker.common import expect

    def values_as_arrays(ctx):
        expect(True, np.zeros((2, 2)), np.ones(2), "an earlier pass")
        return expect(True, {"order": np.arange(3)}, np.float32(0.1), "the last pass")

    result = runner.run_one(values_as_arrays, 1, None)
    assert result.passed and result.expected == {"order": [0, 1, 2]}
    assert json.loads(json.dumps(result.observed)) == result.observed == float(f"{float(np.float32(0.1)):.8g}")
