"""Logical CPU devices and the one-axis `data` mesh every stage uses."""

import os

import jax
from jax.sharding import Mesh

from shardlab.core.config import NUM_DEVICES
from shardlab.core.errors import DeviceSetupError

AXIS = "data"


def setup_devices(num_devices: int = NUM_DEVICES) -> list:
    """Ask JAX for `num_devices` logical CPU devices; return them.

    Must run before JAX's backend starts (before any array is created). Calling it
    again with the same count is harmless; another count raises DeviceSetupError.
    """
    if int(num_devices) < 1:
        raise DeviceSetupError(f"num_devices must be >= 1, got {num_devices}")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", int(num_devices))
    except RuntimeError:
        pass  # backend already started: verify below
    devices = jax.devices()
    if len(devices) != num_devices:
        raise DeviceSetupError(
            f"JAX is already initialised with {len(devices)} device(s), but {num_devices} "
            "were requested. The device count can only be set before JAX starts: restart "
            "the kernel (or interpreter) and run the set-up cell first."
        )
    return devices


def make_mesh(num_devices: int | None = None) -> Mesh:
    """A 1-D mesh named `data` over the first `num_devices` devices (default: all)."""
    devices = jax.devices()
    n = len(devices) if num_devices is None else int(num_devices)
    if not 1 <= n <= len(devices):
        raise DeviceSetupError(
            f"a mesh of {n} devices was requested but JAX sees {len(devices)}; "
            "call setup_devices(n) in a fresh kernel first"
        )
    return Mesh(devices[:n], (AXIS,))
