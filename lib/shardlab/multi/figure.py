"""The stage 5 figure: where each supervised drill's wall time went, and what asynchronous saving costs.

Left: one stacked bar per supervised drill, the goodput ledger's parts in seconds. Right: every
step-time and blocking-save sample of the synchronous and asynchronous groups, side by side,
on a log axis (medians marked). Samples from processes on one host: not a cluster's numbers.
"""

import os

from shardlab.multi.ledger import PARTS

COLOURS = dict(
    zip(PARTS, ("#9e9e9e", "#8d6e63", "#ffb300", "#43a047", "#1e88e5", "#e53935", "#6d4c41", "#d81b60", "#cfd8dc"))
)


def draw(result: dict, path) -> str:
    """Write the figure for a drills.json result to `path` (PNG); return the path."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [r for r in result["drills"] if r.get("goodput")]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.5 * max(len(rows), 4) + 1.8))
    for i, row in enumerate(rows):
        start = 0.0
        for part in PARTS:
            width = row["goodput"][part]
            left.barh(i, width, left=start, color=COLOURS[part], label=part if i == 0 else None)
            start += width
    left.set_yticks(range(len(rows)), [r["drill"] for r in rows], fontsize=8)
    left.invert_yaxis()
    left.set_xlabel("seconds (summed over attempts)")
    left.set_title("goodput ledger per supervised drill", fontsize=10)
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.1 / max(len(rows), 1)), ncol=5)
    cost = result["async_vs_sync"]
    labels, series = [], []
    for mode in ("sync", "async"):
        for what in ("step_s", "save_block_s"):
            labels.append(f"{mode}\n{what.replace('_s', '')}")
            series.append(np.asarray(cost["samples"][mode][what], float) * 1e3)
    for i, values in enumerate(series):
        jitter = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else np.zeros(1)
        right.scatter(i + jitter, values, s=10, alpha=0.6)
        right.hlines(np.median(values), i - 0.3, i + 0.3, color="black")
    right.set_xticks(range(len(labels)), labels, fontsize=8)
    right.set_yscale("log")
    right.set_ylabel("ms (every sample; line = median)")
    right.set_title("synchronous vs asynchronous saving, save every step", fontsize=10)
    fig.suptitle("stage 5 on one host, loopback processes (not a cluster)", fontsize=10)
    fig.tight_layout()
    path = os.fspath(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
