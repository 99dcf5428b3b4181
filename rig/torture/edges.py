"""The edges around the checkpoint core: output folders, hostile restores, save refusals, leaks and Orbax.

One category per edge of the checkpoint path (docs/reliability.md). Every trial states what must happen
(refused with a shardlab error, or done exactly as asked) and is also checked for what
must never happen: a file outside its folder changed, a temporary or staging folder left
behind, a call over its time bound, a published checkpoint changed.
"""

import io
import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
import zipfile

import numpy as np

from rig.torture.outcome import Tally, tree_digest
from shardlab import orbax_io, outdir, process_group
from shardlab.core import checkpoint, files
from shardlab.core.files import sha256_file
from shardlab.core.schema import DTYPES, FIELDS
from shardlab.errors import CheckpointError, ConfigError, ShardlabError
from shardlab.io import read_npz
from shardlab.multi import manifest

BOUND = 30.0  # seconds any one trial may take (a child process included)
MEMORY_SLACK = 1 << 20  # a refused restore may cost the file's size plus this much traced memory


def _result(tally: Tally, started: float, **details) -> dict:
    result = tally.as_dict()
    result["details"] = {**details, "seconds": round(time.perf_counter() - started, 2)}
    result["clean"] = tally.clean and not details.get("memory_over_bound")
    return result


def _refusal(tally: Tally, label: str, call, errors=(ShardlabError,), bound: float = BOUND) -> str:
    """Run a call that must raise one of `errors`; count refused, wrong accept, unclear or hang."""
    started = time.perf_counter()
    try:
        call()
    except errors as exc:
        tally.errors[type(exc).__name__] += 1
        message = str(exc)
        outcome = "refused" if message.strip() and "\n" not in message.strip().splitlines()[0] else "unexpected"
        tally.count(outcome, f"{label}: refusal without a one-line message")
    except Exception as exc:
        tally.errors[type(exc).__name__] += 1
        outcome = "unexpected"
        tally.count(outcome, f"{label}: unclear {type(exc).__name__}: {str(exc)[:200]}")
    else:
        outcome = "wrong"
        tally.count(outcome, f"{label}: accepted")
    if time.perf_counter() - started > bound:
        tally.count("hang", f"{label}: over its bound of {bound} s")
    return outcome


def _staging_left(folder) -> list[str]:
    return [
        os.path.relpath(os.path.join(root, name), folder)
        for root, dirs, names in os.walk(folder)
        for name in dirs + names
        if name.startswith((outdir.STAGING, files.TEMP)) or "orbax-checkpoint-tmp" in name
    ]


# --- 1. output folders -----------------------------------------------------------------


def _publish(out, files: dict, command: str = "run", replace: bool = True, fail: bool = False) -> None:
    with outdir.writing(out, command, replace) as staging:
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(staging, rel)), exist_ok=True)
            with open(os.path.join(staging, rel), "w") as handle:
                handle.write(text)
        if fail:
            raise RuntimeError("deliberate failure inside the command")


TERM_CHILD = """
import sys, time
from shardlab import outdir
with outdir.writing(sys.argv[1], "run") as staging:
    (staging / "partial.txt").write_text("x")
    print("ready", flush=True)
    time.sleep(60)
"""


def _out(t) -> str:
    return os.path.join(t, "out")


def _holds(t, rel: str, text: str) -> bool:
    return open(os.path.join(_out(t), rel)).read() == text


BASE = {"a.ipynb": "1", "results/a.json": "{}"}
# Every command that takes an output folder, as its command line before the folder (tests/test_outdir.py too)
COMMAND_ARGV = {
    "bench": ["bench", "--out"],
    "torture": ["torture", "--reduced", "--out"],
    "drills": ["drills", "--out"],
    "check": ["check", "--stage", "1", "--output"],
    "supervise": ["supervise", "--out"],
}
# (name, setup(trial), action(trial), expect 'refused' | 'done' | 'failed', check(trial) -> bool); a setup of
# None plants a person's file at a random depth in OUT, and its check is that the file survives
FOLDER_CASES = (
    ("publish into a new folder", lambda t: None, lambda t: _publish(_out(t), BASE), "done",
     lambda t: _holds(t, "a.ipynb", "1")),
    ("rerun replaces exactly its own files", lambda t: _publish(_out(t), {**BASE, "old.txt": "o"}),
     lambda t: _publish(_out(t), {"a.ipynb": "2"}), "done",
     lambda t: not os.path.exists(os.path.join(_out(t), "old.txt")) and _holds(t, "a.ipynb", "2")),
    ("rerun keeps another command's files",
     lambda t: (_publish(_out(t), BASE), _publish(_out(t), {"t.json": "k"}, "torture")),
     lambda t: _publish(_out(t), {"a.ipynb": "3"}), "done", lambda t: _holds(t, "t.json", "k")),
    ("a person's file in OUT", None, lambda t: _publish(_out(t), BASE), "refused", None),
    ("an edited receipt", lambda t: (_publish(_out(t), BASE), open(os.path.join(_out(t), "a.ipynb"), "w").write("e")),
     lambda t: _publish(_out(t), BASE), "refused", lambda t: _holds(t, "a.ipynb", "e")),
    ("OUT is a symlink", lambda t: os.symlink(os.path.join(t, "beside"), _out(t)), lambda t: _publish(_out(t), BASE),
     "refused", None),
    ("OUT is a regular file", lambda t: open(_out(t), "w").write("f"), lambda t: _publish(_out(t), BASE), "refused",
     lambda t: open(_out(t)).read() == "f"),
    ("the parent of OUT is a file", lambda t: open(os.path.join(t, "pf"), "w").write("f"),
     lambda t: _publish(os.path.join(t, "pf", "out"), BASE), "refused", None),
    ("an earlier run without --replace", lambda t: _publish(_out(t), BASE),
     lambda t: _publish(_out(t), BASE, replace=False), "refused", None),
    ("a failing command keeps the earlier files", lambda t: _publish(_out(t), BASE),
     lambda t: _publish(_out(t), {"a.ipynb": "half"}, fail=True), "failed", lambda t: _holds(t, "a.ipynb", "1")),
    ("a killed run's staging is cleared", lambda t: (_publish(_out(t), BASE), _dead_staging(_out(t))),
     lambda t: _publish(_out(t), BASE), "done", lambda t: not _staging_left(_out(t))),
    ("a notebook path instead of a name", lambda t: None, lambda t: _run_paths(_out(t)), "refused", None),
    ("SIGTERM during a run", lambda t: _publish(_out(t), BASE), lambda t: _sigterm(_out(t)), "done",
     lambda t: _holds(t, "a.ipynb", "1")),
) + tuple(
    (f"`{command}` into a folder with foreign files", None, lambda t, c=command: _cli(c, _out(t)), "refused", None)
    for command in COMMAND_ARGV
)  # fmt: skip


def _planted(rng) -> tuple:
    """A setup that plants a person's file at a random depth in OUT, and the check that it survived."""
    depth = int(rng.integers(0, 3))
    rel = "/".join([f"d{k}" for k in range(depth)] + [f"notes-{int(rng.integers(1000))}.md"])

    def setup(t):
        path = os.path.join(_out(t), rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write("a person's notes")

    return setup, lambda t: _holds(t, rel, "a person's notes")


def _scenarios(rng, count: int) -> list[tuple]:
    """`count` cases of FOLDER_CASES in turn, each planted file drawn anew."""
    plans = []
    for i in range(count):
        name, setup, action, expect, check = FOLDER_CASES[i % len(FOLDER_CASES)]
        if setup is None:
            setup, check = _planted(rng)
        plans.append((name, setup, action, expect, check))
    return plans


def _ended_pid() -> int:
    """The pid of a process that has ended and been reaped: what it names is a dead writer's."""
    dead = process_group.spawn([sys.executable, "-c", "pass"])
    process_group.kill(dead)  # ended, by itself or by the kill, and reaped
    return dead.pid


def _dead_staging(out) -> None:
    os.makedirs(os.path.join(out, f"{outdir.STAGING}{_ended_pid()}-x", "sub"))


def _run_paths(out) -> None:
    from shardlab.course import execute

    execute.run(out, 17, 7, notebooks=["../../../../tmp/notebooks/stage1_batches"], html=False)


def _sigterm(out) -> None:
    child = process_group.spawn([sys.executable, "-c", TERM_CHILD, out], stdout=subprocess.PIPE, text=True)
    try:
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("the SIGTERM child did not start")
        child.send_signal(signal.SIGTERM)  # to the process alone, as a scheduler stops a job
        child.wait(timeout=BOUND)
    finally:
        process_group.kill(child)


RIG_COMMANDS = ("torture", "bench")  # the rig's campaigns that take an output folder: `python -m rig.<name>`


def run_command(argv: list[str]) -> int:
    """`python -m shardlab ARGV` here, or `python -m rig.NAME ARGV[1:]` when ARGV starts with a RIG_COMMANDS name."""
    if argv[:1] and argv[0] in RIG_COMMANDS:
        import importlib

        return importlib.import_module(f"rig.{argv[0]}").command(argv[1:])
    from shardlab.__main__ import main

    return main(argv)


def _cli(command: str, out) -> None:
    from contextlib import redirect_stderr, redirect_stdout

    with redirect_stderr(io.StringIO()) as err, redirect_stdout(io.StringIO()):
        code = run_command([*COMMAND_ARGV[command], out])
    if code:
        raise ConfigError(err.getvalue().strip().splitlines()[-1])


def _act(tally: Tally, name: str, action, expect: str, trial: str) -> str:
    """Run one case's action and count it against what it must do: 'refused', 'failed', 'done' or 'unexpected'."""
    began = time.perf_counter()
    try:
        action(trial)
    except (ShardlabError, RuntimeError) as exc:
        outcome = "refused" if expect == "refused" and isinstance(exc, ShardlabError) else "failed"
        if expect not in ("refused", "failed") or (expect == "failed") != (outcome == "failed"):
            tally.count("wrong", f"{name}: raised {type(exc).__name__}: {str(exc)[:160]}")
        elif outcome == "refused":
            tally.errors[type(exc).__name__] += 1
            tally.count("refused")
        else:
            tally.count("exact")
    except Exception as exc:
        outcome = "unexpected"
        tally.count("unexpected", f"{name}: unclear {type(exc).__name__}: {str(exc)[:160]}")
    else:
        outcome = "done"
        tally.count("exact" if expect == "done" else "wrong", f"{name}: was not refused")
    if time.perf_counter() - began > BOUND:
        tally.count("hang", f"{name}: over {BOUND} s")
    return outcome


def output_folders(trials: int, folder, seed: int) -> dict:
    """Every command's output-folder policy, scenario by scenario; nothing beside OUT may change."""
    started, tally, rng = time.perf_counter(), Tally(), np.random.default_rng(seed)
    rows = []
    for i, (name, setup, action, expect, check) in enumerate(_scenarios(rng, trials)):
        trial = os.path.join(os.fspath(folder), f"trial-{i:03d}")
        os.makedirs(os.path.join(trial, "beside"))
        with open(os.path.join(trial, "beside", "keep.txt"), "w") as handle:
            handle.write("beside OUT: never touched")
        setup(trial)
        beside, listing = tree_digest(os.path.join(trial, "beside")), sorted(set(os.listdir(trial)) - {"out"})
        tally.trials += 1
        outcome = _act(tally, name, action, expect, trial)
        if check is not None and outcome != "unexpected" and not check(trial):
            tally.count("lost", f"{name}: a file that had to survive changed")
        if tree_digest(os.path.join(trial, "beside")) != beside or sorted(set(os.listdir(trial)) - {"out"}) != listing:
            tally.count("outside", f"{name}: something beside OUT changed")
        left = _staging_left(trial)
        if left:
            tally.count("leak", f"{name}: left {left[:3]}")
        rows.append({"case": name, "outcome": outcome})
    return _result(tally, started, cases=rows)


# --- 2. restore under hostile input ----------------------------------------------------


def _peak(call):
    """(exception or None, value, peak traced bytes)."""
    tracemalloc.start()
    try:
        value, error = call(), None
    except Exception as exc:
        value, error = None, exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return error, value, peak


def bomb(path, members: dict, values: int, big=("weights", "momentum")) -> None:
    """A zip of `members` as .npy, each member in `big` replaced by a deflated array declaring `values` zeros."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, value in members.items():
            if name not in big:
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, np.asarray(value), allow_pickle=False)
                archive.writestr(f"{name}.npy", buffer.getvalue())
                continue
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (values,)})
            info = zipfile.ZipInfo(f"{name}.npy")
            info.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(info, "w", force_zip64=True) as out:
                out.write(header.getvalue())
                chunk = bytes(1 << 22)
                for _ in range(values * 4 // len(chunk)):
                    out.write(chunk)


def forged(path, state: dict, contract: dict, **fields) -> str:
    """A file in save's exact format, integrity recomputed, with `fields` replaced (a forgery, not damage)."""
    arrays = {**checkpoint.to_arrays(state), **{k: np.asarray(v, DTYPES[k]) for k, v in fields.items()}}
    arrays["contract"] = np.asarray(json.dumps(contract, sort_keys=True))
    arrays["integrity"] = np.asarray(checkpoint.integrity(arrays))
    with open(path, "xb") as handle:
        np.savez(handle, **arrays)
    return path


# Saved contracts of JSON shapes no contract has; restore refuses each by name (tests/test_hostile.py too)
CONTRACT_TEXTS = ("[1, 2]", '"s"', "{}", "null", "1e999", '{"seed": NaN}', '"a string"', '{"schema_version": true}')
_HEAD = '{"format_version": 1, "status": "complete", "step": 3'
# Manifests (written latin-1) that read refuses by name and scan ignores (tests/test_hostile.py too)
MANIFEST_BODIES = (
    "[1]", '"s"', "null", "7", _HEAD + ', "files": []}', _HEAD + ', "files": {"piece": 1}}', "[" * 100_000,
    "[1, 2]", '"complete"', "3", _HEAD + ', "files": {"piece": 1}, "state": {}}', _HEAD.replace("1", "true", 1) + "}",
    "\xff\xfe not utf-8",
)  # fmt: skip


def _hostile_files(add, base: dict, n: int, rng) -> None:
    """Bombs, nested and odd JSON, byte order, prepended bytes and special files, each `add`ed by name."""
    members, raw, good = base["members"], base["raw"], base["good"]
    for values in [1 << 22, 1 << 25][: max(1, min(2, n))]:
        add(f"deflated members declaring {values} values", lambda p, v=values: bomb(p, members, v))
    for depth in (100_000, 3_000, 500)[: max(1, n // 2)]:
        nested = np.asarray("[" * depth + "]" * depth)
        add(f"contract nested {depth} deep", lambda p, x=nested: np.savez(p, **{**members, "contract": x}))
    for text in CONTRACT_TEXTS[: max(2, n)]:
        add(f"contract {text}", lambda p, t=text: np.savez(p, **{**members, "contract": np.asarray(t)}))
    for name in FIELDS:
        swapped = members[name].astype(members[name].dtype.newbyteorder(">"))
        add(f"{name} byte-swapped", lambda p, m=name, x=swapped: np.savez(p, **{**members, m: x}))
    for _ in range(max(1, n)):
        junk = rng.integers(0, 256, size=int(rng.integers(1, 300)), dtype=np.uint8).tobytes()
        add(f"{len(junk)} bytes prepended", lambda p, j=junk: open(p, "wb").write(j + raw))
    add("a FIFO", lambda p: os.mkfifo(p))
    add("a folder", lambda p: os.mkdir(p))
    add("a symlink to the good file", lambda p: os.symlink(good, p))


def _forgeries(add, states: list[dict], contract: dict, other_seed_key, n: int, rng) -> None:
    """States no run reaches (checksum recomputed), each `add`ed by name."""
    for k in range(max(3, 4 * n)):
        base = states[int(rng.choice(len(states)))]
        fields = [
            {"step": 2**63 - 1},
            {"step": 0, "cursor": 7},
            {"cursor": 3},
            {"order": np.arange(len(base["order"]))},
            {"key": other_seed_key},
            {"step": int(base["step"]) + 4 * int(rng.integers(1, 5)) + 1},
        ][k % 6]
        add(
            f"forged state {sorted(fields)} at step {int(base['step'])}",
            lambda p, b=base, f=fields: forged(p, b, contract, **f),
        )


def hostile_restore(scale: float, folder, states: list[dict], contract: dict, other_seed_key, mesh, seed: int) -> dict:
    """Bombs, nested JSON, byte order, prepended bytes, special files, forged states and manifests."""
    started, tally, rng = time.perf_counter(), Tally(), np.random.default_rng(seed)
    folder = os.fspath(folder)
    os.makedirs(folder)
    good = checkpoint.save(os.path.join(folder, "good.npz"), states[-1], contract)
    base, digest = {"members": read_npz(good), "raw": open(good, "rb").read(), "good": good}, sha256_file(good)
    legit_error, _, legit_peak = _peak(lambda: checkpoint.restore(good, contract, mesh))
    if legit_error is not None:
        raise RuntimeError(f"the base checkpoint does not restore: {legit_error}")
    paths = []

    def add(name, write):
        path = os.path.join(folder, f"{len(paths):03d}-{name.replace(' ', '_')}.npz")
        write(path)
        paths.append((name, path))

    n = max(1, round(6 * scale))
    _hostile_files(add, base, n, rng)
    _forgeries(add, states, contract, other_seed_key, n, rng)
    over, peaks = [], []
    for name, path in paths:
        tally.trials += 1
        error, value, peak = _peak(lambda p=path: _timed(lambda: checkpoint.restore(p, contract, mesh)))
        _classify(tally, name, error, value, None)
        size = os.path.getsize(path) if os.path.isfile(path) and not os.path.islink(path) else 0
        peaks.append(peak)
        if peak > legit_peak + size + MEMORY_SLACK:
            over.append({"case": name, "peak_bytes": peak})
    tally.trials += 1
    _classify(tally, "manifest shapes", *_manifests(os.path.join(folder, "shared")), None)
    if sha256_file(good) != digest:
        tally.count("lost", "the good checkpoint changed")
    max_peak = max(peaks, default=None)
    cases = [name for name, _ in paths]
    return _result(tally, started, legit_restore_peak_bytes=legit_peak, memory_over_bound=over,
                   max_refused_peak_bytes=max_peak, cases=cases)  # fmt: skip


def _timed(call):
    began = time.perf_counter()
    try:
        return call()
    finally:
        if time.perf_counter() - began > BOUND:
            raise TimeoutError(f"took {time.perf_counter() - began:.1f} s")


def _classify(tally: Tally, name: str, error, value, expected) -> None:
    if isinstance(error, TimeoutError):
        tally.count("hang", f"{name}: {error}")
    elif isinstance(error, CheckpointError):
        tally.errors[type(error).__name__] += 1
        tally.count("refused")
    elif error is not None:
        tally.errors[type(error).__name__] += 1
        tally.count("unexpected", f"{name}: unclear {type(error).__name__}: {str(error)[:160]}")
    elif expected is None:
        tally.count("wrong", f"{name}: accepted")
    else:
        tally.count("exact")


def _manifests(shared) -> tuple:
    """Every JSON shape and a FIFO as a manifest: read refuses each by name, scan ignores each; (error, None)."""
    os.makedirs(manifest.step_dir(shared, 3))
    with open(os.path.join(manifest.step_dir(shared, 3), "piece"), "w") as handle:
        handle.write("x")
    path = manifest.manifest_path(shared, 3)
    os.makedirs(os.path.dirname(path))
    for body in [*MANIFEST_BODIES, None]:
        if os.path.lexists(path):
            os.unlink(path)
        if body is None:
            os.mkfifo(path)
        else:
            with open(path, "w", encoding="latin-1") as handle:
                handle.write(body)
        try:
            _timed(lambda: manifest.read(shared, 3))
        except CheckpointError:
            pass
        except Exception as exc:
            return exc, None
        else:
            return None, None
        if manifest.scan(shared)["complete"]:
            return None, None
    return CheckpointError("every manifest shape refused"), None


# --- 3. save refuses what it would silently change ---------------------------------------


def silent_values(rows: int) -> dict:
    """State values that save would have to change to store, by name: each must be refused (tests too)."""
    return {
        "cursor 3.7": {"cursor": 3.7},
        "cursor True": {"cursor": True},
        "step True": {"step": True},
        "step 5.9": {"step": 5.9},
        "step 2**63": {"step": 2**63},
        "step -1": {"step": -1},
        "key [-1, 5]": {"key": np.array([-1, 5], np.int64)},
        "key [2**32, 5]": {"key": np.array([2**32, 5], np.int64)},
        "key as floats": {"key": np.array([1.5, 2.0])},
        "order beyond int32": {"order": np.r_[np.arange(rows - 1), 2**32 + 1]},
        "order as floats": {"order": np.arange(rows) + 0.5},
        "weights as text": {"weights": ["a"] * 8},
        "weights as strings": {"weights": np.array(["1"] * 8)},
        "cursor past the end": {"cursor": rows + 1},
        "weights NaN": {"weights": np.full(8, np.nan, np.float32)},
    }


# Contracts no save or restore may take, as changes of a good one (tests/test_hostile.py too)
MALFORMED_CONTRACTS = {
    "contract {}": lambda c: {},
    "contract without seed": lambda c: {k: v for k, v in c.items() if k != "seed"},
    "contract batch_size True": lambda c: {**c, "batch_size": True},
    "contract a list": lambda c: [c],
    "contract shape as text": lambda c: {**c, "features_shape": "23x8"},
}


def save_refusals(folder, states: list[dict], contract: dict) -> dict:
    """Values save would have to change, malformed contracts, a parent that is a file: each refused, nothing written."""
    started, tally = time.perf_counter(), Tally()
    folder = os.fspath(folder)
    os.makedirs(folder)
    values = silent_values(len(states[-1]["order"]))
    contracts = {name: change(contract) for name, change in MALFORMED_CONTRACTS.items()}
    cases = [(f"save({n})", {**states[k % len(states)], **v}, contract) for k, (n, v) in enumerate(values.items())]
    cases += [(f"save({n})", states[-1], c) for n, c in contracts.items()]
    with open(os.path.join(folder, "a_file"), "w") as handle:
        handle.write("f")
    target = os.path.join(folder, "x.npz")
    cases = [
        (name, lambda s=state, c=contract_: checkpoint.save(target, s, c), (CheckpointError,))
        for name, state, contract_ in cases
    ]
    cases.append(
        (
            "save(parent is a file)",
            lambda: checkpoint.save(os.path.join(folder, "a_file", "x.npz"), states[-1], contract),
            (checkpoint.CheckpointWriteError,),
        )
    )
    for name, call, kinds in cases:  # each refused with nothing written: the folder as it was before it
        before = tree_digest(folder)
        tally.trials += 1
        outcome = _refusal(tally, name, call, kinds)
        if outcome == "refused" and tree_digest(folder) != before:
            tally.count("lost", f"a refused {name} changed the folder")
        if os.path.exists(target):
            tally.count("wrong", f"a refused {name} wrote x.npz")
            os.unlink(target)
    return _result(tally, started)


# --- 4. stale temporaries ------------------------------------------------------------------


def stale_temporaries(trials: int, folder, states: list[dict], contract: dict, mesh, seed: int) -> dict:
    """Dead savers' temporaries go at the next save; live ones, foreign files and published checkpoints stay."""
    started, tally, rng = time.perf_counter(), Tally(), np.random.default_rng(seed)
    folder = os.fspath(folder)
    for i in range(trials):
        trial = os.path.join(folder, f"trial-{i:03d}")
        os.makedirs(trial)
        published = checkpoint.save(os.path.join(trial, "published.npz"), states[i % len(states)], contract)
        raw, digest = open(published, "rb").read(), sha256_file(published)
        dead, stale = _ended_pid(), []
        for k in range(int(rng.integers(1, 6))):
            name = os.path.join(trial, f"{files.TEMP}{dead}-{k}.npz")
            kind = int(rng.integers(4))
            if kind == 3:
                os.link(published, name)
            else:
                with open(name, "wb") as handle:
                    handle.write((raw, b"", raw[: int(rng.integers(1, len(raw)))])[kind])
            stale.append(name)
        keep = [os.path.join(trial, f"{files.TEMP}{os.getpid()}-live.npz"), os.path.join(trial, ".tmp-notes.npz")]
        for name in keep:
            with open(name, "wb") as handle:
                handle.write(b"not the cleaner's to remove")
        tally.trials += 1
        try:
            checkpoint.save(os.path.join(trial, "next.npz"), states[(i + 1) % len(states)], contract)
        except Exception as exc:
            tally.count("unexpected", f"trial {i}: {type(exc).__name__}: {exc}")
            continue
        left = [n for n in stale if os.path.lexists(n)]
        if left:
            tally.count("leak", f"trial {i}: {len(left)} stale temporaries survived the next save")
        if not all(os.path.exists(n) for n in keep):
            tally.count("lost", f"trial {i}: a temporary of a live saver or a foreign file was removed")
        if sha256_file(published) != digest or os.stat(published).st_nlink != 1 + sum(
            os.path.exists(n) and os.path.samefile(n, published) for n in stale
        ):
            tally.count("lost", f"trial {i}: the published checkpoint changed")
        outcome = tally.attempt(
            f"trial {i}", lambda p=published: checkpoint.restore(p, contract, mesh), states[i % len(states)], BOUND
        )
        if outcome != "exact":
            tally.count("lost", f"trial {i}: the published checkpoint no longer restores exactly")
    return _result(tally, started)


# --- 5. Orbax ----------------------------------------------------------------------------

FULL_DISK_CHILD = """
import json, resource, signal, sys, time
import shardlab as sl
sl.setup_devices(4)
from shardlab import orbax_io
from shardlab.errors import CheckpointWriteError
mesh, data = sl.make_mesh(), sl.teaching_fixture()
state, contract = sl.initial(17, data, mesh), sl.contract(data, sl.Config())
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
started = time.perf_counter()
try:
    orbax_io.save(sys.argv[1], state, contract)
except CheckpointWriteError as exc:
    print(json.dumps({"refused": True, "seconds": time.perf_counter() - started}), flush=True)
else:
    print(json.dumps({"refused": False}), flush=True)
"""


def _damaged_copies(folder: str, state: dict, contract: dict) -> list[str]:
    """Orbax checkpoints whose contract file is damaged or missing, and one with damaged state metadata."""
    damaged = []
    for body in (b"{not json", b"\xff\xfe", b"[1]", b'{"contract": {}, "state": {}}', None):
        copy = os.path.join(folder, f"contract-{len(damaged)}")
        orbax_io.save(copy, state, contract)
        target = os.path.join(copy, orbax_io.CONTRACT)
        os.unlink(target)
        if body is not None:
            with open(target, "wb") as handle:
                handle.write(body)
        damaged.append(copy)
    meta = os.path.join(folder, "metadata")
    orbax_io.save(meta, state, contract)
    for root, _, names in os.walk(os.path.join(meta, orbax_io.STATE)):
        for name in names:
            if "metadata" in name.lower():
                with open(os.path.join(root, name), "wb") as handle:
                    handle.write(b"\xff\xfe{ damaged")
    return damaged + [meta]


def _full_disk(tally: Tally, folder: str, k: int) -> None:
    """One Orbax save in a child whose file system fills up: it must be refused, fast, leaving nothing."""
    tally.trials += 1
    target = os.path.join(folder, f"full-{k}", "ckpt")
    began = time.perf_counter()
    done = process_group.run(
        [sys.executable, "-c", FULL_DISK_CHILD, target, str(300 + 400 * k)],
        300,
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tally.count("unexpected", f"full disk {k}: exit {done.returncode}: {done.stderr[-300:]}")
    elif lines[0]["refused"]:
        tally.errors["CheckpointWriteError"] += 1
        tally.count("refused")
    else:
        tally.count("wrong", f"full disk {k}: the save claimed success")
    if time.perf_counter() - began > 2 * BOUND:
        tally.count("hang", f"full disk {k}: the process took {time.perf_counter() - began:.0f} s to exit")
    left = os.listdir(os.path.dirname(target)) if os.path.isdir(os.path.dirname(target)) else []
    if left:
        tally.count("leak", f"full disk {k}: left {left}")


def orbax(children: int, folder, states: list[dict], contract: dict, foreign: dict, mesh) -> dict:
    """Contract-first restore, damaged metadata, failing saves (a file as parent, a full file system in a child)."""
    started, tally = time.perf_counter(), Tally()
    folder = os.fspath(folder)
    os.makedirs(folder)
    state = states[-1]
    good = orbax_io.save(os.path.join(folder, "good"), state, contract)
    tally.trials += 1
    tally.attempt("valid Orbax checkpoint", lambda: orbax_io.restore(good, contract, mesh), state, BOUND)
    tally.trials += 1
    _refusal(tally, "another experiment's contract", lambda: orbax_io.restore(good, foreign, mesh), (CheckpointError,))
    for path in _damaged_copies(folder, state, contract):
        tally.trials += 1
        restore = lambda p=path: orbax_io.restore(p, contract, mesh)  # noqa: E731
        _refusal(tally, f"restore {os.path.basename(path)}", restore, (CheckpointError,))
    with open(os.path.join(folder, "a_file"), "w") as handle:
        handle.write("f")
    tally.trials += 1
    save = lambda: orbax_io.save(os.path.join(folder, "a_file", "c"), state, contract)  # noqa: E731
    _refusal(tally, "save with a file as parent", save, (CheckpointError,), bound=10)
    for k in range(children):
        _full_disk(tally, folder, k)
    if _staging_left(folder):
        tally.count("leak", f"left {_staging_left(folder)[:3]}")
    return _result(tally, started)
