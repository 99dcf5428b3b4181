"""`python -m shardlab supervise`: a supervised multi-controller training job from the command line.

    python -m shardlab supervise --processes 2 --local-devices 2 --steps 200 --save-every 10 \
        [--async-save] [--keep 2] [--budget 3] [--launch explicit|slurm|mpirun] --out DIR

The supervisor starts the group, prints one line when each attempt starts (its controllers'
process ids, so another shell can kill one) and one when it ends (what failed, how fast it
was seen, where the next attempt resumes), and restarts the whole group from the newest
complete checkpoint until the run completes or the restart budget is spent. OUT receives,
through the output-folder policy (`shardlab.outdir`): `ledger.json` (attempts, failures, the
goodput ledger, the stitched path against a one-process control), `supervisor.json` (every
attempt's reports and progress events, under attempts/) and the checkpoints (shared/).
Processes on one host with logical CPU devices: this is not a cluster, and its times are
this machine's. With `--budget 0` the group is launched once, and compared with one process.
"""

import os
import sys

from shardlab.cli import add_run_arguments, count, natural, seconds
from shardlab.errors import ConfigError, ShardlabError
from shardlab.multi.wait_guard import TIMEOUT


def add_arguments(parser) -> None:
    from shardlab.multi import group_supervisor, runtime

    out = "supervise_out"
    parser.add_argument("--processes", type=count, default=2, help="controller processes (default 2)")
    parser.add_argument("--local-devices", type=count, default=2, help="logical CPU devices per process (default 2)")
    parser.add_argument("--steps", type=count, default=10, help="train until this many updates are done (default 10)")
    parser.add_argument("--save-every", type=natural, default=3, help="save every K steps, 0: never (default 3)")
    parser.add_argument("--async-save", action="store_true", help="write checkpoints in the background")
    parser.add_argument("--keep", type=natural, default=0, help="keep the newest N complete checkpoints (0: all)")
    parser.add_argument(
        "--budget",
        type=natural,
        default=group_supervisor.BUDGET,
        help=f"restarts allowed (default {group_supervisor.BUDGET})",
    )
    parser.add_argument(
        "--launch", default="explicit", choices=runtime.LAUNCHES, help="how the group starts (default explicit)"
    )
    parser.add_argument(
        "--timeout", type=seconds, default=TIMEOUT, help=f"bound of every wait, s (default {TIMEOUT:g})"
    )
    add_run_arguments(parser)
    parser.add_argument("--out", default=out, help=f"folder for ledger.json and the checkpoints (default {out})")


def check(args) -> None:
    """Refuse combinations no group can run with (ConfigError), or a launch this machine lacks (LaunchError).

    Each argument's own range is its value type's (shardlab.cli): the parser refused it already.
    """
    from shardlab.multi import launcher

    if args.keep and not args.save_every:
        raise ConfigError(f"--keep {args.keep} needs --save-every above 0 and a count of at least 1 (0 keeps all)")
    if args.async_save and not args.save_every:
        raise ConfigError("--async-save needs --save-every above 0: nothing would be saved")
    if args.launch == "mpirun":
        launcher.mpiexec()  # names the missing MPI runtime before anything starts


def announce(text: str) -> None:
    """One progress line of the supervised job (a reader sees each attempt start and end)."""
    print(f"[supervise] {text}", flush=True)


def started(k: int, port: int, resume: str, procs: dict) -> None:
    """The line printed as attempt k starts."""
    pids = ", ".join(f"p{q}={proc.pid}" for q, proc in procs.items())
    announce(f"attempt {k}: started on port {port}, resume {resume}; pids {pids}")


def ended(record: dict) -> None:
    """The line printed as an attempt ends."""
    from shardlab.multi import ledger

    event, k = record["event"], record["attempt"]
    steps = [e["step"] for e in ledger.events(record) if e["event"] == "step"]
    done = f"steps {steps[0]}..{steps[-1]}" if steps else "no step"
    if event["kind"] == "complete":
        announce(f"attempt {k}: complete ({done}), teardown {record['teardown_s']:.2f} s")
        return
    detect, pid = record.get("detect_s"), event.get("process")
    last = (record["progress"].get(pid) or [{}])[-1].get("t") if pid is not None else None
    if detect is not None:
        seen = f", seen {detect:.2f} s after the fault"
    elif last is not None:  # a failure from outside (another shell): bounded by its last progress event
        seen = f", seen {event['time'] - last:.2f} s after its last progress event"
    else:
        seen = ""
    who = "" if pid is None else f"process {pid} "
    announce(f"attempt {k}: {event['kind']}: {who}{event.get('cause')} ({done}{seen})")


def summary(result: dict, reference: dict, steps: int) -> dict:
    """ledger.json: per attempt what happened, the goodput ledger and the stitched path against the control."""
    from shardlab.multi import ledger

    attempts = [
        {
            "attempt": a["attempt"],
            "port": a["port"],
            "resume": a["resume"],
            "resumed_from": ledger.resumed_from(a),
            "kind": a["event"]["kind"],
            "process": a["event"].get("process"),
            "cause": a["event"].get("cause"),
            "detect_s": a.get("detect_s"),
            "exit_codes": a["exit_codes"],
        }
        for a in result["attempts"]
    ]
    keys = ("world", "launch", "budget", "failures", "restarts", "completed", "error", "bounds", "wall_s")
    return {
        **{k: result[k] for k in keys},
        "attempts": attempts,
        "steps_lost": ledger.wasted_steps(result),
        "goodput": ledger.goodput(result),
        "against_single_process": ledger.against_control(result, reference, steps),
        "note": "controller processes on one host with logical CPU devices: not a cluster; times are this machine's",
    }


def run(args, staging) -> dict:
    """Supervise the job into `staging`; write ledger.json beside supervisor.json; return the ledger."""
    from shardlab.io import write_json
    from shardlab.multi import control, group_supervisor

    result = group_supervisor.supervise(
        os.path.join(staging, "attempts"),
        os.path.join(staging, "shared"),
        args.processes,
        args.local_devices,
        steps=args.steps,
        save_every=args.save_every,
        seed=args.seed,
        batch_size=args.batch_size,
        timeout=args.timeout,
        budget=args.budget,
        async_save=args.async_save,
        keep=args.keep,
        launch=args.launch,
        on_start=started,
        on_attempt=ended,
    )
    reference = control.run(args.seed, args.batch_size, args.steps)
    found = summary(result, reference, args.steps)
    write_json(os.path.join(staging, "ledger.json"), found)
    return found


def main(args) -> int:
    from shardlab import outdir

    try:
        check(args)
        world = f"{args.processes} processes x {args.local_devices} logical CPU devices, launch {args.launch}"
        announce(f"{world}; {args.steps} steps, save every {args.save_every}, restart budget {args.budget}")
        with outdir.writing(args.out, "supervise") as staging:
            found = run(args, staging)
    except ShardlabError as exc:
        print(f"[supervise] {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    path = found["against_single_process"]
    goodput = found["goodput"]
    announce(
        f"completed: {found['completed']} after {found['restarts']} restart(s), {found['failures']} failure(s), "
        f"steps lost {sum(found['steps_lost'])}; path equals one process: {path['matches']} "
        f"(max |dw| {path.get('max_weight_diff', float('nan')):.1e}); productive {goodput['productive_fraction']:.1%} "
        f"of {goodput['total']:.1f} s"
    )
    if found["error"]:
        announce(f"{found['error']['type']}: {found['error']['message']}")
    announce(f"ledger: {os.path.join(args.out, 'ledger.json')}")
    return 0 if found["completed"] and path["matches"] else 1
