"""Markdown views of a bench.json receipt: end to end, the local optimisations, the scaling grid."""

import json
from pathlib import Path

from shardlab.evidence import trace
from shardlab.perf import scaling


def before_after(path) -> list[dict]:
    """Rows of the before/after table, read from a bench.json receipt."""
    result = json.loads(Path(path).read_text())
    coll, place, disp = result["collectives"], result["placement"], result["dispatch"]
    found, goals, old = result["ratios"], result["targets"], result["retired"]
    prepare, update = f"median_{trace.PREPARE}_ms", f"median_{trace.UPDATE}_ms"
    ir = coll["all_reduce"]["stablehlo"]
    return [
        _row("one collective", "StableHLO all_reduce ops", ir["compiled_4dev"], ir["packed_4dev"]),
        _row(
            "one collective",
            "4-device step median (ms)",
            coll["compiled_4dev"]["median_ms"],
            coll["packed_4dev"]["median_ms"],
        ),
        _row(
            "one collective",
            "4-device / 1-device median",
            found["unpacked_4dev_over_single"],
            found["packed_4dev_over_single"],
            old["packed_4dev_over_single"],
        ),
        _row(
            "data on devices", "traced prepare_and_place median (ms)", place["before"][prepare], place["after"][prepare]
        ),
        _row(
            "data on devices",
            "traced compiled_update_and_wait median (ms)",
            place["before"][update],
            place["after"][update],
        ),
        _row(
            "data on devices",
            "prepare / update",
            found["prepare_over_update_before"],
            found["prepare_over_update_after"],
            goals["prepare_over_update_after"],
        ),
        _row(
            "K updates per dispatch",
            "ms per update (K=1 blocking -> K=16)",
            disp["per_update_median_ms"]["blocking_k1"],
            disp["per_update_median_ms"]["scan_k16"],
        ),
        _row("K updates per dispatch", "speed-up at K=16", 1.0, found["k16_speedup"], old["k16_speedup"]),
        _row("K per dispatch + one collective", "speed-up at K=16 (also tried)", 1.0, found["k16_packed_speedup"]),
        _row("K per dispatch, packed both sides", "packed K=1 / packed K=16", 1.0, found["k16_packed_over_k1_packed"]),
    ]


def _row(optimisation, measure, before, after, goal=None) -> dict:
    if goal is None:
        met = ""
    elif "old_target" in goal:
        met = f"retired ({goal['old_target']})"
    else:
        met = ("met" if goal["met"] else "not met") + f" ({goal['target']})"
    return {"optimisation": optimisation, "measure": measure, "before": before, "after": after, "target": met}


LABELS = {
    "course_loop": "course loop (`sl.transition`)",
    "fused_psum": "fused, one psum per step",
    "fused_stats": "fused, one collective per dispatch",
    "floor_1dev": "fused on one device (floor)",
}


def endtoend_rows(result: dict) -> list[list[str]]:
    """Rows [variant, ms per step at each batch size, speedup over the course loop at each], rounded."""
    e2e = result["endtoend"]
    rows = []
    for name, label in LABELS.items():
        times = [f"{e2e[b]['median_per_step_ms'][name]:.3g}" for b in e2e]
        speed = [f"{e2e[b]['speedup_over_course'][name]:.1f}x" for b in e2e]
        rows.append([label, *times, *speed])
    return rows


def endtoend_table(path, targets: bool = True) -> str:
    """The end-to-end table of a bench.json receipt as Markdown, and its targets unless `targets` is false."""
    result = json.loads(Path(path).read_text())
    sizes = [str(result["endtoend"][b]["batch_size"]) for b in result["endtoend"]]
    head = ["per step, end to end", *[f"ms, batch {b}" for b in sizes], *[f"speedup, batch {b}" for b in sizes]]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in endtoend_rows(result)]
    lines.append("")
    for key, goal in result["targets"].items() if targets else ():
        value = "not measured" if goal["measured"] is None else f"{goal['measured']:.3g}"
        lines.append(f"- `{key}` {goal['target']}: {value}, **{'met' if goal['met'] else 'not met'}**")
    for key, old in result["retired"].items() if targets else ():
        lines.append(f"- `{key}` (retired, was {old['old_target']}): {old['measured']:.3g}; {old['why_retired']}")
    lines.append("")
    lines.append(_measured_on(result))
    return "\n".join(lines)


def _measured_on(result: dict) -> str:
    m = result["machine"]
    return (
        f"Measured {result['date_utc']} on {m['physical_cores']} physical cores ({m['processor']}), "
        f"{len(m['devices'])} logical CPU devices, JAX {m['jax']}: a speedup over this module's own loop on this "
        "machine, not a claim about accelerators or clusters."
    )


def markdown_table(path) -> str:
    """The before/after table of a bench.json receipt as Markdown (for the stage 4 notebook and the README)."""
    result = json.loads(Path(path).read_text())
    lines = ["| optimisation | measure | before | after | target |", "| --- | --- | ---: | ---: | --- |"]
    for row in before_after(path):
        lines.append(
            f"| {row['optimisation']} | {row['measure']} | {row['before']:.4g} | {row['after']:.4g} | {row['target']} |"
        )
    lines.append("")
    lines.append(_measured_on(result))
    return "\n".join(lines)


def scaling_table(path) -> str:
    """The scaling grid of a bench.json receipt as Markdown."""
    result = json.loads(Path(path).read_text())
    lines = ["| rows | W | median ms | rows/s | efficiency |", "| ---: | ---: | ---: | ---: | ---: |"]
    for r in result["scaling"]["table"]:
        lines.append(
            f"| {r['rows']:,} | {r['devices']} | {r['median_ms']:.4g} | {r['rows_per_s']:.3g} | {r['efficiency']:.2f} |"
        )
    lines.append("")
    lines.append(f"Host: {result['machine']['physical_cores']} physical cores. " + scaling.NOTE)
    return "\n".join(lines)
