"""Values as data between the checker and the interpreter that runs a learner's code.

The checker never imports a learner's file: it sends each call's arguments to the interpreter
that does (`checker/worker.py`) and receives what came back, both as the data this module writes.
Everything a learner's function can return that the checks look at crosses over as what it is:

- Python scalars, strings, bytes, tuples, lists, dicts (any keys), sets, named tuples;
- NumPy arrays and scalars (dtype, shape, bytes, whether writeable);
- `jax.Array`s shard by shard: each device's own buffer, the sharding (a `NamedSharding` with its
  mesh's device ids and axis names, or one device), so a "replicated" array whose devices disagree
  stays so; a typed PRNG key as its key data and implementation; a deleted (donated) array as deleted;
- meshes, `PartitionSpec`s, the course's named tuples and dataclasses (`Dataset`, `Batch`, `Config`);
- a callable (the step `make_step` returns) as a handle the worker keeps;
- the identity of what a call returns: the very dict or array it was given comes back as a
  reference to the caller's object, and a caller's argument changed in place is changed in place.

Anything else arrives as an `Opaque` value that names its type. Decoding is bounded (message size,
nesting, number of nodes, a closed list of dtypes) and never runs code the sender chose: no pickle.
"""

import builtins
import collections
import contextlib
import dataclasses
import hashlib
import json
import os
import struct
import sys

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

try:  # JAX's batched placement of per-device pieces (the step inside jax.make_array_from_callback)
    from jax._src.core import ShapedArray as _ShapedArray
    from jax._src.interpreters.pxla import batched_device_put as _batched_device_put
except ImportError:  # another JAX: one device_put per piece
    _batched_device_put = None

import shardlab.core.batch  # noqa: F401  the course's types that cross are loaded on both sides
import shardlab.core.config  # noqa: F401
import shardlab.core.errors as core_errors
import shardlab.core.fixtures  # noqa: F401
from shardlab import errors

MESSAGE_BYTES = 1 << 30  # the largest message either side reads
HEADER_BYTES = 64 << 20  # the largest JSON part of one message
DEPTH = 64  # nesting a value may have
NODES = 1_000_000  # values one message may hold
DTYPES = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 complex64 complex128".split()
    # JAX's narrow floats (ml_dtypes, loaded with jax): a bfloat16 weight crosses as itself and is judged by its dtype
    + "bfloat16 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz float8_e4m3b11fnuz".split()
)
COURSE_TYPES = ("shardlab.",)  # modules whose named tuples and dataclasses are rebuilt as themselves


class WireError(Exception):
    """A message that is not one this module writes (too large, too deep, a dtype outside the list)."""


class Opaque:
    """A returned value of a kind that does not cross over (a learner's own class instance): its type and repr."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __repr__(self):
        return f"<{self.type_name}: {self.text}>"


def _opaque_class(name: str) -> type:
    short = name.rsplit(".", 1)[-1] or "object"
    return type(short if short.isidentifier() else "object", (Opaque,), {})


# ---------------------------------------------------------------------------------------------- encoding


class Encoder:
    """Turns a value into a JSON tree plus binary blobs; `refs` maps id(object) -> path of a caller's argument."""

    def __init__(self, handles=None, refs=None, before=None):
        self.blobs, self.nodes = [], 0
        self.handles = handles  # worker side: a callable becomes a handle kept here; None: callables refused
        self.refs = refs or {}
        self.before = before  # path -> the object at that path before the call (marks what was kept)

    def blob(self, data: bytes) -> int:
        self.blobs.append(bytes(data))
        return len(self.blobs) - 1

    def encode(self, value, path=None, depth: int = 0):
        self.nodes += 1
        if depth > DEPTH or self.nodes > NODES:
            raise WireError(f"a value nested deeper than {DEPTH} or with more than {NODES} parts")
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int) and type(value) is int:
            return value if abs(value) < 2**53 else {"t": "int", "v": str(value)}
        if isinstance(value, float) and type(value) is float:
            return value if np.isfinite(value) else {"t": "float", "v": repr(value)}
        kept = None
        if self.before is not None and path is not None and path in self.before:
            kept = self.before[path] is value
        elif path is None and id(value) in self.refs and not isinstance(value, (int, float, complex)):
            return {"t": "ref", "path": list(self.refs[id(value)])}
        node = self._node(value, path, depth)
        if kept is not None:
            node["kept"] = kept
        return node

    def _child(self, path, key):
        return None if path is None else (*path, key)

    def _node(self, value, path, depth):
        for kinds, method in self._KINDS:
            if isinstance(value, kinds):
                return method(self, value, path, depth)
        return self._other(value, path, depth)

    def _scalar(self, value, path, depth):
        if isinstance(value, bytes):
            return {"t": "bytes", "b": self.blob(value)}
        if isinstance(value, complex):
            return {"t": "complex", "v": [value.real, value.imag]}
        array = np.asarray(value)
        return {"t": "np", "dtype": self._dtype(array.dtype), "b": self.blob(array.tobytes()), **_order(array)}

    def _placement(self, value, path, depth):
        if isinstance(value, Mesh):
            return {"t": "mesh", **_mesh(value)}
        if isinstance(value, P):
            return {"t": "spec", "v": _spec(value)}
        return {"t": "named", "mesh": _mesh(value.mesh), "spec": _spec(value.spec)}

    def _sequence(self, value, path, depth):
        items = [self.encode(v, self._child(path, i), depth + 1) for i, v in enumerate(value)]
        cls = type(value)
        if isinstance(value, tuple) and hasattr(cls, "_fields"):
            return {"t": "nt", "mod": cls.__module__, "cls": cls.__qualname__, "fields": list(cls._fields), "v": items}
        return {"t": "tuple" if isinstance(value, tuple) else "list", "v": items}

    def _mapping(self, value, path, depth):
        keys = [self.encode(k, None, depth + 1) for k in value]
        items = [self.encode(v, self._child(path, _key(k)), depth + 1) for k, v in value.items()]
        return {"t": "dict", "k": keys, "v": items}

    def _other(self, value, path, depth):
        if isinstance(value, (set, frozenset)):
            return {"t": type(value).__name__, "v": [self.encode(v, None, depth + 1) for v in value]}
        if isinstance(value, os.PathLike):
            return {"t": "path", "v": os.fspath(value)}
        if dataclasses.is_dataclass(value) and not isinstance(value, type) and _course(type(value).__module__):
            cls = type(value)
            fields = {f.name: self.encode(getattr(value, f.name), None, depth + 1) for f in dataclasses.fields(value)}
            return {"t": "dc", "mod": cls.__module__, "cls": cls.__qualname__, "v": fields}
        return self._callable(value)

    def _callable(self, value):
        if isinstance(value, Handle):
            return {"t": "fn", "id": value.target}
        if callable(value) and self.handles is not None:
            name = str(getattr(value, "_name", "a function the implementation returned"))[:80]
            return {"t": "fn", "id": self.handles(value), "name": name, "lower": hasattr(value, "lower")}
        if callable(value) and not isinstance(value, type):
            raise WireError(f"{value!r} is a function of this interpreter: only the implementation's own cross over")
        return {"t": "opaque", "type": f"{type(value).__module__}.{type(value).__qualname__}", "repr": _repr(value)}

    def _dtype(self, dtype) -> str:
        name = np.dtype(dtype).name
        if name not in DTYPES:
            raise WireError(f"an array of dtype {name}, not one of the plain numeric dtypes")
        return name

    def _numpy(self, array: np.ndarray) -> dict:
        if array.dtype.name not in DTYPES:
            kind = "object" if array.dtype == object else array.dtype.name
            return {"t": "opaque", "type": f"numpy.ndarray[{kind}]", "repr": _repr(array)}
        data = np.array(array, order="C", copy=True)
        node = {
            "t": "nd",
            "dtype": array.dtype.name,
            "shape": list(array.shape),
            "b": self.blob(data.tobytes()),
            "writeable": bool(array.flags.writeable),
            **_order(array),
        }
        if not array.flags.c_contiguous and all(s >= 0 for s in array.strides):
            node["strides"] = list(array.strides)  # a Fortran-ordered array or a strided view stays one
        return node

    def _jax(self, array) -> dict:
        if array.is_deleted():
            return {"t": "deleted", "dtype": str(array.dtype), "shape": list(array.shape)}
        if jax.dtypes.issubdtype(array.dtype, jax.dtypes.prng_key):
            impl = str(jax.random.key_impl(array))
            return {"t": "key", "impl": impl, "data": self._jax(jax.random.key_data(array))}
        sharding = array.sharding
        if isinstance(sharding, NamedSharding):
            placed = {"kind": "named", "mesh": _mesh(sharding.mesh), "spec": _spec(sharding.spec)}
        elif isinstance(sharding, SingleDeviceSharding):
            placed = {"kind": "single", "device": next(iter(sharding.device_set)).id}
        else:
            return {
                "t": "opaque",
                "type": f"jax.Array with {type(sharding).__name__}",
                "repr": f"{array.dtype}{tuple(array.shape)} on {len(sharding.device_set)} device(s)",
            }
        shards = []
        for shard in sorted(array.addressable_shards, key=lambda s: s.device.id):
            data = np.array(shard.data, order="C", copy=True)
            shards.append({"device": shard.device.id, "shape": list(data.shape), "b": self.blob(data.tobytes())})
        return {
            "t": "jax",
            "dtype": self._dtype(array.dtype),
            "shape": list(array.shape),
            "sharding": placed,
            "shards": shards,
        }


Encoder._KINDS = (
    (jax.Array, lambda self, value, path, depth: self._jax(value)),
    (np.ndarray, lambda self, value, path, depth: self._numpy(value)),
    ((bytes, complex, np.generic), Encoder._scalar),
    ((Mesh, P, NamedSharding), Encoder._placement),
    ((tuple, list), Encoder._sequence),
    (dict, Encoder._mapping),
)


def _key(key) -> str:
    return key if isinstance(key, str) else repr(key)


def _repr(value) -> str:
    try:
        return repr(value)[:200]
    except Exception:
        return "(its repr raised)"


def _course(module: str) -> bool:
    return isinstance(module, str) and module.startswith(COURSE_TYPES)


def _mesh(mesh: Mesh) -> dict:
    ids = np.vectorize(lambda d: d.id, otypes=[np.int64])(mesh.devices)
    return {"devices": ids.tolist(), "shape": list(ids.shape), "axes": [str(a) for a in mesh.axis_names]}


def _spec(spec) -> list:
    return [list(part) if isinstance(part, tuple) else part for part in spec]


# ---------------------------------------------------------------------------------------------- decoding


class Handle:
    """A callable kept by the worker (the step `make_step` returned), known here by its number."""

    def __init__(self, target: int):
        self.target = target


CONTAINERS = {"tuple": tuple, "list": list, "set": set, "frozenset": frozenset}  # kind -> type, rebuilt from items


class Decoder:
    """Rebuilds a value from a JSON tree and blobs; `args` resolves references to the caller's arguments."""

    def __init__(self, blobs: list, handle=None, args=None):
        self.blobs, self.args, self.nodes = blobs, args, 0
        self.handle = handle or (lambda number, node: Handle(number))
        self._devices = {d.id: d for d in jax.devices()}

    def decode(self, node, depth: int = 0):
        self.nodes += 1
        if depth > DEPTH or self.nodes > NODES:
            raise WireError("a value nested too deep or with too many parts")
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if not isinstance(node, dict) or not isinstance(node.get("t"), str):
            raise WireError(f"not a value this checker writes: {type(node).__name__}")
        kind = node["t"]
        if kind in CONTAINERS:
            return CONTAINERS[kind](self._items(node, depth + 1))
        method = getattr(self, "_" + kind, None) if kind.isidentifier() else None
        if method is None:
            raise WireError(f"unknown kind of value {kind[:40]!r}")
        return method(node, depth + 1)

    def _items(self, node, depth):
        items = node.get("v")
        if not isinstance(items, list):
            raise WireError("a container without its items")
        return [self.decode(v, depth) for v in items]

    def _bytes_of(self, index) -> bytes:
        if not isinstance(index, int) or not 0 <= index < len(self.blobs):
            raise WireError("a reference to a missing blob")
        return self.blobs[index]

    def _int(self, node, depth):
        return int(str(node["v"])[:400])

    def _float(self, node, depth):
        return float(str(node["v"])[:40])

    def _complex(self, node, depth):
        real, imag = node["v"]
        return complex(float(real), float(imag))

    def _bytes(self, node, depth):
        return self._bytes_of(node["b"])

    def _path(self, node, depth):
        return str(node["v"])

    def _array(self, dtype, shape, index, order: str = "=") -> np.ndarray:
        if dtype not in DTYPES or order not in BYTE_ORDERS:
            raise WireError(f"an array of dtype {str(dtype)[:40]}, outside the plain numeric dtypes")
        dtype = np.dtype(dtype).newbyteorder(order)
        if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape) or len(shape) > 32:
            raise WireError("an array with an impossible shape")
        data = self._bytes_of(index)
        if int(np.prod(shape, dtype=np.float64)) * np.dtype(dtype).itemsize != len(data):
            raise WireError("an array whose bytes do not match its shape")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()

    def _nd(self, node, depth):
        array = self._array(node["dtype"], node["shape"], node["b"], node.get("order", "="))
        if "strides" in node:
            array = _laid_out(array, node["strides"])
        if not node.get("writeable", True):
            array.setflags(write=False)
        return array

    def _np(self, node, depth):
        return self._array(node["dtype"], [], node["b"], node.get("order", "="))[()]

    def _device(self, number):
        if number not in self._devices:
            raise WireError(f"device {str(number)[:20]} is not one of this interpreter's")
        return self._devices[number]

    def _mesh_of(self, node) -> Mesh:
        ids = np.asarray(node["devices"], dtype=np.int64)
        if ids.size == 0 or ids.size > len(self._devices) or list(ids.shape) != list(node["shape"]):
            raise WireError("a mesh that does not fit this interpreter's devices")
        devices = np.vectorize(self._device, otypes=[object])(ids)
        return Mesh(devices, tuple(str(a) for a in node["axes"]))

    def _mesh(self, node, depth):
        return self._mesh_of(node)

    def _spec_of(self, parts) -> P:
        return P(*[tuple(str(p) for p in part) if isinstance(part, list) else part for part in parts])

    def _spec(self, node, depth):
        return self._spec_of(node["v"])

    def _named(self, node, depth):
        return NamedSharding(self._mesh_of(node["mesh"]), self._spec_of(node["spec"]))

    def _jax(self, node, depth):
        placed = node["sharding"]
        if placed["kind"] == "named":
            sharding = NamedSharding(self._mesh_of(placed["mesh"]), self._spec_of(placed["spec"]))
        elif placed["kind"] == "single":
            sharding = SingleDeviceSharding(self._device(placed["device"]))
        else:
            raise WireError("a sharding of an unknown kind")
        shape = tuple(node["shape"])
        pieces = [
            (self._device(shard["device"]), self._array(node["dtype"], shard["shape"], shard["b"]))
            for shard in node["shards"]
        ]
        return _placed(shape, np.dtype(node["dtype"]), sharding, pieces)

    def _key(self, node, depth):
        return jax.random.wrap_key_data(self._jax(node["data"], depth), impl=str(node["impl"]))

    def _deleted(self, node, depth):
        array = jax.numpy.zeros(tuple(node["shape"]), node["dtype"] if node["dtype"] in DTYPES else "float32")
        array.delete()
        return array

    def _dict(self, node, depth):
        keys = [self.decode(k, depth) for k in node["k"]]
        values = self._items(node, depth)
        if len(keys) != len(values):
            raise WireError("a dict whose keys and values differ in number")
        return dict(zip(keys, values))

    def _nt(self, node, depth):
        fields = tuple(str(f) for f in node["fields"])
        return named_tuple(str(node["mod"]), str(node["cls"]), fields)(*self._items(node, depth))

    def _dc(self, node, depth):
        cls = course_class(str(node["mod"]), str(node["cls"]))
        values = {str(k): self.decode(v, depth) for k, v in node["v"].items()}
        if cls is None or not dataclasses.is_dataclass(cls):
            return _opaque_class(node["cls"])(f"{node['mod']}.{node['cls']}", repr(values)[:200])
        return cls(**values)

    def _fn(self, node, depth):
        number = node["id"]
        if not isinstance(number, (int, str)):
            raise WireError("a function handle that is not a number or a name")
        return self.handle(number, node)

    def _ref(self, node, depth):
        if self.args is None:
            raise WireError("a reference where none may be")
        return walk(self.args, node["path"])

    def _opaque(self, node, depth):
        return _opaque_class(str(node["type"]))(str(node["type"])[:200], str(node["repr"])[:200])


def _placed(shape: tuple, dtype, sharding, pieces: list):
    """The jax.Array whose device d holds exactly the NumPy array `pieces` gives for d (replicas may differ).

    Every device of `sharding` gets one piece of the shape its index there says, else WireError. The pieces
    go to their devices in one batched transfer (JAX's own step inside `make_array_from_callback`; one
    `device_put` per piece costs several times more), or one by one where that step is not there.
    """
    try:
        wanted = sharding.devices_indices_map(shape)
        given = dict(pieces)
        if len(given) != len(pieces) or set(given) != set(wanted):
            raise ValueError(
                f"shards on devices {sorted(d.id for d in given)}, the sharding's are {sorted(d.id for d in wanted)}"
            )
        for device, index in wanted.items():
            expected = tuple(len(range(*part.indices(size))) for part, size in zip(index, shape))
            if given[device].shape != expected:
                raise ValueError(f"a shard of shape {given[device].shape} where device {device.id} holds {expected}")
        devices = list(wanted)
        if _batched_device_put is not None and not sharding.is_fully_replicated:
            return _batched_device_put(_ShapedArray(shape, dtype), sharding, [given[d] for d in devices], devices)
        if _batched_device_put is not None:  # replicas placed one by one: each keeps its own numbers
            aval = _ShapedArray(shape, dtype)
            buffers = [_batched_device_put(aval, SingleDeviceSharding(d), [given[d]], [d]) for d in devices]
            return _batched_device_put(aval, sharding, buffers, devices)
        buffers = [jax.device_put(given[d], d) for d in devices]
        return jax.make_array_from_single_device_arrays(shape, sharding, buffers)
    except (ValueError, TypeError) as exc:
        raise WireError(f"an array whose shards do not fit its sharding: {exc}"[:300]) from None


BYTE_ORDERS = ("=", "<", ">")


def _order(array: np.ndarray) -> dict:
    """{"order": "<" or ">"} for an array whose bytes are not in this machine's order (its values read right on the
    other side), else {}."""
    return {} if array.dtype.isnative else {"order": array.dtype.byteorder}


def _laid_out(array: np.ndarray, strides) -> np.ndarray:
    """`array`'s values in a new buffer with these (non-negative) strides: the sender's memory layout."""
    if (
        not isinstance(strides, list)
        or len(strides) != array.ndim
        or not all(isinstance(s, int) and 0 <= s <= 1 << 40 for s in strides)
    ):
        raise WireError("an array with impossible strides")
    extent = sum((n - 1) * s for n, s in zip(array.shape, strides)) + array.itemsize if array.size else 0
    if extent > MESSAGE_BYTES:
        raise WireError("an array whose strides span more than a message may")
    base = np.zeros(max(extent, array.itemsize), np.uint8)
    try:
        view = np.ndarray(array.shape, array.dtype, buffer=base, strides=tuple(strides))
    except (ValueError, TypeError) as exc:
        raise WireError(f"an array with impossible strides: {exc}"[:200]) from None
    view[...] = array
    return view


def walk(root, path):
    """The object at `path` (argument index, then item indices or dict keys as `_key` writes them) under `root`."""
    value = root
    for step in path:
        if isinstance(value, dict):
            value = next((v for k, v in value.items() if _key(k) == step), None)
        elif isinstance(value, (tuple, list)) and isinstance(step, int) and 0 <= step < len(value):
            value = value[step]
        else:
            raise WireError("a reference to nothing the caller passed")
    return value


_NAMED: dict = {}


def course_class(module: str, qualname: str):
    """The course's class `module.qualname` (a shardlab module only), or None."""
    if not _course(module) or not all(part.isidentifier() for part in qualname.split(".")):
        return None
    found = sys.modules.get(module)  # only a module already loaded: nothing is imported on a sender's say
    try:
        for part in qualname.split("."):
            found = getattr(found, part)
    except AttributeError:
        return None
    return found if isinstance(found, type) else None


def named_tuple(module: str, qualname: str, fields: tuple) -> type:
    """The course's own named tuple class if it has these fields, else one made with the same name and fields."""
    cls = course_class(module, qualname)
    if cls is not None and issubclass(cls, tuple) and tuple(getattr(cls, "_fields", ())) == fields:
        return cls
    if not all(f.isidentifier() for f in fields) or len(fields) > 256:
        raise WireError("a named tuple with impossible field names")
    key = (module, qualname, fields)
    if key not in _NAMED:
        name = qualname.rsplit(".", 1)[-1]
        _NAMED[key] = collections.namedtuple(name if name.isidentifier() else "Returned", fields)
    return _NAMED[key]


# ---------------------------------------------------------------------------------------------- write-back


def identities(args, path=()) -> dict:
    """path -> object for every container and array of `args` (what the callee may keep or change in place)."""
    found = {}

    def visit(value, where, depth):
        if depth > DEPTH:
            return
        if isinstance(value, (dict, list, tuple, np.ndarray, jax.Array)):
            found[where] = value
        if isinstance(value, dict):
            for k, v in value.items():
                visit(v, (*where, _key(k)), depth + 1)
        elif isinstance(value, (tuple, list)):
            for i, v in enumerate(value):
                visit(v, (*where, i), depth + 1)

    for index, arg in enumerate(args):
        visit(arg, (*path, index), 0)
    return found


def _sign(item, digest, depth: int) -> None:
    if depth > DEPTH:
        return
    digest.update(f"{type(item).__name__}:{id(item)};".encode())
    if isinstance(item, dict):
        for k, v in item.items():
            digest.update(repr(_key(k)).encode())
            _sign(v, digest, depth + 1)
    elif isinstance(item, (tuple, list)):
        digest.update(str(len(item)).encode())
        for v in item:
            _sign(v, digest, depth + 1)
    elif isinstance(item, np.ndarray):
        digest.update(f"{item.dtype.str}{item.shape}{item.flags.writeable}".encode())
        digest.update(item.tobytes() if item.dtype.name in DTYPES else b"")
    elif isinstance(item, jax.Array):
        digest.update(b"deleted" if item.is_deleted() else b"live")
    elif isinstance(item, (int, float, str, bytes, bool, type(None), np.generic)):
        digest.update(repr(item).encode())


def signature(value) -> str:
    """A digest of what a caller can see of `value`: objects' identities, arrays' bytes, deletion."""
    digest = hashlib.sha256()
    _sign(value, digest, 0)
    return digest.hexdigest()


def _set_writeable(array: np.ndarray, flag: bool) -> None:
    with contextlib.suppress(ValueError):  # write=True on a view of a read-only base: it stays read-only
        array.setflags(write=bool(flag))


def _array_back(original: np.ndarray, values: np.ndarray, writeable: bool) -> None:
    """The callee's bytes and writeable flag onto the caller's array (a callee that froze its argument froze it)."""
    if values.shape != original.shape or values.dtype != original.dtype:
        return
    if original.tobytes() != values.tobytes():  # only changed bytes need the array writeable
        _set_writeable(original, True)
        if original.flags.writeable:
            original[...] = values
    _set_writeable(original, writeable)


def write_back(original, node, decoder: Decoder):
    """Make the caller's `original` what the callee left its copy as: in place where the callee changed it in place.

    Returns the value to keep at this place (the original object where it was kept, else the new one).
    """
    if not isinstance(node, dict) or not node.get("kept"):
        return decoder.decode(node)
    kind = node.get("t")
    if kind == "dict" and isinstance(original, dict):
        keys = [decoder.decode(k) for k in node["k"]]
        old = {_key(k): v for k, v in original.items()}
        new = [write_back(old.get(_key(k)), v, decoder) for k, v in zip(keys, node["v"])]
        original.clear()
        original.update(zip(keys, new))
    elif kind == "list" and isinstance(original, list):
        new = [write_back(original[i] if i < len(original) else None, v, decoder) for i, v in enumerate(node["v"])]
        original[:] = new
    elif kind in ("tuple", "nt") and isinstance(original, tuple):
        for item, v in zip(original, node["v"]):
            write_back(item, v, decoder)
    elif kind == "nd" and isinstance(original, np.ndarray):
        _array_back(original, decoder.decode(node), node.get("writeable", original.flags.writeable))
    elif kind == "deleted" and isinstance(original, jax.Array) and not original.is_deleted():
        original.delete()
    return original


# ---------------------------------------------------------------------------------------------- framing


def send(fd: int, header: dict, blobs: list) -> None:
    """Write one message: lengths, the JSON header (with the blob sizes), the blobs."""
    header = {**header, "sizes": [len(b) for b in blobs]}
    text = json.dumps(header, allow_nan=True).encode()
    _write_all(fd, b"".join([struct.pack(">Q", len(text)), text, *blobs]))  # one write wakes the reader once


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_exactly(fd: int, count: int, wait=None) -> bytes:
    """`count` bytes from `fd`; EOFError if it closes first. `wait()` is called before each read (it may raise)."""
    parts, left = [], count
    while left:
        if wait:
            wait()
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other interpreter closed the channel")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def receive(fd: int, wait=None) -> tuple[dict, list]:
    """Read one message (bounded): (header, blobs)."""
    (length,) = struct.unpack(">Q", read_exactly(fd, 8, wait))
    if length > HEADER_BYTES:
        raise WireError(f"a message header of {length} bytes, more than {HEADER_BYTES}")
    try:
        header = json.loads(read_exactly(fd, length, wait))
    except (ValueError, RecursionError) as exc:
        raise WireError(f"a message that is not JSON: {exc}"[:200]) from None
    sizes = header.get("sizes") if isinstance(header, dict) else None
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes):
        raise WireError("a message without its blob sizes")
    if sum(sizes) > MESSAGE_BYTES:
        raise WireError(f"a message of {sum(sizes)} bytes, more than {MESSAGE_BYTES}")
    data, blobs, at = read_exactly(fd, sum(sizes), wait), [], 0  # the blobs in one read, then cut apart
    for size in sizes:
        blobs.append(data[at : at + size])
        at += size
    return header, blobs


# ---------------------------------------------------------------------------------------------- exceptions


LEARNER_ERROR_CHARACTERS = 300  # how much of a learner's exception a check's message quotes


def learner_error(exc: BaseException, limit: int = LEARNER_ERROR_CHARACTERS) -> str:
    """'Type: message' of what a learner's code raised, cut to `limit` characters: the one form in which the
    checker and the probes in the worker quote it, so a message reads the same on either side of the boundary."""
    return f"{type(exc).__name__}: {exc}"[:limit]


def exception(exc: BaseException, where: str) -> dict:
    """An exception as data: its classes (most derived first), its text, where it was raised."""
    try:
        text = str(exc)
    except Exception:
        text = "(its message raised)"
    return {
        "mro": [f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__],
        "text": text[:4000],
        "where": where[:600],
    }


ERROR_MODULES = {"builtins": vars(builtins), "shardlab.errors": vars(errors), "shardlab.core.errors": vars(core_errors)}


def rebuilt(found: dict) -> BaseException:
    """The exception `found` describes, as the nearest class the checker knows (its own name kept).

    A learner's class derived from a course error is rebuilt as a class of the same name derived from
    that course error, so `except ContractMismatchError` sees it as the course would; only builtin and
    course error classes are looked up, nothing else is imported.
    """
    mro = [str(name) for name in found.get("mro", [])][:64]
    text, base = str(found.get("text", ""))[:4000], None
    for name in mro:
        module, _, qualname = name.rpartition(".")
        if module in ERROR_MODULES:
            candidate = ERROR_MODULES[module].get(qualname)
            if isinstance(candidate, type) and issubclass(candidate, BaseException):
                base = candidate
                break
    if base is None or not issubclass(base, Exception):
        base = Exception
    own = mro[0].rpartition(".")[2] if mro else base.__name__
    cls = base if own == base.__name__ else type(own if own.isidentifier() else base.__name__, (base,), {})
    try:
        error = cls(text)
    except Exception:
        error = Exception(text)
    error.shardlab_where = str(found.get("where", ""))
    return error
