"""The controller program: every process of a group runs this, takes the same branches, in order.

    python -m shardlab.multi.program --shared DIR --out DIR [--steps N] [--save-every K] [--resume latest]

Per step: advance the host sampler, agree on the batch and sampler digest (bounded), place
this process's rows, run stage 2's global update (watched), log the stage 3 fingerprint.
Every `save_every` steps: Orbax save (watched), a bounded barrier, then process 0 hashes
the pieces and publishes the completion manifest last, and removes what retention expires.

With `--async-save` the save returns once the state is off the devices and training goes on;
the agreement of a later step carries each controller's "my background save is written" flag,
and only when every controller says so does the group publish the manifest (at the latest,
before the next save and at the end). SIGTERM sets a flag the next agreement carries too:
the whole group saves the step it agreed on and exits with EXIT_PREEMPTED, "preempted at step N".

Every report holds `step_times`, one record per step (data, agreement, compute seconds; see
`step_times`). A stop writes a report naming the error; every step is also appended to progress_<id>.jsonl
(a supervisor reads it even when the process was killed); `--pause` and `--skip` are the
drills' fault hooks.
"""

import argparse
import json
import os
import signal
import sys
import time
import traceback

import jax
import numpy as np

import shardlab as sl
from shardlab.core.batch import put_shards
from shardlab.core.config import BATCH_SIZE, SEED
from shardlab.errors import CheckpointExistsError, LaunchError, ShardlabError
from shardlab.io import plain, write_json
from shardlab.multi import cache, manifest, migration, retention, runtime, shards, store
from shardlab.multi.wait_guard import EXIT_STOPPED, WaitGuard
from shardlab.verify import step_fingerprint

PAUSE_LIMIT = 600  # seconds a paused controller waits to be killed before giving up
FIRST_STEP_FACTOR = 3  # the first step's waits allow 3 bounds: start-up skew and compilation
EXIT_PREEMPTED = 4  # exit code of a controller that saved an agreed step after SIGTERM and stopped
PREEMPT, DURABLE = "P", "D"  # agreement flags: SIGTERM received; my background save is written


class Preempted(Exception):
    """Control flow, not a failure: the group saved the agreed step after a SIGTERM."""


# the files a controller writes in its group's folder, by kind, each named for its process
FILES = {
    "report": "process_{}.json",  # its report
    "fault": "fault_{}.json",  # written when it reaches its fault point
    "pulse": "pulse_{}",  # rewritten every PULSE seconds (read by the supervisor)
    "progress": "progress_{}.jsonl",  # a JSON line per event (ready, restored, step, saved, published, preempted)
}


def file_of(out, kind: str, process_id: int) -> str:
    """Where process `process_id` writes its file of `kind` (a key of FILES)."""
    return os.path.join(os.fspath(out), FILES[kind].format(process_id))


def parse_fault(text: str | None) -> dict | None:
    """'RANK:PHASE:STEP[:hold|mark|die|term|fail]' -> {rank, phase, step, hold, die, term, fail}.

    hold (default): leave a marker and wait to be signalled; mark: leave it and go on; die: leave
    it and SIGKILL itself at once (a kill that lands exactly in that window, e.g. mid-write);
    term: leave it and go on once the SIGTERM has arrived (so the signal lands in that step);
    fail: leave it and make this process's next background write fail (store.fail_next_write).
    """
    if not text:
        return None
    parts = text.split(":")
    mode = parts[3] if len(parts) > 3 else "hold"
    fault = {"rank": int(parts[0]), "phase": parts[1], "step": int(parts[2])}
    return {**fault, "hold": mode == "hold", **{m: mode == m for m in ("die", "term", "fail")}}


def error_record(exc: BaseException) -> dict:
    """How a report names the error that stopped its process: type, message and when."""
    return {"type": type(exc).__name__, "message": str(exc), "time": time.time()}


def step_times(step: int, clock: list[float]) -> dict:
    """One step's seconds from its perf_counter readings (start, batch placed, agreed, update began, update done).

    data_s: the sampler and placing this process's rows; agreement_s: hashing the batch, then a rendezvous
    through the coordinator's key-value store (a late peer's delay is paid here); compute_s: the update to
    completion, its three cross-process psums inside (only a profiler could split them from the arithmetic).
    """
    start, placed, agreed, began, done = clock
    return {"step": step, "data_s": placed - start, "agreement_s": agreed - placed, "compute_s": done - began}


class Controller:
    """One controller's run: state, log, checkpoints, report."""

    def __init__(self, args, world: runtime.World):
        self.args, self.world, self.pid = args, world, world.process_id
        self.report = {"process_id": self.pid, "world": world.as_dict(), "status": "running", "log": []}
        self.report["timing"] = {"started": args.started, "initialized": time.time()}
        self.pause = parse_fault(args.pause)
        self.mesh = sl.make_mesh()
        self.data = sl.teaching_fixture()
        config = sl.Config(seed=args.seed, batch_size=args.batch_size, num_devices=self.mesh.size)
        self.contract = sl.contract(self.data, config)
        self.step_fn = sl.make_step(self.mesh, config.learning_rate, config.decay)
        pulse = file_of(args.out, "pulse", self.pid)
        self.guard = WaitGuard(runtime.client(), self.pid, world.processes, args.timeout, self.stopped, pulse)
        self.state = sl.initial(args.seed, self.data, self.mesh, put=put_shards)
        self.checkpoints, self.pending, self.preempt = None, None, False
        self.saved_host = {}  # host copies of steps saved but not yet published (for their manifests)
        self.report["mesh"] = {
            "shape": {k: int(v) for k, v in self.mesh.shape.items()},
            "devices": [[int(d.id), int(d.process_index)] for d in self.mesh.devices.flat],
        }
        self.report["launched_by"] = os.environ.get(runtime.LAUNCH, "explicit")
        signal.signal(signal.SIGTERM, self._sigterm)  # after jax.distributed.initialize: ours wins
        self.progress("ready", world=world.as_dict(), os_pid=os.getpid())

    def _sigterm(self, signum, frame) -> None:
        self.preempt = True
        self.report["sigterm_time"] = time.time()

    def progress(self, event: str, **fields) -> None:
        """Append one event line to this process's progress file (flushed, so a kill keeps it)."""
        line = json.dumps({"event": event, "t": time.time(), **fields}, sort_keys=True)
        with open(file_of(self.args.out, "progress", self.pid), "a") as handle:
            handle.write(line + "\n")

    def fault(self, phase: str, step: int) -> None:
        """Drill hook: at (phase, step) on the chosen rank, leave a marker and (if holding) wait."""
        pause = self.pause
        if not pause or pause["rank"] != self.pid or pause["phase"] != phase or pause["step"] != step:
            return
        saving = store.in_progress(self.checkpoints) if self.checkpoints is not None else False
        mark = {"phase": phase, "step": step, "time": time.time(), "saving_in_progress": saving, "os_pid": os.getpid()}
        write_json(file_of(self.args.out, "fault", self.pid), mark)
        if pause["die"]:
            os.kill(os.getpid(), signal.SIGKILL)
        if pause["fail"]:
            store.fail_next_write(f"drill: process {self.pid}'s background write of step {step}")
            return
        deadline = time.monotonic() + self.args.timeout
        while pause.get("term") and not self.preempt and time.monotonic() < deadline:
            time.sleep(0.01)
        if pause["hold"]:
            time.sleep(PAUSE_LIMIT)

    def stopped(self, error: Exception) -> None:
        """Record a named stop (called by the watchdog thread or the main thread)."""
        self.report.update(status="stopped", error=error_record(error))
        self.write()

    def write(self) -> None:
        """Write this process's report."""
        write_json(file_of(self.args.out, "report", self.pid), self.report)

    def resume(self) -> None:
        """Pick the newest complete step (or the one asked for), agree on it, set the rest aside, restore."""
        shared, args = self.args.shared, self.args
        found = manifest.scan(shared)
        step = manifest.newest_complete(shared) if args.resume == "latest" else int(args.resume)
        if step not in found["complete"]:
            manifest.read(shared, step)  # raises the reason this step is not complete
        self.guard.agree("resume", str(step), FIRST_STEP_FACTOR * args.timeout)
        record = manifest.read(shared, step)
        self.report["migration"] = migration.check(record["contract"], self.contract, args.migrate)
        self.report["ignored"] = found["ignored"]
        if args.save_every and self.pid == 0:
            self.report["set_aside"] = manifest.set_aside(shared, step)
        self.guard.barrier("set-aside")
        self.checkpoints = store.manager(shared, args.timeout, args.async_save)
        began = time.time()
        with self.guard.bounded(f"Orbax restore of step {step}"):
            state = store.restore(self.checkpoints, step, self.state, self.mesh)
        manifest.check_state(record, sl.host_copy(state))
        self.progress("restored", step=step, s=round(time.time() - began, 4))
        self.state = state
        self.report["restored"] = plain(sl.host_copy(state))
        self.report.update(resumed_from=step, writer_world=record["writer_world"])

    def save(self, step: int) -> None:
        """Save `step` on every controller; publish it now (synchronous) or once every piece is written."""
        self.finish_pending()
        began = time.time()
        self.fault("save-begin", step)
        with self.guard.bounded(f"Orbax save of step {step}"):
            store.save(self.checkpoints, step, self.state, wait=not self.args.async_save)
        blocking = round(time.time() - began, 4)
        self.report.setdefault("save_seconds", []).append(blocking)
        self.progress("saved", step=step, block_s=blocking, asynchronous=bool(self.args.async_save))
        if self.args.async_save:
            self.pending = step
            self.fault("save-staged", step)  # the background thread is writing now
        else:
            self.publish(step)

    def finish_pending(self) -> None:
        """Wait (bounded) for the background save, then publish it; an AsyncSaveError if it failed."""
        if self.pending is None:
            return
        step, self.pending = self.pending, None
        with self.guard.bounded(f"the background save of step {step}"):
            store.finish(self.checkpoints, step)
        self.publish(step)

    def publish(self, step: int) -> None:
        """After every controller's pieces of `step` are written: process 0 verifies and publishes, last."""
        began = time.time()
        self.fault("save-written", step)
        self.guard.barrier(f"saved-{step}")
        if self.pid == 0:
            files = manifest.file_digests(manifest.step_dir(self.args.shared, step), sync=True)
            record = manifest.build(step, self.world.as_dict(), self.saved_host.pop(step), files, self.contract)
            self.fault("publish", step)
            manifest.publish(self.args.shared, record)
            if self.args.keep:
                removed = retention.enforce(self.args.shared, self.args.keep, self.fault)
                self.report.setdefault("retention", []).append({"after": step, **removed})
        else:
            self.saved_host.pop(step)
        self.guard.barrier(f"published-{step}")
        self.report.setdefault("published", []).append(step)
        self.progress("published", step=step, publish_s=round(time.time() - began, 5))

    def preempted(self, step: int) -> None:
        """Every controller agreed on `step` after a SIGTERM: save it (unless saved), publish, stop."""
        self.finish_pending()
        if step not in self.report.get("published", []):
            if self.checkpoints is None:
                self.checkpoints = store.manager(self.args.shared, self.args.timeout)
            self.saved_host[step] = sl.host_copy(self.state)
            with self.guard.bounded(f"Orbax save of preemption step {step}"):
                store.save(self.checkpoints, step, self.state, wait=True)
            self.publish(step)
        self.progress("preempted", step=step)
        raise Preempted(f"preempted at step {step}")

    def train(self) -> None:
        """Steps from the current state to `--steps`, saving every `--save-every`."""
        args = self.args
        skip = dict(zip(("rank", "step"), map(int, args.skip.split(":")))) if args.skip else None
        while self.state["step"] < args.steps:
            step = int(self.state["step"])
            self.guard.position = f"step {step}"
            clock = [time.perf_counter()]
            state, batch = sl.next_batch(self.state, self.data, args.batch_size, self.mesh, put=put_shards)
            clock.append(time.perf_counter())
            if skip and skip["rank"] == self.pid and skip["step"] == step:
                self.report["skipped"] = {"step": step, "time": time.time()}
                self.progress("skipped", step=step)
                self.state = {**state, "step": step + 1}  # the fault: a batch consumed, no update, no all-reduce
                continue
            first = step == self.report["start_step"]  # peers may still be starting; the step compiles
            bound = FIRST_STEP_FACTOR * args.timeout if first else None
            began = time.time()
            flags = self.guard.agree(step, shards.agreement(state, self.data, batch.ids), bound, self._flags())
            clock.append(time.perf_counter())
            publishing = time.time()  # an earlier background save published inside this step: timed apart
            if self.pending is not None and all(DURABLE in f for f in flags.values()):
                self.finish_pending()  # every controller's pieces are written: publish without waiting
            publishing = time.time() - publishing
            if any(PREEMPT in f for f in flags.values()):
                self.preempted(step)
            self.fault("update", step)
            clock.append(time.perf_counter())
            with self.guard.bounded(f"the all-reduce of step {step}", bound):
                self.state, loss = shards.apply(state, batch, self.step_fn)
            clock.append(time.perf_counter())
            self.report.setdefault("step_times", []).append(step_times(step + 1, clock))
            entry = step_fingerprint.entry(step + 1, self.data, batch.ids, self.state["weights"], loss)
            weights = np.asarray(self.state["weights"]).tolist()
            ids = [int(i) for i in batch.ids]
            self.report["log"].append({**entry, "ids": ids, "weights_values": weights})
            self.progress(
                "step",
                step=step + 1,
                s=round(time.time() - began, 5),
                publish_s=round(publishing, 5),
                ids=ids,
                loss=loss,
                weights=weights,
            )
            if args.save_every and (step + 1) % args.save_every == 0:
                self.saved_host[step + 1] = sl.host_copy(self.state)
                self.save(step + 1)

    def _flags(self) -> str:
        if self.pending is not None:
            store.check(self.checkpoints, self.pending)  # a background write that already failed: stop, named
        durable = self.pending is not None and not store.in_progress(self.checkpoints)
        return (PREEMPT if self.preempt else "") + (DURABLE if durable else "")

    def run(self) -> None:
        """Resume or start, train, and record the final state."""
        if self.args.resume != "none":
            self.resume()
        else:
            if manifest.scan(self.args.shared)["complete"]:
                raise CheckpointExistsError(f"{self.args.shared} already holds complete steps; pass --resume latest")
            self.guard.agree("start", "fresh", FIRST_STEP_FACTOR * self.args.timeout)
            if self.args.save_every and self.pid == 0:
                self.report["set_aside"] = manifest.set_aside(self.args.shared, -1)  # a failed first attempt's
            self.guard.barrier("set-aside")
            if self.args.save_every:
                self.checkpoints = store.manager(self.args.shared, self.args.timeout, self.args.async_save)
        self.report["start_step"] = int(self.state["step"])
        self.train()
        self.finish_pending()
        self.report["final"] = plain(sl.host_copy(self.state))
        self.guard.barrier("finished")
        self.report["status"] = "complete"


REQUIRED = object()  # an option every controller must be given
# The controller's options, one table: add_arguments parses them, argv builds a command line from them.
OPTIONS = (  # (name, default, type or "flag", help)
    ("shared", REQUIRED, str, "checkpoint folder every process shares"),
    ("out", REQUIRED, str, "folder for this group's per-process reports"),
    ("steps", 10, int, "train until this many updates are done"),
    ("save_every", 3, int, "save every K steps (0: never)"),
    ("seed", SEED, int, "sampler and initial-state seed"),
    ("batch_size", BATCH_SIZE, int, "rows per step"),
    ("resume", "none", str, "'none', 'latest' or a step number"),
    ("migrate", False, "flag", "accept a device-count change (migration contract)"),
    ("timeout", 20.0, float, "bound in seconds of every wait"),
    ("pause", None, str, "fault: RANK:PHASE:STEP[:mark] (update, save-begin, ...)"),
    ("skip", None, str, "fault: RANK:STEP, that rank skips the batch of STEP"),
    ("async_save", False, "flag", "write checkpoints in the background"),
    ("keep", 0, int, "keep the newest N complete checkpoints (0: all)"),
)


def add_arguments(parser) -> None:
    for name, default, kind, text in OPTIONS:
        flag = "--" + name.replace("_", "-")
        if kind == "flag":
            parser.add_argument(flag, action="store_true", help=text)
        elif default is REQUIRED:
            parser.add_argument(flag, required=True, type=kind, help=text)
        else:
            parser.add_argument(flag, type=kind, default=default, help=text)


def argv(**values) -> list[str]:
    """The command-line arguments that make add_arguments parse `values` (defaults and None left out)."""
    known = {name: (default, kind) for name, default, kind, _ in OPTIONS}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise LaunchError(f"the controller program has no option {unknown}; its options are {sorted(known)}")
    missing = [name for name, (default, _) in known.items() if default is REQUIRED and values.get(name) is None]
    if missing:
        raise LaunchError(f"the controller program needs {missing}")
    args = []
    for name, value in values.items():
        default, kind = known[name]
        if value is None or value == default:
            continue
        flag = "--" + name.replace("_", "-")
        args += [flag] if kind == "flag" else [flag, str(os.fspath(value) if isinstance(value, os.PathLike) else value)]
    return args


def _launch_failed(args, exc: Exception) -> int:
    """Record a launch problem as this process's report (no world yet); return EXIT_STOPPED."""
    pid = runtime.launch_rank(os.environ)
    write_json(file_of(args.out, "report", pid), {"process_id": pid, "status": "stopped", "error": error_record(exc)})
    print(f"[process {pid}] stopped: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    runtime.end_mpi_job(EXIT_STOPPED)
    return EXIT_STOPPED


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shardlab.multi.program", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    args.started = time.time()
    os.makedirs(args.out, exist_ok=True)
    try:
        world = runtime.initialize(args.timeout, on_timeout=lambda exc: os._exit(_launch_failed(args, exc)))
    except ShardlabError as exc:  # a launch problem, named before (or instead of) JAX's own error
        return _launch_failed(args, exc)
    cache.keep_compiled()  # with a series' cache: this process keeps what it compiles, whatever its id

    controller = None
    try:
        controller = Controller(args, world)
        controller.run()
    except Preempted as stop:
        controller.report.update(status="preempted", message=str(stop), preempted_at=int(controller.state["step"]))
        controller.guard.close()
        controller.checkpoints.close()
        controller.write()
        print(f"[process {world.process_id}] {stop}", file=sys.stderr, flush=True)
        jax.distributed.shutdown()
        return EXIT_PREEMPTED
    except ShardlabError as exc:
        if controller is None:
            raise
        controller.stopped(exc)
        controller.guard.linger(exc)
        print(f"[process {world.process_id}] stopped: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        os._exit(EXIT_STOPPED)  # skip JAX's shutdown barrier: a peer may be gone
    except BaseException as exc:
        if controller is not None:
            controller.report.update(status="failed", error=error_record(exc))
            controller.report["traceback"] = traceback.format_exc()
            controller.write()
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    controller.report["timing"]["finished"] = time.time()
    controller.guard.close()
    if controller.checkpoints is not None:
        controller.checkpoints.close()
    controller.write()

    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
