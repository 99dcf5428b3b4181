"""The same six-field state through Orbax: saved as a pytree, restored onto a mesh-carrying target."""

import os

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from shardlab.core.batch import REPLICATED, is_replicated
from shardlab.core.errors import CheckpointExistsError
from shardlab.core.schema import DEVICE, FIELDS, SCALARS, to_arrays


def as_tree(state: dict) -> dict:
    """The state as an Orbax pytree: device arrays as they are, host fields as NumPy arrays."""
    return {**to_arrays(state), **{name: state[name] for name in DEVICE}}


def target(like: dict, mesh: Mesh) -> dict:
    """Restore target: ShapeDtypeStructs carrying NamedSharding(mesh, P()) for device fields."""
    replicated = NamedSharding(mesh, REPLICATED)
    tree = as_tree(like)
    return {
        name: jax.ShapeDtypeStruct(np.shape(value), np.asarray(value).dtype, sharding=replicated)
        if name in DEVICE
        else np.zeros_like(value)
        for name, value in tree.items()
    }


def save(path, state: dict) -> str:
    """Save `state` with Orbax's StandardCheckpointer into a new folder `path` (never overwritten)."""
    import orbax.checkpoint as ocp

    path = os.path.abspath(os.fspath(path))
    if os.path.lexists(path):
        raise CheckpointExistsError(f"{path} already exists; Orbax checkpoints are never overwritten either")
    # Without OCDBT every field is its own zarr folder under its own name: the same files (and bytes)
    # every run, where OCDBT writes its data under random names.
    with ocp.StandardCheckpointer(use_ocdbt=False) as checkpointer:
        checkpointer.save(path, as_tree(state))
        checkpointer.wait_until_finished()
    return path


def restore(path, like: dict, mesh: Mesh) -> dict:
    """Restore the folder `path` against `target(like, mesh)`: shapes, dtypes and shardings from the target."""
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as checkpointer:
        tree = checkpointer.restore(os.path.abspath(os.fspath(path)), target(like, mesh))
    return {**tree, **{name: int(tree[name]) for name in SCALARS}}


def leaf_report(a: dict, b: dict, mesh: Mesh) -> dict:
    """Per field: max absolute difference, equal dtype and shape; replicated on `mesh` for device fields."""
    report = {}
    for name in FIELDS:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        same_shape = x.shape == y.shape and x.dtype == y.dtype
        diff = float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if same_shape and x.size else 0.0
        entry = {"max_abs_diff": diff if same_shape else float("inf"), "same_shape_dtype": bool(same_shape)}
        if name in DEVICE:
            entry["replicated_on_mesh"] = is_replicated(b[name], mesh)
        report[name] = entry
    return report
