"""The checker never imports a learner's file: values cross to and from its interpreter as data, faithfully.

Round trips are checked against NumPy's and JAX's own view of the value (bytes per shard, shardings,
types), never against the wire module's output; hostile answers must end as a named verdict.
"""

import collections
import json
import os
import struct
import textwrap
import time
from argparse import Namespace

import jax
import numpy as np
import pytest
from conftest import ended, proc_state, until
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import shardlab.checker.cli as runner
import shardlab.checker.command as command
import shardlab.checker.wire as wire
from shardlab.checker import guard, remote
from shardlab.core.config import Config
from shardlab.core.devices import make_mesh
from shardlab.core.fixtures import Dataset
from shardlab.errors import ContractMismatchError


def _round_trip(value, args=None, before=None):
    encoder = wire.Encoder(handles=lambda v: 0, before=before)
    node = encoder.encode(value, (0,) if before is not None else None)
    text = json.loads(json.dumps(node))  # the header really is JSON
    return wire.Decoder(encoder.blobs, args=args).decode(text)


def _shards(array) -> list:
    return [(s.device.id, s.index, np.asarray(s.data).tobytes()) for s in array.addressable_shards]


def test_arrays_cross_with_their_bytes_dtype_shape_and_kind():
    for dtype in ("bool", "int8", "uint16", "int32", "int64", "float16", "float32", "float64", "complex64"):
        array = (np.arange(24) % 5).astype(dtype).reshape(2, 3, 4)
        back = _round_trip(array)
        assert type(back) is np.ndarray and back.dtype == array.dtype and back.shape == array.shape
        assert back.tobytes() == array.tobytes()
    scalar = _round_trip(np.float32(1.5))
    assert type(scalar) is np.float32 and scalar == np.float32(1.5)
    zero_d = _round_trip(np.array(7, np.int32))
    assert type(zero_d) is np.ndarray and zero_d.shape == () and int(zero_d) == 7
    frozen = np.ones(3)
    frozen.setflags(write=False)
    assert not _round_trip(frozen).flags.writeable
    assert isinstance(_round_trip(np.array([object()], dtype=object)), wire.Opaque)  # never unpickled
    for plain in (None, True, 3, -(2**70), 2.5, float("nan"), float("inf"), "text", b"\x00\xff", 1 + 2j):
        back = _round_trip(plain)
        assert type(back) is type(plain) and (back == plain or (back != back and plain != plain))


def test_jax_arrays_cross_shard_by_shard_with_their_sharding():
    for devices in (1, 2, 3, 4):
        mesh = make_mesh(devices)
        rows = np.arange(devices * 2 * 3, dtype=np.float32).reshape(devices * 2, 3)
        for spec in (P("data", None), P(), P(None, None)):
            placed = jax.device_put(rows, NamedSharding(mesh, spec))
            back = _round_trip(placed)
            assert isinstance(back, jax.Array) and back.sharding == placed.sharding
            assert _shards(back) == _shards(placed)
    one = jax.device_put(np.ones(3, np.float32), jax.devices()[2])
    assert _round_trip(one).sharding.device_set == {jax.devices()[2]}


def test_jax_narrow_floats_cross_as_themselves():
    """bfloat16 and float8 arrays (a learner's dtype drift) arrive with their dtype, so a check judges the dtype."""
    mesh = make_mesh(2)
    for dtype in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        values = jax.numpy.asarray([0.0, 1.5, -2.0, 0.25], dtype)
        placed = jax.device_put(values, NamedSharding(mesh, P("data")))
        back = _round_trip(placed)
        assert back.dtype == placed.dtype and str(back.dtype) == dtype and back.sharding == placed.sharding
        assert _shards(back) == _shards(placed)
        host = _round_trip(np.asarray(values))
        assert type(host) is np.ndarray and host.dtype.name == dtype
        assert host.astype(np.float32).tolist() == [0.0, 1.5, -2.0, 0.25]


def test_a_replicated_array_whose_devices_disagree_still_disagrees():
    mesh = make_mesh(4)
    pieces = [jax.device_put(np.full(2, float(i), np.float32), d) for i, d in enumerate(mesh.devices.flat)]
    torn = jax.make_array_from_single_device_arrays((2,), NamedSharding(mesh, P()), pieces)
    back = _round_trip(torn)
    assert [float(np.asarray(s.data)[0]) for s in sorted(back.addressable_shards, key=lambda s: s.device.id)] == [
        0.0,
        1.0,
        2.0,
        3.0,
    ]


def test_shards_that_do_not_fit_their_sharding_are_refused():
    """A split array needs one piece per device of its mesh, each of the size its index there holds."""
    mesh = make_mesh(2)
    placed = jax.device_put(np.arange(4, dtype=np.float32), NamedSharding(mesh, P("data")))
    encoder = wire.Encoder()
    node = json.loads(json.dumps(encoder.encode(placed)))
    assert np.asarray(wire.Decoder(encoder.blobs).decode(node)).tolist() == [0.0, 1.0, 2.0, 3.0]
    one_short = {**node, "shards": node["shards"][:1]}
    twice_on_one = {**node, "shards": [node["shards"][0], {**node["shards"][1], "device": node["shards"][0]["device"]}]}
    wrong_size = {**node, "shards": [{**shard, "shape": [1]} for shard in node["shards"]]}
    blobs = [*encoder.blobs, b"\x00" * 4]
    wrong_size["shards"][1]["b"] = wrong_size["shards"][0]["b"] = len(blobs) - 1
    for bad in (one_short, twice_on_one, wrong_size):
        with pytest.raises(wire.WireError, match="do not fit its sharding"):
            wire.Decoder(blobs).decode(bad)


def test_keys_deleted_arrays_meshes_and_course_types_cross_as_themselves():
    key = jax.random.key(3)
    back = _round_trip(key)
    assert jax.dtypes.issubdtype(back.dtype, jax.dtypes.prng_key)
    assert np.array_equal(jax.random.key_data(back), jax.random.key_data(key))
    gone = jax.numpy.ones(4)
    gone.delete()
    assert _round_trip(gone).is_deleted()
    mesh = make_mesh(3)
    assert _round_trip(mesh).devices.tolist() == mesh.devices.tolist() and _round_trip(mesh).axis_names == ("data",)
    data = Dataset(np.ones((2, 2), np.float32), np.zeros(2, np.float32))
    assert type(_round_trip(data)) is Dataset
    assert _round_trip(Config(seed=4)) == Config(seed=4)
    own = collections.namedtuple("Batch", "features mask")(1, 2)
    back = _round_trip(own)
    assert back._fields == ("features", "mask") and tuple(back) == (1, 2) and type(back).__name__ == "Batch"
    nested = {"a": [1, (2, {3: "x"})], (1, 2): frozenset({4})}
    assert _round_trip(nested) == nested


def test_write_back_changes_the_callers_objects_as_the_callee_did():
    """The worker's copy changed in place (array) and by replacement (entry): the caller's copy does the same."""
    sent = {"order": np.arange(4), "step": 0, "key": np.zeros(2)}
    caller = {name: (value.copy() if isinstance(value, np.ndarray) else value) for name, value in sent.items()}
    caller_order, caller_key = caller["order"], caller["key"]
    before = wire.identities([sent])
    sent["order"][0] = 9  # in place
    sent["key"] = np.ones(2)  # replaced
    encoder = wire.Encoder(before=before)
    node = json.loads(json.dumps(encoder.encode(sent, (0,))))
    wire.write_back(caller, node, wire.Decoder(encoder.blobs))
    assert caller["order"] is caller_order and caller["order"].tolist() == [9, 1, 2, 3]
    assert caller["key"] is not caller_key and caller["key"].tolist() == [1.0, 1.0] and caller_key.tolist() == [0, 0]
    refs = {id(v): p for p, v in before.items()}
    encoder = wire.Encoder(refs=refs)
    node = json.loads(json.dumps(encoder.encode(sent)))
    assert wire.Decoder(encoder.blobs, args=[caller]).decode(node) is caller  # the very dict it was given


@pytest.mark.parametrize(
    "node",
    [
        {"t": "nd", "dtype": "object", "shape": [1], "b": 0},
        {"t": "nd", "dtype": "float32", "shape": [10**9], "b": 0},
        {"t": "nd", "dtype": "float32", "shape": [-1], "b": 0},
        {"t": "jax", "dtype": "float32", "shape": [2], "sharding": {"kind": "single", "device": 99}, "shards": []},
        {"t": "mesh", "devices": [[0, 1, 2, 3, 4]], "shape": [1, 5], "axes": ["data"]},
        {"t": "exec", "v": "import os"},
        {"t": "ref", "path": [0]},
        {"t": "fn", "id": [1]},
        [1, 2],
        {"t": "dc", "mod": "os", "cls": "system", "v": {}},
    ],
)
def test_a_message_that_is_not_a_value_is_refused_by_name(node):
    try:
        found = wire.Decoder([b"\x00" * 4]).decode(node)
    except wire.WireError:
        return
    assert isinstance(found, wire.Opaque), found  # the only other answer: a named stand-in, never code run


def test_nesting_and_sizes_are_bounded():
    deep = None
    for _ in range(wire.DEPTH + 5):
        deep = {"t": "list", "v": [deep]}
    with pytest.raises(wire.WireError):
        wire.Decoder([]).decode(deep)
    read, write = os.pipe()
    os.write(write, struct.pack(">Q", wire.HEADER_BYTES + 1))
    with pytest.raises(wire.WireError):
        wire.receive(read)
    os.close(read)
    os.close(write)


def test_exceptions_cross_as_the_course_classes_a_check_catches():
    class Mine(ContractMismatchError):
        pass

    rebuilt = wire.rebuilt(wire.exception(Mine("other experiment"), "model.py:3 in restore"))
    assert isinstance(rebuilt, ContractMismatchError) and isinstance(rebuilt, ValueError)
    assert type(rebuilt).__name__ == "Mine" and str(rebuilt) == "other experiment"
    assert rebuilt.shardlab_where == "model.py:3 in restore"
    assert isinstance(wire.rebuilt(wire.exception(FileExistsError("x"), "")), FileExistsError)
    forged = wire.rebuilt({"mro": ["shardlab.checker.common.CheckFailed", "builtins.Exception"], "text": "pass"})
    assert type(forged).__name__ == "CheckFailed" and type(forged).__mro__[1] is Exception  # not the checker's


def test_a_learner_error_is_quoted_alike_on_both_sides_of_the_worker_boundary():
    from shardlab.checker import common, probes

    message = "refused " * 60  # 480 characters: longer than a quote

    def refuse(*args):
        raise ValueError(message)

    expected = ("ValueError: " + message)[:300]
    assert probes.in_a_thread(refuse) == {"error": expected}  # the worker's side
    assert common.attempt(refuse, failed="none") == ("none", expected)  # the checker's side
    assert len(expected) == 300 and expected.startswith("ValueError: refused refused")


FORGE = """
import shardlab.checker.cli as cli
cli.run_one = lambda check, stage, ctx: cli.Result(check.__name__, stage, True, 1, 1, '', 0.0)
import shardlab.checker.common as common
common.expect = lambda ok, expected, observed, diagnosis: (expected, expected)
initial = next_batch = make_step = transition = contract = save = restore = lambda *args, **kwargs: None
"""


def test_a_file_that_replaces_the_checker_on_import_gets_no_pass(tmp_path):
    spec = tmp_path / "forge.py"
    spec.write_text(FORGE)
    results = runner.run_checks(str(spec), 1, only=True)
    assert results and not any(r.passed for r in results), [r.name for r in results if r.passed]


def _answering(tmp_path, answer: str, call_seconds: float) -> remote.RemoteImplementation:
    """A started worker for a file whose worker process answers every call with `answer`'s body (`self` the server;
    os, signal and time imported)."""
    spec = tmp_path / "answering.py"
    spec.write_text(
        "import os, signal, sys, time\n"
        "from shardlab.learner.reference import *  # noqa\n"
        'worker = sys.modules["__main__"]  # the worker runs as python -m shardlab.checker.worker\n'
        "def answer(self, header, blobs):\n" + textwrap.indent(textwrap.dedent(answer), "    ") + "\n"
        "worker.Server.answer = answer\n"
    )
    impl = remote.RemoteImplementation(remote.Worker(str(spec), call_seconds=call_seconds, scratch=str(tmp_path)))
    started = impl.worker.start()
    if "error" in started:
        impl.close()
    assert "error" not in started, started
    return impl


def test_a_worker_that_answers_garbage_is_ended_with_a_verdict(tmp_path):
    impl = _answering(tmp_path, 'os.write(self.write, b"\\xff" * 64)\nreturn {"ok": None, "changes": []}, [], 0', 5)
    try:
        with pytest.raises(guard.Overrun, match="not a value the checker reads|did not return"):
            impl.initial(0, Dataset(np.ones((4, 2), np.float32), np.ones(4, np.float32)), make_mesh(4))
        with pytest.raises(guard.Overrun, match="not called again"):
            impl.initial(0, None, None)
    finally:
        impl.close()


def test_a_worker_that_closes_its_channel_and_goes_on_is_ended_within_the_calls_bound(tmp_path):
    linger = """
        signal.signal(signal.SIGALRM, signal.SIG_IGN)  # its own alarm cannot end it either
        os.close(self.write)
        time.sleep(600)
    """
    impl = _answering(tmp_path, linger, 1)
    try:
        pid = impl.worker.process.pid
        with pytest.raises(guard.Overrun, match="did not return within 1 s"):  # the bound, not the sleep's end
            impl.contract(None, None)
        assert ended([pid], 30.0), "the worker outlived the call that closed its channel"
    finally:
        impl.close()


def test_a_symbolic_link_out_of_the_scratch_folder_is_removed_and_named(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    spec = tmp_path / "links.py"
    spec.write_text(
        "import os\nfrom shardlab.learner.reference import *  # noqa\n"
        f"def contract(data, config):\n    os.symlink({str(outside)!r}, 'out')\n    os.symlink('.', 'here')\n"
        "    return {}\n"
    )
    impl = remote.RemoteImplementation(remote.Worker(str(spec), scratch=str(scratch)))
    try:
        with pytest.raises(guard.Overrun, match="symbolic links that lead out"):
            impl.contract(None, None)
    finally:
        impl.close()
    assert not (scratch / "out").exists() and (scratch / "here").is_symlink()  # only the one leading out


def test_the_scan_lists_only_changed_folders_and_still_finds_a_link_made_in_a_settled_one(tmp_path, monkeypatch):
    """A folder unchanged since the last scan is not listed again, yet a link made later in it (its time stamps set
    back with utime) is found: the folder's change time, which no call can set, moved."""
    scratch, outside = tmp_path / "scratch", tmp_path / "outside"
    deep = scratch / "a" / "b" / "c"
    deep.mkdir(parents=True)
    outside.mkdir()
    for folder in (scratch, scratch / "a", scratch / "a" / "b", deep):
        (folder / "f").write_bytes(b"x")
    listed = []
    listing = remote._listing
    monkeypatch.setattr(remote, "_listing", lambda folder, *rest: listed.append(folder) or listing(folder, *rest))
    monkeypatch.setattr(remote, "SETTLED_NS", 0)  # settled once older than the last scan's start
    worker = remote.Worker("reference", scratch=str(scratch))
    time.sleep(0.05)  # the folders' change times fall before the first scan's start
    assert worker._scan() is None and len(listed) == 4  # every folder listed once
    listed.clear()
    assert worker._scan() is None and listed == []  # nothing changed: nothing listed, every folder looked at
    before = os.stat(deep)
    os.symlink(outside, deep / "out")
    os.utime(deep, ns=(before.st_atime_ns, before.st_mtime_ns))  # the modification time put back
    assert os.stat(deep).st_mtime_ns == before.st_mtime_ns and os.path.lexists(deep / "out")
    found = worker._scan()
    assert listed == [str(deep.resolve())] and "a/b/c/out" in found and not os.path.lexists(deep / "out")


@pytest.mark.slow  # a child interpreter: make test's, not the inner loop's
def test_the_report_says_the_file_could_not_load_from_its_own_interpreter(tmp_path, capfd):
    spec = tmp_path / "broken.py"
    spec.write_text("def initial(seed, data, mesh:\n    pass\n")
    out = tmp_path / "out"
    assert command.main(Namespace(implementation=str(spec), stage="1", only=True, output=str(out))) == 1
    report = json.loads((out / command.REPORT).read_text())
    assert report["checks"][0]["name"] == "implementation_loads" and "SyntaxError" in report["checks"][0]["observed"]


def _state(pid: int) -> str | None:
    """The process's state letter as the kernel reports it, once it is "T" or after 5 s: a stop signal takes effect
    when the process next runs, not when kill returns."""
    until(lambda: proc_state(pid) == "T", 5.0, every=0.01)
    return proc_state(pid)


def test_between_calls_the_worker_and_every_process_it_started_are_stopped(tmp_path, monkeypatch):
    """A call that leaves no other process is confirmed stopped by one read of the process tree; a call that starts
    a child leaves both stopped too (their state read from /proc), and the next call resumes them."""
    spec = tmp_path / "children.py"
    spec.write_text(
        "import subprocess\nfrom shardlab.learner.reference import *  # noqa\n"
        "def contract(data, config):\n"
        "    if data:\n"
        "        return {'child': subprocess.Popen(['sleep', '60']).pid}\n"
        "    return {}\n"
    )
    reads = []
    tree = remote.sandbox.descendants
    monkeypatch.setattr(remote.sandbox, "descendants", lambda root: reads.append(root) or tree(root))
    impl = remote.RemoteImplementation(remote.Worker(str(spec), scratch=str(tmp_path)))
    try:
        impl.contract(None, None)  # starts the worker, then a call with no child
        worker = impl.worker.process.pid
        reads.clear()
        assert impl.contract(None, None) == {} and len(reads) == 1 and _state(worker) == "T"
        child = impl.contract(True, None)["child"]
        assert _state(worker) == "T" and _state(child) == "T"
        impl.contract(None, None)
        assert _state(child) == "T"  # resumed for the call, stopped again after it
    finally:
        impl.close()
