"""`python -m shardlab torture`: kill, corrupt and misuse the checkpoint path and the output folders; count it.

Categories: kills during save, corrupted files, bad parameters, the multi-process save
path of stage 5, and one per edge of the checkpoint path (output folders, hostile
restores, save refusals, stale temporaries, the Orbax path) plus a hypothesis fuzzer over
NPZ structure and contract JSON. Per category torture.json reports trials, refused,
restored_exact and five failure columns that must be 0 (wrong_accepts, lost,
unclear_errors, leaks, hangs, writes_outside_out); the command exits 1 otherwise. Seeds
are fixed; kill *timings* still depend on the machine's load, which is why every kill
records where it landed. Every file of the campaign is written inside OUT.
"""

import os
import platform
import shutil
import sys
import tempfile
import time

CATEGORIES = (
    "kill_during_save",
    "corrupted_files",
    "bad_parameters",
    "multi_process",
    "output_folders",
    "hostile_restore",
    "save_refusals",
    "stale_temporaries",
    "orbax",
    "fuzz",
)
FULL = {
    "kill_trials": 100,
    "corrupt_scale": 1.0,
    "multi_trials": 10,
    "folder_trials": 51,
    "hostile_scale": 1.0,
    "stale_trials": 30,
    "orbax_children": 3,
    "fuzz_examples": 400,
}
REDUCED = {
    "kill_trials": 16,
    "corrupt_scale": 0.12,
    "multi_trials": 1,
    "folder_trials": 17,
    "hostile_scale": 0.2,
    "stale_trials": 3,
    "orbax_children": 1,
    "fuzz_examples": 25,
}
MINIMUM = {"kill_during_save": 50, "corrupted_files": 200, "multi_process": 10}  # fewest trials a campaign runs
TOTAL_MINIMUM = 500  # trials of a full campaign


def campaign(reduced: bool = False, seed: int = 0, only=CATEGORIES, mesh=None, work=None) -> dict:
    """Run the chosen categories (full or reduced sizes) in `work` (a scratch folder if None); return the report."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="shardlab-torture-") as scratch:
            return campaign(reduced, seed, only, mesh, scratch)

    import shardlab as sl
    from shardlab.torture import badparams, corrupt, edges, fuzz, killsave, multi, subjects
    from shardlab.torture.outcome import FAILURES

    sizes = REDUCED if reduced else FULL
    mesh = mesh if mesh is not None else sl.make_mesh()
    started = time.perf_counter()
    data, config, contract = subjects.experiment()
    _, _, foreign = subjects.experiment(seed=29, batch_size=10)
    states = subjects.trajectory(sizes["kill_trials"] + 1, mesh)
    other_key = sl.host_copy(sl.initial(18, data, mesh))["key"]
    report = {"mode": "reduced" if reduced else "full", "seed": seed, "categories": {}}
    work = os.fspath(work)
    os.makedirs(work, exist_ok=True)

    def at(name):
        return os.path.join(work, name)

    runs = {
        "kill_during_save": lambda: killsave.run(sizes["kill_trials"], at("kill"), states, contract, mesh, seed),
        "corrupted_files": lambda: corrupt.run(
            sizes["corrupt_scale"], at("corrupt"), states, contract, foreign, mesh, seed + 1
        ),
        "bad_parameters": lambda: badparams.run(at("bad"), data, config, contract, states[-1], mesh, not reduced),
        "multi_process": lambda: multi.run(sizes["multi_trials"], at("multi"), seed + 2),
        "output_folders": lambda: edges.output_folders(sizes["folder_trials"], at("folders"), seed + 3),
        "hostile_restore": lambda: edges.hostile_restore(
            sizes["hostile_scale"], at("hostile"), states[:12], contract, other_key, mesh, seed + 4
        ),
        "save_refusals": lambda: edges.save_refusals(at("save"), states[:12], contract),
        "stale_temporaries": lambda: edges.stale_temporaries(
            sizes["stale_trials"], at("stale"), states[:12], contract, mesh, seed + 5
        ),
        "orbax": lambda: edges.orbax(sizes["orbax_children"], at("orbax"), states, contract, foreign, mesh),
        "fuzz": lambda: fuzz.run(sizes["fuzz_examples"], at("fuzz"), states[-1], contract, mesh, seed + 6),
    }
    folders = {
        "kill_during_save": "kill",
        "corrupted_files": "corrupt",
        "bad_parameters": "bad",
        "multi_process": "multi",
        "output_folders": "folders",
        "hostile_restore": "hostile",
        "save_refusals": "save",
        "stale_temporaries": "stale",
        "orbax": "orbax",
        "fuzz": "fuzz",
    }
    beside = _listing(os.path.dirname(os.path.abspath(work)), os.path.basename(work))
    for name in only:
        result = runs[name]()
        for column in FAILURES + ("trials", "refused", "restored_exact"):
            result.setdefault(column, 0)
        stray = sorted(set(os.listdir(work)) - {folders[n] for n in CATEGORIES})
        if stray:
            result["writes_outside_out"] += len(stray)
            result.setdefault("failures", []).append(f"wrote {stray} outside its own folder")
            result["clean"] = False
        report["categories"][name] = result
    outside = sorted(_listing(os.path.dirname(os.path.abspath(work)), os.path.basename(work)) ^ beside)
    report["writes_beside_work"] = outside
    report["trials"] = sum(c.get("trials", 0) for c in report["categories"].values())
    report["ok"] = not outside and all(
        c.get("clean", False) and all(c.get(k, 0) == 0 for k in FAILURES) for c in report["categories"].values()
    )
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    report["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0]}
    return report


def _listing(folder: str, skip: str) -> set:
    return {name for name in os.listdir(folder) if name != skip}


def summary(report: dict) -> str:
    """A fixed-width table of the counts, the kill landings, and the verdict."""
    from shardlab.torture.outcome import COLUMNS

    short = {
        "restored_exact": "exact",
        "wrong_accepts": "wrong",
        "unclear_errors": "unclear",
        "writes_outside_out": "outside",
    }
    lines = [f"{'category':<18}" + "".join(f"{short.get(k, k):>9}" for k in COLUMNS) + f"{'seconds':>9}"]
    for name, c in report["categories"].items():
        if c.get("status") == "unavailable":
            lines.append(f"{name:<18}  unavailable: {c['reason']}")
            continue
        lines.append(
            f"{name:<18}" + "".join(f"{c.get(k, 0):>9}" for k in COLUMNS) + f"{c['details'].get('seconds', 0):>9}"
        )
    kills = report["categories"].get("kill_during_save")
    if kills:
        lines.append(f"kill landed after: {kills['details']['kill_landed_after']}")
    for name, c in report["categories"].items():
        lines += [f"  {name}: {f}" for f in c.get("failures", [])]
        over = c.get("details", {}).get("memory_over_bound")
        if over:
            lines.append(f"  {name}: {len(over)} refusal(s) over the memory bound, e.g. {over[0]}")
        if name in MINIMUM and report["mode"] == "full" and c.get("trials", 0) < MINIMUM[name]:
            lines.append(f"  {name}: only {c.get('trials', 0)} trials, the campaign asks for {MINIMUM[name]}")
    if report.get("writes_beside_work"):
        lines.append(f"  wrote beside its folder: {report['writes_beside_work']}")
    verdict = "OK: every failure column is 0" if report["ok"] else "FAILED (or incomplete): see above"
    lines.append(f"{verdict}; {report.get('trials', 0)} trials, wall {report['wall_seconds']} s ({report['mode']})")
    return "\n".join(lines)


def write(report: dict, out) -> str:
    """Write out/torture.json under the output-folder policy (`shardlab.outdir`); return its path."""
    from shardlab import outdir

    return str(outdir.write_json(out, "torture", "torture.json", report))


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="torture_out", help="folder for torture.json (default: torture_out)")
    parser.add_argument("--reduced", action="store_true", help="fewer trials, same categories (what make test runs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    parser.add_argument("--only", nargs="*", choices=CATEGORIES, default=list(CATEGORIES), help="categories to run")


def main(args) -> int:
    import json

    import shardlab as sl
    from shardlab import outdir
    from shardlab.errors import OutputFolderError

    try:
        outdir.claim(args.out, "torture")  # refuse a bad folder before the campaign, not after it
        sl.setup_devices(4)
        with outdir.writing(args.out, "torture") as staging:  # every file of the campaign stays inside OUT
            report = campaign(args.reduced, args.seed, args.only, work=staging / "work")
            shutil.rmtree(staging / "work")
            (staging / "torture.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    except OutputFolderError as exc:
        print(f"[shardlab torture] {exc}", file=sys.stderr)
        return 1
    print(summary(report))
    print(f"[shardlab] wrote {os.path.join(args.out, 'torture.json')}")
    return 0 if report["ok"] else 1
