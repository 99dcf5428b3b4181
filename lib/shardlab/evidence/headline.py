"""The numbers a reader checks first, read from one run's audit.json, each with its boundary.

`facts(audit)` gives (what, value, boundary) rows; the run summary prints them as lines and
receipts/index.html shows them as its headline table. Every row comes from this run's audit:
its seed, batch size and implementation, and the device counts at its batch size.
"""

import numpy as np

STATE = ("weights", "momentum", "key", "order", "cursor", "losses")  # recovery differences that must be 0


def implementation_name(spec) -> str:
    """'reference', or the learner file's name and the start of its sha256."""
    if isinstance(spec, dict):
        return f"{spec.get('file')} (sha256 {str(spec.get('sha256'))[:12]})"
    return str(spec or "reference")


def run_line(audit: dict) -> str:
    """Seed, batch size and implementation of the run the audit describes."""
    run = audit.get("run") or {}
    return (
        f"seed {run.get('seed')}, batch size {run.get('batch_size')}, "
        f"implementation {implementation_name(run.get('implementation'))}"
    )


def _walk_counts(counts: dict, batch_size) -> str:
    """Each distinct per-device split of the walk at this batch size, with the rows it holds, in order."""
    seen = []
    for split in counts.get("walk") or []:
        if split and split not in seen:
            seen.append(split)
    shown = ", ".join(f"{sum(s)} rows -> {s}" for s in seen)
    return f"batch size {batch_size}: {shown}" if shown else "no walk recorded"


def facts(audit: dict) -> list[tuple[str, str, str]]:
    """(what, value, boundary) for each headline number the audit holds, in reading order."""
    rows = [("run", run_line(audit), "parameters papermill passed to every notebook")]
    batch_size = (audit.get("run") or {}).get("batch_size")
    counts = audit.get("device_counts") or {}
    if counts:
        rows.append(("valid rows per device", _walk_counts(counts, batch_size), "stage 1, 4 logical CPU devices"))
        rows.append(
            (
                "valid rows per device (fixed examples)",
                f"7 rows -> {counts.get('batch_of_7_rows')}, 1 row -> {counts.get('batch_of_1_row')}",
                "stage 1's predict-then-observe cells",
            )
        )
    if (audit.get("all_reduce") or {}).get("count") is not None:
        rows.append(("all_reduce ops", str(audit["all_reduce"]["count"]), "lowered StableHLO: inspection, not traffic"))
    recovered = {k: v["recovery"] for k, v in (audit.get("fresh_kernel_recovery") or {}).items() if v}
    if not recovered and audit.get("recovery"):
        recovered = {"this run": audit["recovery"]}
    if recovered:
        worst = {name: max(float(r.get(k, 0.0)) for k in STATE) for name, r in recovered.items()}
        shown = "; ".join(
            f"{name}: max |difference| {worst[name]:g} over {r.get('steps_compared')} steps"
            for name, r in recovered.items()
        )
        rows.append(("fresh-kernel resume", shown, "local restart in a new kernel; not power-loss durability"))
    faults = [f for f in audit.get("faults") or [] if f.get("fault") != "none"]
    if faults:
        shown = ", ".join(f"{f['fixture']}/{f['fault']} {f['max_weight_error']:.3g}" for f in faults)
        rows.append(("final-weight error per omitted field", shown, "stage 3, against an uninterrupted control"))
    rows += _timing_rows(audit.get("timing") or {})
    trace = audit.get("trace") or {}
    if trace.get("dominant"):
        d = trace["dominant"]
        rows.append(
            (
                "trace split (medians)",
                f"prepare_and_place {d['median_prepare_and_place_ms']:.3f} ms, compiled_update_and_wait "
                f"{d['median_compiled_update_and_wait_ms']:.3f} ms: {_longer(d)}",
                f"{len(trace.get('transitions') or [])} traced transitions; a CPU trace, not accelerator utilisation",
            )
        )
    drills = audit.get("drills")
    if drills:
        passed = sum(1 for d in drills.get("drills", []) if d.get("passed"))
        rows.append(
            (
                "stage 5 drills",
                f"{passed} of {len(drills.get('drills', []))} passed (all passed = {drills.get('all_passed')})",
                "processes on one host, not a cluster",
            )
        )
    return rows


def _sample_counts(samples: dict) -> str:
    """'11 samples each', or each variant's count where they differ ('compiled_1dev 11, eager_4dev 5 samples')."""
    if len(set(samples.values())) == 1:
        return f"{next(iter(samples.values()))} samples each"
    return ", ".join(f"{k} {n}" for k, n in samples.items()) + " samples"


def _timing_rows(timing: dict) -> list[tuple[str, str, str]]:
    medians = {k: v["median_ms"] for k, v in timing.items() if isinstance(v, dict) and "median_ms" in v}
    if not medians:
        return []
    samples = {k: len(v.get("samples_ms", [])) for k, v in timing.items() if k in medians}
    rows = [
        (
            "warm medians",
            ", ".join(f"{k} {v:.4g} ms" for k, v in medians.items()),
            f"{_sample_counts(samples)}, inputs placed; 4 logical devices on one host",
        )
    ]
    ratios = timing.get("ratios") or {}
    if ratios:
        rows.append(
            ("ratios of medians", ", ".join(f"{k} {v:.3g}" for k, v in ratios.items()), "measured side by side")
        )
    compiled = {k: timing[k]["compile_ms"] for k in medians if timing[k].get("compile_ms") is not None}
    if compiled:
        shown = ", ".join(f"{k} {float(np.round(v, 1)):g} ms" for k, v in compiled.items())
        rows.append(("compile times", shown, "explicit lower().compile(), timed apart from the samples"))
    return rows


def lines(audit: dict) -> list[str]:
    """The facts as short console lines: 'what: value (boundary)'."""
    return [f"{what}: {value} ({boundary})" for what, value, boundary in facts(audit)]


def _longer(d: dict) -> str:
    """Which traced annotation is longer, said beyond the middle halves only when they are apart."""
    p, u = "prepare_and_place", "compiled_update_and_wait"
    if f"q1_{p}_ms" not in d:  # a record with medians alone
        return f"{d['dominant']} longer by median, {d['factor']:.2f}x (no spread recorded)"
    if d[f"q1_{p}_ms"] > d[f"q3_{u}_ms"] or d[f"q1_{u}_ms"] > d[f"q3_{p}_ms"]:
        return f"{d['dominant']} longer by {d['factor']:.2f}x, beyond both middle halves"
    return f"the middle halves overlap: neither is longer beyond the spread ({d['factor']:.2f}x by median)"
