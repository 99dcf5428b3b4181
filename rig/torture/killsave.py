"""Kill during save: SIGKILL a saver at chosen phases and random moments, then check what survives.

After every kill: the target path restores exactly the state being saved or is refused;
any temporary file left behind restores exactly or is refused, and is removed by the next save
(at most one temporary, the interrupted one, is ever present); every checkpoint accepted
earlier in the same folder is byte-identical and restores exactly; a retried save works.
"""

import json
import os
import select
import subprocess
import sys
import time
from collections import Counter

import numpy as np

from rig.torture.outcome import Tally
from shardlab import process_group
from shardlab.core import checkpoint, files
from shardlab.core.files import sha256_file
from shardlab.errors import CheckpointExistsError

PAUSE = 0.002  # seconds a timed saver rests at each event, so one save spans ~0.1-0.3 s to land in
REPLY_TIMEOUT = 120.0  # seconds to wait for the zygote on a loaded machine before giving up
CLOSE_TIMEOUT = 30.0  # seconds the zygote has to exit once its stdin is closed before its group is killed


class Zygote:
    """The forking helper process (rig.torture.zygote), one JSON line per trial."""

    def __init__(self):
        # the child imports the rig by name from wherever the campaign runs: the repository root goes on its path
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": path}
        self.proc = process_group.spawn(  # leads its own group, so its forked savers end with it
            [sys.executable, "-m", "rig.torture.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )

    def trial(self, request: dict) -> dict:
        """Send one request, wait (bounded) for its reply."""
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], REPLY_TIMEOUT)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"the zygote did not answer within {REPLY_TIMEOUT} s (exit code {self.proc.poll()})")
        return json.loads(line)

    def close(self) -> None:
        """Close stdin (the zygote exits); wait at most CLOSE_TIMEOUT, then kill and reap its whole group."""
        self.proc.stdin.close()
        deadline = time.monotonic() + CLOSE_TIMEOUT
        process_group.until(self.proc, lambda: "timeout" if time.monotonic() > deadline else None, 0.05)


def encode_state(state: dict) -> dict:
    """JSON lists for a host state (float32 values round-trip exactly through Python floats)."""
    return {k: (np.asarray(v).tolist() if k not in ("cursor", "step") else int(v)) for k, v in state.items()}


# Where a kill can land, in the order a save passes through them: the phase of checkpoint.save
# completed before the operation the saver was stopped at ("returned": save() had returned;
# "not_killed": the saver exited before the random moment came).
LANDINGS = (
    "before_start",
    "start",
    "before_temp",
    "temp_created",
    "mid_write",
    "written",
    "fsynced",
    "linked_or_failed",
    "temp_removed",
    "returned",
    "not_killed",
)
DONE_BEFORE = {"fsync": "written", "close": "fsynced", "link": "fsynced", "unlink": "linked_or_failed"}


def landing(events: list[str]) -> str:
    """Where a kill landed, from the operations the saver reported (the last one had not run yet)."""
    reported = [e for e in events if not e.startswith("!")]
    if not reported or reported[-1] in ("start", "returned"):
        return reported[-1] if reported else "before_start"
    created = next((i for i, e in enumerate(reported) if e.startswith(f"open {files.TEMP}")), None)
    if created is None or created == len(reported) - 1:
        return "before_temp"  # clean-up of older temporaries, or the temporary's own creation
    after = [e.split(" ", 1)[0] for e in reported[created + 1 :]]
    if "unlink" in after[:-1]:
        return "temp_removed"  # the directory's fsync
    if after[-1] == "write":
        return "temp_created" if after.count("write") == 1 else "mid_write"
    return DONE_BEFORE.get(after[-1], after[-1])


FIRST = ("mid_write", "fsynced", "linked_or_failed", "temp_created", "temp_removed", "written")  # few trials: these


def plan(trials: int, control_events: list[str], span: float, rng) -> list[dict]:
    """Alternate targeted stops (uniform over landings, then over the events of one) and random-delay kills."""
    events = control_events[: control_events.index("returned")]
    buckets = {}
    for number in range(1, len(events)):  # event 0 is 'start'
        buckets.setdefault(landing(events[: number + 1]), []).append(number)
    order = [b for b in FIRST if b in buckets] + [b for b in buckets if b not in FIRST]
    plans = []
    for i in range(trials):
        if i % 2 == 0:
            bucket = order[(i // 2) % len(order)]
            number = int(buckets[bucket][int(rng.integers(len(buckets[bucket])))])
            aim = f"write:{buckets[bucket].index(number) + 2}" if bucket == "mid_write" else bucket
            plans.append({"stop_at": number, "aim": aim})  # aim: the landing expected
        else:
            plans.append({"delay": float(rng.uniform(0.0, span)), "pause": PAUSE})
    return plans


def _temps(folder: str) -> list[str]:
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(files.TEMP))


class _Trials:
    """What a campaign of kill trials has seen so far: counts, landings, temporaries, accepted checkpoints."""

    def __init__(self, folder: str, contract: dict, mesh):
        self.folder, self.contract, self.mesh = folder, contract, mesh
        self.tally, self.temps = Tally(), Tally()
        self.accepted = {}  # path -> (sha256, state)
        self.spread, self.modes, self.by_landing, self.retries = Counter(), Counter(), {}, Counter()
        self.lost, self.records, self.seen = set(), [], set()

    def restore(self, path):
        return checkpoint.restore(path, self.contract, self.mesh)

    def _temporaries(self, index: int, where: str, state: dict) -> list[str]:
        """Judge every temporary not seen before; at most the one this kill interrupted may be present."""
        left, present = [], _temps(self.folder)
        if len(present) > 1:  # the one this kill interrupted is allowed; older ones are leaks
            self.tally.count("leak", f"trial {index}: {len(present)} temporaries in the folder: {present}")
        for temp in present:
            if temp not in self.seen:
                self.seen.add(temp)
                self.temps.trials += 1
                label = f"temp after trial {index} ({where})"
                left.append(self.temps.attempt(label, lambda t=temp: self.restore(t), state))
        return left

    def one(self, zygote, index: int, request: dict, state: dict) -> None:
        """One kill: where it landed, what the path restores, the temporaries, a retried save, nothing lost."""
        path = os.path.join(self.folder, f"trial-{index:03d}.npz")
        reply = zygote.trial({**request, "path": path, "state": encode_state(state), "contract": self.contract})
        where = landing(reply["events"]) if reply["killed"] else "not_killed"
        self.spread[where] += 1
        self.modes["stop_at" if "stop_at" in request else "random_delay"] += 1
        self.tally.trials += 1
        outcome = self.tally.attempt(f"trial {index} ({where})", lambda: self.restore(path), state)
        self.by_landing.setdefault(where, Counter())[outcome] += 1
        left = self._temporaries(index, where, state)
        retry = _retry(path, state, self.contract, outcome)  # a save: removes the temporary of the killed saver
        if retry == "written" and Tally().attempt(path, lambda: self.restore(path), state) != "exact":
            retry = "failed"
        self.retries[retry] += 1
        kind = f"stop_at:{request['aim']}" if "stop_at" in request else f"delay:{request['delay']:.4f}"
        self.records.append({"kill": kind, "landed": where, "outcome": outcome, "temp_files": left, "retry": retry})
        if os.path.exists(path) and retry != "failed":
            self.accepted[path] = (sha256_file(path), state)
        self.lost |= _lost(self.accepted, self.contract, self.mesh, full=False)


def _control(zygote, folder: str, state: dict, contract: dict) -> dict:
    """One uninterrupted save in the zygote: its events and how long it takes (random kills land in it)."""
    path = os.path.join(folder, "control.npz")
    control = zygote.trial({"path": path, "state": encode_state(state), "contract": contract, "pause": PAUSE})
    if control["exit_code"] != 0 or control["events"][-1] != "returned":
        raise RuntimeError(f"an uninterrupted save in the zygote failed: {control}")
    os.unlink(path)
    return control


def run(trials: int, folder, states: list[dict], contract: dict, mesh, seed: int) -> dict:
    """Run `trials` kill trials saving states[1:] next to an accepted states[0]; return counts and details."""
    if len(states) < trials + 1:
        raise ValueError(f"need {trials + 1} states for {trials} trials, got {len(states)}")
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    rng, started, seen = np.random.default_rng(seed), time.perf_counter(), _Trials(folder, contract, mesh)
    first = checkpoint.save(os.path.join(folder, "accepted.npz"), states[0], contract)
    if seen.tally.attempt("accepted", lambda: seen.restore(first), states[0]) != "exact":
        raise RuntimeError("the reference checkpoint does not restore exactly; the campaign cannot start")
    seen.tally.refused = seen.tally.restored_exact = 0
    seen.accepted[first] = (sha256_file(first), states[0])
    zygote = Zygote()
    try:
        control = _control(zygote, folder, states[0], contract)
        span = 0.9 * control["seconds"]
        for index, request in enumerate(plan(trials, control["events"], span, rng)):
            seen.one(zygote, index, request, states[index + 1])
    finally:
        zygote.close()
    return _report(seen, span, started)


def _report(seen: _Trials, span: float, started: float) -> dict:
    """After the explicit clean-up: the counts (leaks, lost) and the details of every trial."""
    tally, temps = seen.tally, seen.temps
    checkpoint.remove_stale(seen.folder)  # the explicit clean-up: no temporary of a dead saver may survive it
    if _temps(seen.folder):
        tally.count("leak", f"temporaries left after remove_stale(): {_temps(seen.folder)}")
    tally.lost = len(seen.lost | _lost(seen.accepted, seen.contract, seen.mesh, full=True))
    tally.wrong_accepts += temps.wrong_accepts
    tally.unclear_errors += temps.unclear_errors
    result = tally.as_dict()
    result["details"] = {
        "kill_landed_after": {k: seen.spread[k] for k in LANDINGS if seen.spread[k]},
        "outcome_by_landing": {k: dict(seen.by_landing[k]) for k in LANDINGS if k in seen.by_landing},
        "modes": dict(seen.modes),
        "temp_files_seen": temps.trials,
        "temp_files_refused": temps.refused,
        "temp_files_restored_exact": temps.restored_exact,
        "retried_saves": dict(seen.retries),
        "accepted_checkpoints_checked": len(seen.accepted),
        "timed_save_span_seconds": round(span, 4),
        "seconds": round(time.perf_counter() - started, 2),
        "trials": seen.records,
    }
    result["clean"] = tally.clean and seen.retries.get("failed", 0) == 0
    return result


def _retry(path: str, state: dict, contract: dict, outcome: str) -> str:
    """Save again after the kill: a missing checkpoint can be written; an existing one is never overwritten."""
    if os.path.exists(path):
        before = sha256_file(path)
        try:
            checkpoint.save(path, state, contract)
        except CheckpointExistsError:
            return "refused_existing" if sha256_file(path) == before else "failed"
        return "failed"
    try:
        checkpoint.save(path, state, contract)
    except Exception:
        return "failed"
    return "written" if outcome == "refused" else "failed"


def _lost(accepted: dict, contract: dict, mesh, full: bool) -> set:
    """Accepted checkpoints whose bytes changed or that no longer restore exactly (all with `full`, else the first)."""
    lost = set()
    for index, (path, (digest, state)) in enumerate(accepted.items()):
        if not os.path.isfile(path) or sha256_file(path) != digest:
            lost.add(path)
        elif (full or index == 0) and Tally().attempt(
            path, lambda p=path: checkpoint.restore(p, contract, mesh), state
        ) != "exact":
            lost.add(path)
    return lost
