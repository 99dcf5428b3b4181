"""The padding probe stage 1 and the sampler search share: slots, mask by position, rows per device, the rows."""

import numpy as np

from shardlab.checker.common import DEGENERATE, expect
from shardlab.checker.formulas import mark
from shardlab.verify import oracle
from shardlab.verify.oracle import padded_length


def _describe_rows(ids, positions) -> str:
    names = [DEGENERATE.get(int(ids[p]), f"row {int(ids[p])}") for p in positions]
    return "; ".join(f"slot {p}: {name}" for p, name in zip(positions, names))


SLOT_RULES = (  # (what the slot count was padded to, the slot count it gives), most likely first
    ("a multiple of jax.device_count() ({all}), not of the mesh given ({devices} device(s))", "all"),
    ("the batch size ({batch}) rounded up to the device count, not the rows taken ({rows})", "batch"),
    ("a whole extra device's worth of padding although {rows} row(s) already fill the devices", "extra"),
    ("no padding: the rows are not made a multiple of the device count", "none"),
    ("a power of two, not a multiple of the device count", "power"),
)


def slot_causes(rows: int, slots: int, batch_size: int, devices: int, every: int = 4) -> list[str]:
    """Each known padding rule that gives `slots` for `rows` rows (and differs from the course's), most likely first.

    `every` is the number of devices JAX sees (the course's four logical devices)."""
    return [text for text, _ in _slot_fits(rows, slots, batch_size, devices, every)]


def _slot_fits(rows: int, slots: int, batch_size: int, devices: int, every: int) -> list[tuple[str, str]]:
    """(words, SLOT_RULES key) of each padding rule `slot_causes` names."""
    right = padded_length(rows, devices)
    gives = {
        "all": padded_length(rows, every),
        "batch": padded_length(max(batch_size, rows), devices),
        "extra": right + devices if rows % devices == 0 else None,
        "none": rows,
        "power": 1 << max(rows - 1, 0).bit_length(),
    }
    words = {"all": every, "devices": devices, "batch": batch_size, "rows": rows}
    return [(text.format(**words), key) for text, key in SLOT_RULES if gives[key] == slots and gives[key] != right]


def listed_slots(fits: list[str]) -> str:
    if len(fits) == 1:
        return f"it fits {fits[0]}"
    return f"it fits {len(fits)} padding rules, most likely first: " + "; ".join(
        f"({n}) {text}" for n, text in enumerate(fits, 1)
    )


def check_padding(batch, data, batch_size: int, devices: int) -> None:
    """Raise CheckFailed unless the batch pads to a device multiple, masks by position, holds data[ids] and finite
    numbers in its padded slots."""
    ids, mask = np.asarray(batch.ids).astype(np.int64), np.asarray(batch.mask)
    slots = padded_length(len(ids), devices)
    if len(mask) != slots:
        fits = slot_causes(len(ids), len(mask), batch_size, devices)
        expect(
            False,
            f"{slots} slots",
            f"{len(mask)} slots" + (f" ({'; or '.join(fits)})" if fits else ""),
            f"{len(ids)} row(s) were padded to {len(mask)} slots"
            + (f": {listed_slots(fits)}" if fits else "")
            + f" -> pad to the next multiple of the mesh's device count (mesh.size = {devices}), {slots} "
            f"slot{'s' * (slots != 1)} here, so the valid rows per device are {oracle.device_counts(len(ids), devices)}"
            + mark("pad-by-position")
            + "".join(mark(cause=f"slots-{key}") for _, key in _slot_fits(len(ids), len(mask), batch_size, devices, 4)),
        )
    want = np.zeros(slots)
    want[: len(ids)] = 1.0
    lost = [p for p in range(len(ids)) if mask[p] <= 0]
    counted = [p for p in range(len(ids), slots) if mask[p] > 0]
    if lost:
        why = (
            f"mask 0 on selected rows ({_describe_rows(ids, lost)}) -> the mask follows the row values; decide it "
            "by position: 1 for the first len(ids) slots, 0 for the padding after them" + mark(cause="mask-from-values")
        )
    elif counted:
        why = (
            "mask 1 on padded slots: a padded slot has mask 0 whatever its contents; padding is never an "
            "observation (mask 1 on padding counts it as one)" + mark(cause="padding-masked-in")
        )
    else:
        why = ""
    expect(not why, want, mask, f"{len(ids)} row(s) -> {slots} slots, batch size {batch_size}: {why}")
    counts = mask.reshape(devices, -1).sum(axis=1).astype(int).tolist()
    expect(
        counts == oracle.device_counts(len(ids), devices),
        oracle.device_counts(len(ids), devices),
        counts,
        "valid rows per device: pad at the end, to the next multiple of the device count",
    )
    rows = np.asarray(batch.features)[: len(ids)], np.asarray(batch.targets)[: len(ids)]
    expect(
        np.array_equal(rows[0], data.features[ids]) and np.array_equal(rows[1], data.targets[ids]),
        "features and targets of batch.ids, unchanged",
        "other values",
        "the selected rows must be data[ids] exactly, in the order of batch.ids, degenerate ones included (no "
        "scaling, deduplication or reordering, and read from this call's data: never a copy kept from an earlier "
        "call)" + mark("pad-by-position"),
    )
    features, targets = np.asarray(batch.features), np.asarray(batch.targets)
    padded = range(len(ids), min(len(features), len(targets)))
    bad = [p for p in padded if not (np.isfinite(features[p]).all() and np.isfinite(targets[p]))]
    expect(
        not bad,
        "finite features and targets in every padded slot",
        "; ".join(f"slot {p}: features {features[p].tolist()}, target {float(targets[p])}" for p in bad[:3]),
        f"padded slot(s) {bad} hold non-finite numbers: the mask keeps them out of the means, but a step may "
        "multiply by the mask, and 0 x nan or 0 x inf is nan -> fill the padded slots with finite numbers (zeros)"
        + mark("pad-by-position", cause="padding-not-finite"),
    )
