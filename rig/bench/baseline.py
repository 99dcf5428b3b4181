"""The course loop at its best: measured first, alone in a fresh interpreter, best of several blocks.

In the bench the course loop is also timed beside the fused loops, in a process that holds
their compiled programs and data. `dedicated` measures it before anything else runs: a new
interpreter that holds nothing but the course loop (same fixture, learning rate, steps per
sample and starting state as the bench) times `BLOCKS` blocks of at least `endtoend.BLOCK`
samples, each block after a warm call (`endtoend.measure`). The figure the bench divides by is the lowest of the block
medians (`best_per_step_ms`), or the in-bench median if that is lower: the speed-ups are
over the course loop at its best on this machine, not over a slow phase of it.
"""

import json
import sys
from pathlib import Path

import numpy as np

from shardlab import process_group
from shardlab.errors import ShardlabError

BLOCKS = 5
CHECKOUT = Path(__file__).resolve().parents[2]  # the folder that holds rig/


def summary(per_step: list, blocks: list) -> dict:
    """The samples, their blocks' medians (`blocks`: samples per block, in order), the lowest of those
    (`best_per_step_ms`) and the median of all samples."""
    ends = np.cumsum(blocks)
    medians = [float(np.median(per_step[end - length : end])) for end, length in zip(ends, blocks)]
    return {
        "best_per_step_ms": min(medians),
        "block_medians_ms": medians,
        "median_per_step_ms": float(np.median(per_step)),
        "per_step_ms": per_step,
        "blocks": list(blocks),
    }


def dedicated(batch_sizes, steps: int, seed: int, width: int, blocks: int = BLOCKS, timeout: float = 600) -> dict:
    """{"b<B>": `summary`} of the course loop alone in a child interpreter, `blocks` blocks per batch size."""
    args = json.dumps(
        {"batch_sizes": list(batch_sizes), "steps": steps, "blocks": blocks, "seed": seed, "width": width}
    )
    child = process_group.run(
        [sys.executable, "-m", "rig.bench.baseline", args],
        timeout,
        capture_output=True,
        text=True,
        cwd=CHECKOUT,  # where `rig` is importable, whatever folder the bench was started from
    )
    if child.returncode != 0:
        raise ShardlabError(f"the dedicated course-loop run failed: {child.stderr[-1500:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def _child(batch_sizes, steps, blocks, seed, width) -> dict:
    from shardlab.core.devices import make_mesh, setup_devices

    setup_devices(4)
    from rig.bench import sweep
    from shardlab.perf import endtoend

    mesh, data, found = make_mesh(4), sweep.fixture(width), {}
    for batch_size in batch_sizes:
        loops = endtoend.programs(
            data, mesh, batch_size, steps, seed, ("course_loop",), learning_rate=sweep.learning_rate(width)
        )
        measured = endtoend.measure(loops, steps, blocks * endtoend.BLOCK)
        found[f"b{batch_size}"] = summary(measured["per_step_ms"]["course_loop"], measured["blocks"]["course_loop"])
    return found


if __name__ == "__main__":
    print(json.dumps(_child(**json.loads(sys.argv[1]))))
