"""The stage 5 figures: where each supervised drill's wall time went, what asynchronous saving costs, step times.

`draw`: one stacked bar per supervised drill, the goodput ledger's parts in seconds (and, for a
drills.json holding the saving comparison, `draw_saves`'s panel beside it). `draw_saves`: every
step-time and blocking-save sample of the synchronous and asynchronous groups, side by side, on a
log axis (medians marked). `draw_step_times`: each controller's per-step log.
Samples from processes on one host: not a cluster's numbers.
"""

import os

from shardlab.multi import phases
from shardlab.multi.ledger import PARTS

COLOURS = dict(
    zip(PARTS, ("#9e9e9e", "#8d6e63", "#ffb300", "#43a047", "#1e88e5", "#e53935", "#6d4c41", "#d81b60", "#cfd8dc"))
)


def _save(fig, title: str, path) -> str:
    """Title, lay out, write `fig` to `path` (PNG, 110 dpi, nothing clipped), close it; return the path."""
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = os.fspath(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the canvas grows to hold a legend placed below an axis
    plt.close(fig)
    return path


# what each part of the ledger holds (`ledger.goodput`), as the legend says it
LABELS = {
    "startup": "start-up (launch to ready)",
    "restore": "restore",
    "compile": "first step of a batch shape (compiles or loads)",
    "productive": "productive steps",
    "save_block": "save (blocking part)",
    "detection": "detection (fault to verdict)",
    "teardown": "teardown",
    "wasted": "wasted (steps redone)",
    "other": "other (unnamed: between events, and after an attempt's last)",
}


def draw(result: dict, path) -> str:
    """Write the figure for a drills.json result to `path` (PNG); return the path.

    Left: the goodput ledger of every supervised drill. Right, when the result holds an
    `async_vs_sync` comparison (`make drills`): its samples, as `draw_saves` draws them.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    rows = [r for r in result["drills"] if r.get("goodput")]
    cost = result.get("async_vs_sync")
    height = 0.5 * max(len(rows), 4) + 1.8
    if cost:
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, height))
        _saves(right, cost)
    else:
        fig, left = plt.subplots(1, 1, figsize=(6.5, height))
    for i, row in enumerate(rows):
        start = 0.0
        for part in PARTS:
            width = row["goodput"][part]
            left.barh(i, width, left=start, color=COLOURS[part], label=LABELS[part] if i == 0 else None)
            start += width
    left.set_yticks(range(len(rows)), [r["drill"] for r in rows], fontsize=8)
    left.invert_yaxis()
    left.set_xlabel("seconds (summed over attempts)")
    left.set_title("goodput ledger per supervised drill", fontsize=10)
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.1 / max(len(rows), 1)), ncol=3)
    return _save(fig, "stage 5 on one host, loopback processes (not a cluster)", path)


def draw_saves(cost: dict, path) -> str:
    """Every step and blocking-save sample of `scenarios.overhead`'s comparison, log axis, median lines; PNG."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 1, figsize=(6.5, 3.6))
    _saves(ax, cost)
    return _save(fig, "saving on one host, loopback processes (not a cluster)", path)


def _saves(ax, cost: dict) -> None:
    import numpy as np

    labels, series = [], []
    for mode in ("sync", "async"):
        for what in ("step_s", "save_block_s"):
            labels.append(f"{mode}\n{what.replace('_s', '').replace('_', ' ')}")
            series.append(np.asarray(cost["samples"][mode][what], float) * 1e3)
    for i, values in enumerate(series):
        jitter = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else np.zeros(1)
        ax.scatter(i + jitter, values, s=10, alpha=0.6)
        ax.hlines(np.median(values), i - 0.3, i + 0.3, color="black")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("ms (every sample; line = median)")
    ax.set_title("synchronous vs asynchronous saving, a save after every step", fontsize=10)


PHASE_COLOURS = {"data_s": "#8d6e63", "agreement_s": "#e53935", "compute_s": "#1e88e5"}
PHASES = tuple((key, label, PHASE_COLOURS[key]) for key, label in phases.PHASES)  # key, legend, colour


def draw_step_times(step_times: dict, path) -> str:
    """One panel per controller: a stacked bar per step of its data, agreement and compute milliseconds.

    The axis stops at four times the median step, so the short phases stay visible; a taller bar (the
    first step compiles) is cut there and labelled with its total. Write to `path` (PNG); return the path.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np

    ranks = sorted(step_times, key=int)
    totals = {rank: [sum(r[k] for k, _, _ in PHASES) * 1e3 for r in step_times[rank]] for rank in ranks}
    top = 4 * float(np.median([ms for rank in ranks for ms in totals[rank]]))
    fig, axes = plt.subplots(1, len(ranks), figsize=(5.2 * len(ranks), 3.4), sharey=True, squeeze=False)
    for ax, rank in zip(axes[0], ranks):
        records = step_times[rank]
        steps = [r["step"] for r in records]
        bottom = np.zeros(len(records))
        for key, label, colour in PHASES:
            heights = np.array([r[key] * 1e3 for r in records])
            ax.bar(steps, heights, bottom=bottom, color=colour, label=label)
            bottom += heights
        for step, total in zip(steps, totals[rank]):
            if total > top:
                ax.text(step, top * 0.97, f"{total:.0f}", ha="center", va="top", fontsize=7, rotation=90)
        ax.set_title(f"process {rank}", fontsize=10)
        ax.set_xlabel("step")
        ax.set_xticks(steps)
    axes[0][0].set_ylim(0, top)
    axes[0][0].set_ylabel("ms per step (cut bars: total ms)")
    # below the axes, so no bar or cut-bar label sits under it
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3)
    return _save(fig, "per-controller step time: processes on one host over loopback (not a cluster)", path)
