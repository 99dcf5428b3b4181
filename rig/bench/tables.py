"""Markdown views of a bench.json receipt: end to end, the local optimisations, the scaling grid."""

import json
from pathlib import Path

from rig.bench import strong
from shardlab.evidence import trace


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
    "fused_stats": "fused, one statistics psum per dispatch",
    "fused_stats_sym": "fused, statistics, upper triangle only",
    "fused_inputs": "fused, one all-gather of inputs per dispatch",
    "no_collective": "4 devices, no collective (wrong numbers: a bound)",
    "floor_1dev": "one device, whole batch, no collective",
    "floor_1dev_psum": "one device, whole batch, packed psum left in",
}


def _cell(row: dict, name: str) -> str:
    medians = row["median_per_step_ms"]
    if name not in medians:
        return ""
    text = f"{1e3 * medians[name]:.3g}"
    alone = medians.get("program:" + name)
    return text if alone is None else f"{1e3 * alone:.3g} / {text}"


def endtoend_rows(result: dict) -> list[list[str]]:
    """Rows [loop, us per step at each batch size ("program alone / run" where both), x no-collective]."""
    e2e, rows = result["endtoend"], []
    for name, label in LABELS.items():
        over = [f"{e2e[b]['over_no_collective'][name]:.2f}x" for b in e2e]
        rows.append([label, *[_cell(e2e[b], name) for b in e2e], *over])
    picks = [f"{e2e[b]['pick_loop']} ({e2e[b]['speedup_over_course'][e2e[b]['pick_loop']]:.1f}x course)" for b in e2e]
    rows.append(["auto: the cost model's pick", *picks, *[""] * len(e2e)])
    return rows


def sweep_table(path) -> str:
    """Per cell of the sweep: the model's pick, the measured fastest, their ratio, and every loop's median."""
    result = json.loads(Path(path).read_text())
    names = [n for n in LABELS if n != "course_loop"]
    head = ["d", "B", "pick", "fastest", "pick / fastest", "course", *names]
    lines = ["| " + " | ".join(head) + " |", "| ---: | ---: | --- | --- |" + " ---: |" * (len(head) - 4)]
    for c in result["sweep"]["cells"].values():
        medians = c["median_per_step_ms"]
        times = [f"{1e3 * medians[n]:.4g}" for n in ["course_loop", *names]]
        first = [str(c["width"]), str(c["batch_size"]), c["pick_loop"], c["fastest_loop"]]
        lines.append("| " + " | ".join([*first, f"{c['pick_over_fastest']:.3f}", *times]) + " |")
    sweep = result["sweep"]
    lines.append("")
    lines.append(
        f"us per step, medians. Model hits (pick within {sweep['hit_within']:.2f}x of the fastest): "
        f"{sweep['hits']}/{sweep['count']}. Constants measured: {sweep['costs']}."
    )
    return "\n".join(lines)


def endtoend_table(path, targets: bool = True) -> str:
    """The end-to-end table of a bench.json receipt as Markdown, and its targets unless `targets` is false."""
    result = json.loads(Path(path).read_text())
    sizes = [str(result["endtoend"][b]["batch_size"]) for b in result["endtoend"]]
    head = ["us per step (program alone / run)", *[f"batch {b}" for b in sizes], *[f"x no-coll., {b}" for b in sizes]]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in endtoend_rows(result)]
    alone = result.get("baseline", {})
    if alone:
        cells = [f"{1e3 * _best(alone[b]):.3g}" if b in alone else "" for b in result["endtoend"]]
        lines.append(
            "| course loop, alone in a fresh interpreter (best block) | " + " | ".join(cells) + " |" + " |" * len(cells)
        )
    lines.append("")
    for key, goal in result["targets"].items() if targets else ():
        value = "not measured" if goal["measured"] is None else f"{goal['measured']:.3g}"
        lines.append(f"- `{key}` {goal['target']}: {value}, **{'met' if goal['met'] else 'not met'}**")
    for key, old in result["retired"].items() if targets else ():
        lines.append(f"- `{key}` (retired, was {old['old_target']}): {old['measured']:.3g}; {old['why_retired']}")
    lines.append("")
    lines.append(_measured_on(result))
    return "\n".join(lines)


def _best(alone: dict) -> float:
    """The dedicated course loop's figure: its best block (receipts made before blocks hold a median only)."""
    return alone.get("best_per_step_ms", alone["median_per_step_ms"])


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
    lines.append(f"Host: {result['machine']['physical_cores']} physical cores. " + strong.NOTE)
    return "\n".join(lines)
