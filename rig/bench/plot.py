"""bench.png: the end-to-end loops, the three local optimisations and the scaling grid."""

from pathlib import Path

from shardlab.evidence import trace


def figure(result: dict, path) -> Path:
    """Eight panels: end to end and its trace; collectives, placement, K per dispatch; the scaling grid."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 4, figsize=(21, 12.5))
    endtoend_panel(axes[0, 0], result["endtoend"])
    profile_panel(axes[1, 3], result["profile"])
    _collectives_panel(axes[0, 1], result["collectives"])
    _placement_panel(axes[0, 2], result["placement"])
    _dispatch_panel(axes[0, 3], result["dispatch"]["per_update_median_ms"], result["config"]["ks"])
    _scaling_panels(axes[1, :3], result["scaling"]["table"], result["machine"]["physical_cores"])
    crossover(axes[2, 0], axes[2, 1], result["sweep"])
    _picks_panel(axes[2, 2], result["sweep"])
    axes[2, 3].axis("off")
    fig.suptitle(
        f"shardlab bench, {result['date_utc']}: 4 logical CPU devices on "
        f"{result['machine']['physical_cores']} physical cores (medians; boxes show every sample)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


LABELS = {
    "course_loop": "course loop",
    "fused_psum": "fused, psum per step",
    "fused_stats": "fused, 1 collective",
    "no_collective": "4 dev, no collective",
    "floor_1dev": "1-device floor",
}


def endtoend_panel(ax, e2e: dict) -> None:
    """Every per-step sample of each loop per batch size, log axis, medians joined."""
    sizes = [row["batch_size"] for row in e2e.values()]
    for offset, (name, label) in enumerate(LABELS.items()):
        for i, row in enumerate(e2e.values()):
            samples = row["per_step_ms"][name]
            ax.scatter([i + 0.15 * (offset - 1.5)] * len(samples), samples, s=6, alpha=0.5, color=f"C{offset}")
        medians = [row["median_per_step_ms"][name] for row in e2e.values()]
        ax.plot(
            [i + 0.15 * (offset - 1.5) for i in range(len(sizes))], medians, marker="_", color=f"C{offset}", label=label
        )
    ax.set_xticks(range(len(sizes)), [f"batch {b}" for b in sizes])
    ax.set(yscale="log", ylabel="ms per step, end to end", title="whole loops, 4 logical devices (every sample)")
    ax.legend(fontsize=7)


def profile_panel(ax, found: dict) -> None:
    """Traced ms per step of each annotation, course loop against the fused loop (a fused row is K steps)."""
    names = ("prepare_and_place", "compiled_update_and_wait")
    for offset, side in enumerate(("before", "after")):
        per = found["per_step"][side]
        values = [per[f"median_{name}_ms_per_step"] for name in names]
        ax.bar(
            [i + 0.4 * offset for i in range(len(names))],
            values,
            width=0.4,
            label="course loop" if side == "before" else f"fused ({found['fused_body']})",
        )
    ax.set_xticks([0.2, 1.2], ["prepare_and_place", "update_and_wait"])
    ax.set(yscale="log", ylabel="ms per step (from the trace)", title="profile again: per step, traced")
    ax.legend(fontsize=7)


def _collectives_panel(ax, coll: dict) -> None:
    names = ("compiled_1dev", "compiled_4dev", "packed_4dev")
    ax.boxplot([coll[n]["samples_ms"] for n in names], tick_labels=["1 device", "4 dev, 3 psums", "4 dev, 1 psum"])
    ax.set(yscale="log", ylabel="ms per warm step", title="one collective instead of three (1,023 x 64)")


def _placement_panel(ax, place: dict) -> None:
    for side, marker, style in (("before", "o", ":"), ("after", "s", "-")):
        rows = place[side]["transitions"]
        for annotation, colour in ((trace.PREPARE, "tab:orange"), (trace.UPDATE, "tab:blue")):
            values = [r[f"{annotation}_ms"] for r in rows]
            ax.plot(
                range(1, len(rows) + 1),
                values,
                marker=marker,
                linestyle=style,
                color=colour,
                label=f"{annotation} ({side})",
            )
    ax.set(yscale="log", xlabel="traced transition", ylabel="ms (from the trace)", title="dataset kept on the devices")
    ax.legend(fontsize=7)


def _dispatch_panel(ax, per: dict, ks: list) -> None:
    ax.plot(ks, [per[f"scan_k{k}"] for k in ks], marker="o", label="K updates per lax.scan call")
    ax.axhline(per["blocking_k1"], color="grey", linestyle="--", label="one blocking update per call")
    ax.set(xscale="log", yscale="log", xlabel="K", ylabel="ms per update", title="several updates per dispatch")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.legend(fontsize=7)


def _scaling_panels(axes, table: list, cores: int) -> None:
    for w in sorted({r["devices"] for r in table}):
        mine = [r for r in table if r["devices"] == w]
        rows = [r["rows"] for r in mine]
        for ax, key in zip(axes, ("median_ms", "rows_per_s", "efficiency")):
            ax.plot(rows, [r[key] for r in mine], marker="o", label=f"W = {w}")
    labels = ("compiled step, ms", "rows per second", "throughput_W / (W throughput_1)")
    for ax, label in zip(axes, labels):
        ax.set(xscale="log", xlabel="rows (x 64 features)", ylabel=label)
        ax.legend(fontsize=7)
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    axes[2].set_title(f"efficiency, W logical devices on {cores} cores")


CROSSING = {"fused_psum": "per_step", "fused_stats": "stats", "fused_inputs": "inputs"}  # loop -> model variant


def crossover(ax_floats, ax_time, sweep: dict) -> None:
    """Floats moved per step (the model) and measured us per step against batch size, per width and loop."""
    widths = sorted({c["width"] for c in sweep["cells"].values()})
    for shade, width in enumerate(widths):
        cells = sorted((c for c in sweep["cells"].values() if c["width"] == width), key=lambda c: c["batch_size"])
        sizes = [c["batch_size"] for c in cells]
        for style, (loop, variant) in zip(("-", "--", ":"), CROSSING.items()):
            label = f"{loop}, d={width}"
            floats = [c["model"]["table"][variant]["floats"] / c["steps_per_sample"] for c in cells]
            ax_floats.plot(sizes, floats, style, marker="o", color=f"C{shade}", label=label)
            times = [1e3 * c["median_per_step_ms"][loop] for c in cells]
            ax_time.plot(sizes, times, style, marker="o", color=f"C{shade}", label=label)
    ax_floats.set(xscale="log", yscale="log", xlabel="batch size B", ylabel="floats in the collective per step")
    ax_floats.set_title("what each choice moves (line style: loop; colour: width d)")
    ax_time.set(xscale="log", yscale="log", xlabel="batch size B", ylabel="us per step, end to end (median)")
    ax_time.set_title("what it costs here: 4 logical CPU devices, one host")
    ax_floats.legend(fontsize=6, ncol=3)


def _picks_panel(ax, sweep: dict) -> None:
    cells = list(sweep["cells"].values())
    ratios = [c["pick_over_fastest"] for c in cells]
    ax.bar(range(len(cells)), ratios, color=["tab:green" if c["hit"] else "tab:red" for c in cells])
    ax.axhline(sweep["hit_within"], color="grey", linestyle="--", label=f"{sweep['hit_within']:.2f}x")
    ax.set_xticks(range(len(cells)), [f"d{c['width']}\nB{c['batch_size']}" for c in cells], fontsize=7)
    ax.set(ylabel="model's pick / measured fastest", title=f"cost model: {sweep['hits']}/{sweep['count']} hits")
    ax.legend(fontsize=7)
