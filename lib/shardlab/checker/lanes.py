"""Two lanes of checks run side by side: the randomised search beside the enumerated checks, each with a worker.

A check spends most of its time waiting for the implementation's interpreter, which compiles and runs the
learner's programs on one core. The search over the domain (the `random_*` checks of each stage) asks nothing
of the enumerated checks' results, so it runs in a second lane (`split`): a second worker (a fork of the fork
server, with scratch folders, shared work and a record of the functions reached of its own) keeps the second
core busy. What a learner reads is what a run in one lane gives: `Board` hands the results on in the checks'
order, and a check that asks whether an earlier check of the run failed (`common.see`) waits for that verdict
and never sees a later one's, whichever lane finishes first.
"""

import os
import threading

ENV = "SHARDLAB_CHECK_LANES"  # "1": every check in one lane, one worker
# Enumerated checks the second lane runs after its search, so that both lanes end together: without them the first
# lane ended well after the second, with one core idle meanwhile (docs/checker.md, "Wall time", has both lanes'
# ends). Each asks nothing of the checks around it but their verdicts, and builds what it needs from the teaching
# fixture.
AFTER_THE_SEARCH = ("faults_show_where_arithmetic_predicts",)


def split(planned: list[str], searched) -> list[list[int]]:
    """The positions in `planned` (check names, in order) each lane runs: the enumerated checks, then those in
    `searched` (the search) with the AFTER_THE_SEARCH checks planned after them; one lane where either is empty
    or SHARDLAB_CHECK_LANES is 1."""
    searched = set(searched)
    search = [i for i, name in enumerate(planned) if name in searched]
    if search:
        search += [i for i, name in enumerate(planned) if name in AFTER_THE_SEARCH and i > search[-1]]
    rest = [i for i in range(len(planned)) if i not in search]
    if not search or not rest or os.environ.get(ENV, "").strip() == "1":
        return [list(range(len(planned)))]
    return [rest, search]


class Board:
    """The run's results in the checks' order: each lane posts its own, `progress` gets them in that order."""

    def __init__(self, planned: list[str], progress=None):
        self.planned, self.progress = list(planned), progress
        self.results: list = [None] * len(self.planned)
        self.shown, self.stopped = 0, False
        self.turn = threading.Condition()

    def post(self, index: int, result) -> None:
        """`result` is the verdict of check `index`; pass on every result whose earlier ones are all in."""
        with self.turn:
            self.results[index] = result
            while self.shown < len(self.results) and self.results[self.shown] is not None:
                if self.progress:
                    self.progress(self.results[self.shown])
                self.shown += 1
            self.turn.notify_all()

    def stop(self) -> None:
        """A lane ended early (an exception out of the loop): nobody waits for its verdicts any longer."""
        with self.turn:
            self.stopped = True
            self.turn.notify_all()

    def seen(self) -> "Seen":
        return Seen(self)


class Seen:
    """One lane's view of the verdicts (check name -> passed): those of the checks before the one it runs now."""

    def __init__(self, board: Board):
        self.board, self.at = board, 0

    def get(self, name: str, default=None):
        """Whether the last check called `name` before this lane's current one passed, waiting for its verdict;
        `default` if no such check is in the run (or it never came: the other lane ended early)."""
        board = self.board
        earlier = [i for i in range(self.at) if board.planned[i] == name]
        if not earlier:
            return default
        with board.turn:
            board.turn.wait_for(lambda: board.results[earlier[-1]] is not None or board.stopped)
            result = board.results[earlier[-1]]
        return default if result is None else result.passed


def run(lanes: list, body) -> None:
    """`body(lane)` for each lane, the first in this thread and the others each in a thread of its own; an
    exception out of any is raised here once all have ended."""
    failures = []

    def guarded(lane):
        try:
            body(lane)
        except BaseException as exc:  # raised in the caller's thread below, after every lane has ended
            failures.append(exc)
            lane.board.stop()

    threads = [threading.Thread(target=guarded, args=(lane,), name="shardlab-check-lane") for lane in lanes[1:]]
    for thread in threads:
        thread.start()
    try:
        guarded(lanes[0])
    finally:
        for thread in threads:
            thread.join()
    if failures:
        raise failures[0]
