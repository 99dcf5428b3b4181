"""The evidence figure: fault errors (when stage 3a ran), timing samples on a log axis, traced durations (PNG, SVG)."""

from pathlib import Path

import numpy as np

from shardlab.evidence.paths import relative
from shardlab.verify import faults as fault_runs

FAULTS = tuple(f for f in fault_runs.FAULTS if f != "none")  # the omitted state fields, in the course's order

FIGURE = "evidence"  # evidence.png and evidence.svg in the output folder


def figure(out_dir, faults: list | None, timing: dict, transitions: list[dict]):
    """The panels (fault errors, timing samples on a log axis, traced durations); saved as PNG and SVG.

    The fault panel needs stage 3a's results in the same folder: without them (stage 4a run alone) the
    figure has the two panels this notebook measured, never an empty one. Returns (figure, {'png', 'svg',
    'panels'}).
    """
    import matplotlib.pyplot as plt

    drawn = [("fault errors", _fault_panel, faults)] if faults else []
    drawn += [("timing samples", _timing_panel, timing), ("traced durations", _trace_panel, transitions)]
    fig, axes = plt.subplots(1, len(drawn), figsize=(16 * len(drawn) / 3, 4.8), constrained_layout=True)
    for ax, (_, draw, values) in zip(axes, drawn):
        draw(ax, values)
    paths = {}
    for ext in ("png", "svg"):
        path = Path(out_dir) / f"{FIGURE}.{ext}"
        fig.savefig(path, dpi=120, metadata={"Date": None} if ext == "svg" else None)
        paths[ext] = relative(path, out_dir)
    return fig, {**paths, "panels": [name for name, _, _ in drawn]}


def _fault_panel(ax, faults):
    ax.set_title("Final-weight error per omitted state field")
    fixtures = sorted({row["fixture"] for row in faults})
    width = 0.8 / len(fixtures)
    for i, fixture in enumerate(fixtures):
        values = [
            next((r["max_weight_error"] for r in faults if r["fixture"] == fixture and r["fault"] == f), 0.0)
            for f in FAULTS
        ]
        bars = ax.bar(np.arange(len(FAULTS)) + (i - (len(fixtures) - 1) / 2) * width, values, width, label=fixture)
        ax.bar_label(bars, fmt="%.3g", fontsize=8)
    ax.set_xticks(range(len(FAULTS)), [f"{f} reset" for f in FAULTS])
    ax.set_ylabel("max |w_fault - w_control|")
    ax.set_ylim(top=ax.get_ylim()[1] * 1.25)
    ax.legend(title="fixture (complete recovery: 0)", loc="upper right")


def _timing_panel(ax, timing):
    ax.set_title("Update samples after warm-up (inputs placed; log axis)")
    variants = [v for v in ("eager_4dev", "compiled_4dev", "compiled_1dev") if v in timing]
    rng = np.random.default_rng(0)  # horizontal jitter only
    for i, variant in enumerate(variants):
        samples = timing[variant]["samples_ms"]
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(samples)), samples, s=14, alpha=0.7)
        ax.hlines(np.median(samples), i - 0.3, i + 0.3, color="black")
        ax.annotate(f"median\n{np.median(samples):.4g} ms", (i + 0.32, np.median(samples)), va="center", fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(variants)), variants)
    ax.set_xlim(-0.5, len(variants) - 0.1)
    ax.set_ylabel("ms per call")


def _trace_panel(ax, transitions):
    ax.set_title("Traced annotations per transition")
    index = np.arange(len(transitions))
    for offset, key in ((-0.2, "prepare_and_place_ms"), (0.2, "compiled_update_and_wait_ms")):
        bars = ax.bar(index + offset, [t[key] for t in transitions], 0.4, label=key[: -len("_ms")])
        ax.bar_label(bars, fmt="%.3f", fontsize=8)
    ax.set_xticks(index, [str(t["transition"]) for t in transitions])
    ax.set_xlabel("traced transition")
    ax.set_ylabel("annotation duration, ms")
    ax.set_ylim(top=ax.get_ylim()[1] * 1.25)
    ax.legend(loc="upper right", ncols=2, fontsize=8)
