# ruff: noqa
# fmt: off
"""My shardlab implementation, organised as one object per concern; the seven functions are its bound methods."""

import hashlib
import io
import json
import os
import uuid
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shardlab import errors
from shardlab.core.batch import Batch
from shardlab.core.config import DECAY, LEARNING_RATE, Config

AXIS = "data"


class Sampler:
    """Key, order and cursor: split-then-permute, one epoch at a time, never in place."""

    @staticmethod
    def data(data):
        try:
            x, y = (np.asarray(a) for a in data)
        except (TypeError, ValueError):
            raise errors.DataError("data must be a (features, targets) pair") from None
        if x.ndim != 2 or y.ndim != 1 or len(x) != len(y) or x.size == 0:
            raise errors.DataError(f"features {x.shape} / targets {y.shape} are not an (n, d) / (n,) dataset")
        if not np.isfinite(x).all() or not np.isfinite(y).all():
            raise errors.DataError("the data hold NaN or inf")
        return x.astype(np.float32), y.astype(np.float32)

    @staticmethod
    def epoch(key, n):
        halves = jax.random.split(key)
        return np.asarray(halves[0], np.uint32), np.asarray(jax.random.permutation(halves[1], n), np.int32)

    def initial(self, seed, data, mesh):
        x, _ = self.data(data)
        key, order = self.epoch(jax.random.PRNGKey(seed), x.shape[0])
        zeros = Placement.replicated(np.zeros(x.shape[1], np.float32), mesh)
        return {"weights": zeros, "momentum": Placement.replicated(np.zeros(x.shape[1], np.float32), mesh),
                "key": key, "order": order, "cursor": 0, "step": 0}

    def advance(self, state, batch_size):
        if type(batch_size) is not int or batch_size <= 0:
            raise errors.ConfigError(f"batch_size must be a positive int, got {batch_size!r}")
        key, order, cursor = state["key"], state["order"], int(state["cursor"])
        if cursor == len(order):
            key, order, cursor = *self.epoch(key, len(order)), 0
        end = min(cursor + batch_size, len(order))
        return {**state, "key": key, "order": order, "cursor": end}, np.asarray(order[cursor:end], np.int32)


class Placement:
    """Padding to a device multiple and placement on the mesh."""

    @staticmethod
    def replicated(values, mesh):
        return jax.device_put(np.asarray(values, np.float32), NamedSharding(mesh, P()))

    @staticmethod
    def batch(x, y, ids, mesh):
        if len(ids) == 0:
            raise errors.EmptyBatchError("the batch selects no rows")
        slots = mesh.size * ((len(ids) + mesh.size - 1) // mesh.size)
        fx = np.zeros((slots, x.shape[1]), np.float32)
        fy, fm = np.zeros(slots, np.float32), np.zeros(slots, np.float32)
        fx[: len(ids)], fy[: len(ids)], fm[: len(ids)] = x[ids], y[ids], 1
        put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))  # noqa: E731
        return put(fx, P(AXIS, None)), put(fy, P(AXIS)), put(fm, P(AXIS))


class Update:
    """The global masked mean squared error and momentum, one psum per sum."""

    @staticmethod
    def body(x, y, m, w, v, lr, decay):
        on = m > 0
        r = jnp.where(on, jnp.dot(x, w) - y, 0.0)
        sums = [jnp.sum(jnp.where(on, 1.0, 0.0)), 2.0 * jnp.sum(jnp.where(on[:, None], x, 0.0) * r[:, None], axis=0),
                jnp.sum(jnp.square(r))]
        n, g_num, l_num = [jax.lax.psum(s, AXIS) for s in sums]
        g = g_num / n
        v = v * decay + g
        return w - v * lr, v, l_num / n, g

    def make(self, mesh, learning_rate=LEARNING_RATE, decay=DECAY, compiled=True):
        lr, dc = float(learning_rate), float(decay)
        mapped = jax.shard_map(lambda x, y, m, w, v: self.body(x, y, m, w, v, lr, dc), mesh=mesh,
                               in_specs=(P(AXIS, None), P(AXIS), P(AXIS), P(), P()), out_specs=(P(),) * 4)
        return jax.jit(mapped) if compiled else mapped


class Store:
    """Contract-checked NPZ files written with the zipfile module and published by hard link."""

    FIELDS = {"weights": "<f4", "momentum": "<f4", "key": "<u4", "order": "<i4", "cursor": "<i8", "step": "<i8"}

    @staticmethod
    def contract(data, config):
        x, y = Sampler.data(data)
        digest = hashlib.sha256()
        for a in (x, y):
            digest.update(repr((a.dtype.str, a.shape)).encode() + a.tobytes())
        return {"v": 1, "x_shape": list(x.shape), "x_dtype": x.dtype.str, "y_shape": list(y.shape),
                "y_dtype": y.dtype.str, "bytes_sha256": digest.hexdigest(), "width": int(x.shape[1]),
                "seed": int(config.seed), "batch": int(config.batch_size), "lr": float(config.learning_rate),
                "decay": float(config.decay), "devices": int(config.num_devices)}

    def save(self, path, state, contract_):
        path = os.fspath(path)
        if os.path.lexists(path):
            raise errors.CheckpointExistsError(f"{path} exists; never overwritten")
        members = {name: np.asarray(state[name], dtype) for name, dtype in self.FIELDS.items()}
        members["contract"] = np.asarray(json.dumps(contract_, sort_keys=True))
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
            for name, value in members.items():
                npy = io.BytesIO()
                np.lib.format.write_array(npy, value, allow_pickle=False)
                archive.writestr(name + ".npy", npy.getvalue())
        tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f"~{uuid.uuid4().hex}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise errors.CheckpointWriteError(f"cannot create a temporary beside {path}: {exc}") from None
        try:
            view = memoryview(buffer.getvalue())
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            os.close(fd)
            fd = None
            os.link(tmp, path)
        except FileExistsError:
            raise errors.CheckpointExistsError(f"{path} was published by another saver first") from None
        except OSError as exc:
            raise errors.CheckpointWriteError(f"{path} not written: {exc}") from None
        finally:
            if fd is not None:
                os.close(fd)
            os.unlink(tmp)
        return path

    def read(self, path):
        try:
            with zipfile.ZipFile(path) as archive:
                out = {}
                for info in archive.infolist():
                    with archive.open(info) as member:
                        out[info.filename.removesuffix(".npy")] = np.lib.format.read_array(member, allow_pickle=False)
                return out
        except Exception as exc:
            raise errors.CorruptCheckpointError(f"{path}: not a readable NPZ ({exc})") from None

    def restore(self, path, expected, mesh):
        path = os.fspath(path)
        a = self.read(path)
        try:
            found = json.loads(str(a["contract"][()]))
        except Exception:
            raise errors.CorruptCheckpointError(f"{path}: no readable contract") from None
        if found != expected:
            raise errors.ContractMismatchError(f"{path} is another experiment's checkpoint")
        rows, width = expected["x_shape"][0], expected["width"]
        bad = [name for name in self.FIELDS if name not in a]
        if bad:
            raise errors.CorruptCheckpointError(f"{path}: missing {bad}")
        for name, shape in (("weights", (width,)), ("momentum", (width,))):
            if a[name].dtype != np.float32 or a[name].shape != shape or not np.isfinite(a[name]).all():
                raise errors.CorruptCheckpointError(f"{path}: {name} must be finite float32 {shape}")
        if a["key"].dtype != np.uint32 or a["key"].shape != (2,):
            raise errors.CorruptCheckpointError(f"{path}: key must be uint32 (2,)")
        o = a["order"]
        if o.dtype.kind not in "iu" or o.shape != (rows,) or set(o.tolist()) != set(range(rows)):
            raise errors.CorruptCheckpointError(f"{path}: order is not a permutation of 0..{rows - 1}")
        for name in ("cursor", "step"):
            if a[name].shape != () or a[name].dtype.kind not in "iu":
                raise errors.CorruptCheckpointError(f"{path}: {name} must be one integer")
        cursor, step = int(a["cursor"]), int(a["step"])
        if not 0 <= cursor <= rows or step < 0:
            raise errors.CorruptCheckpointError(f"{path}: cursor {cursor} / step {step} out of range")
        if mesh.size != expected["devices"]:
            raise errors.ContractMismatchError(f"contract has {expected['devices']} devices, mesh {mesh.size}")
        return {"weights": Placement.replicated(a["weights"], mesh), "momentum": Placement.replicated(a["momentum"], mesh),
                "key": a["key"].copy(), "order": o.astype(np.int32), "cursor": cursor, "step": step}


_SAMPLER, _UPDATE, _STORE = Sampler(), Update(), Store()


def initial(seed: int, data, mesh: Mesh) -> dict:
    """State at step 0: zero weights and momentum, a split key and the first order."""
    return _SAMPLER.initial(seed, data, mesh)


def next_batch(state: dict, data, batch_size: int, mesh: Mesh) -> tuple[dict, Batch]:
    """Return (new state, placed batch): advance the sampler, pad, place. Step is unchanged."""
    x, y = Sampler.data(data)
    state, ids = _SAMPLER.advance(state, batch_size)
    return state, Batch(*Placement.batch(x, y, ids, mesh), ids)


def make_step(mesh: Mesh, learning_rate: float = LEARNING_RATE, decay: float = DECAY, compiled: bool = True):
    """Return step(features, targets, mask, weights, momentum) -> (weights, momentum, loss, grad)."""
    return _UPDATE.make(mesh, learning_rate, decay, compiled)


def transition(state: dict, data, batch_size: int, step, mesh: Mesh) -> tuple[dict, float, np.ndarray]:
    """Return (new state, pre-update loss, ids): one batch, one optimiser update, step + 1."""
    state, batch = next_batch(state, data, batch_size, mesh)
    w, v, loss, _ = step(batch.features, batch.targets, batch.mask, state["weights"], state["momentum"])
    return {**state, "weights": w, "momentum": v, "step": state["step"] + 1}, float(loss), batch.ids


def contract(data, config: Config) -> dict:
    """Everything that must match for a checkpoint to continue *this* experiment."""
    return _STORE.contract(data, config)


def save(path, state: dict, contract_: dict) -> str:
    """Write all six fields plus the contract to a new NPZ at `path`; return the path."""
    return _STORE.save(path, state, contract_)


def restore(path, expected_contract: dict, mesh: Mesh) -> dict:
    """Return the saved state after checking contract, then fields; weights re-replicated on `mesh`."""
    return _STORE.restore(path, expected_contract, mesh)
