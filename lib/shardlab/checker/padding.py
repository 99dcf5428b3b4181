"""The padding probe stage 1 and the sampler search share: slots, mask by position, rows per device, the rows."""

import numpy as np

from shardlab.checker.common import DEGENERATE, expect
from shardlab.verify import oracle
from shardlab.verify.oracle import padded_length


def _describe_rows(ids, positions) -> str:
    names = [DEGENERATE.get(int(ids[p]), f"row {int(ids[p])}") for p in positions]
    return "; ".join(f"slot {p}: {name}" for p, name in zip(positions, names))


def check_padding(batch, data, batch_size: int, devices: int) -> None:
    """Raise CheckFailed unless the batch pads to a device multiple, masks by position and holds data[ids]."""
    ids, mask = np.asarray(batch.ids).astype(np.int64), np.asarray(batch.mask)
    slots = padded_length(len(ids), devices)
    if len(mask) != slots:
        hint = f" (a multiple of batch_size {batch_size})" if len(mask) % batch_size == 0 else ""
        expect(
            False,
            f"{slots} slots",
            f"{len(mask)} slots{hint}",
            f"{len(ids)} row(s) were padded to {len(mask)} slots -> pad to the next multiple of the device "
            f"count ({slots}), so the valid rows per device are {oracle.device_counts(len(ids), devices)}",
        )
    want = np.zeros(slots)
    want[: len(ids)] = 1.0
    lost = [p for p in range(len(ids)) if mask[p] <= 0]
    counted = [p for p in range(len(ids), slots) if mask[p] > 0]
    if lost:
        why = (
            f"mask 0 on selected rows ({_describe_rows(ids, lost)}) -> the mask follows the row values; decide it "
            "by position: 1 for the first len(ids) slots, 0 for the padding after them"
        )
    elif counted:
        why = (
            "mask 1 on padded slots: a padded slot has mask 0 whatever its contents; padding is never an "
            "observation (mask 1 on padding counts it as one)"
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
        "scaling, deduplication or reordering)",
    )
