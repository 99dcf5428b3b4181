"""The only interpreter that imports a learner's file: it calls the learner's functions and answers with data.

Started by the checker (`checker/remote.py`), sandboxed when grading, as
`python -B -m shardlab.checker.worker --implementation SPEC --channel IN,OUT ...`. It sets up four
CPU devices, loads the file from its source, says hello (its pid, its JAX, what loading raised) and
then answers requests on the channel until it closes:

- `call`: one of the seven functions, or a callable an earlier call returned (a handle), on
  arguments sent as data (`checker/wire.py`); the answer is the return value or the exception, and
  every argument the call changed in place, so the checker's copy changes the same way;
- `probe`: one of `checker/probes.py`'s observations of a function (a lowered program, a traced
  program's operations, a save stopped at one file operation).

Every call runs under `checker/guard.py`'s time bound. Nothing here decides a verdict: the checker
compares the answers with its own oracle, and whatever this interpreter prints goes to the log.
"""

import argparse
import contextlib
import json
import os
import sys
import traceback

import shardlab.checker.seal as seal
from shardlab.core.config import NUM_DEVICES
from shardlab.core.devices import setup_devices
from shardlab.io import inside

CHECKER = os.path.dirname(os.path.abspath(__file__))  # frames of the checker's own code are never "where"


def _where(exc: BaseException, spec: str, function: str = "the implementation") -> str:
    """The learner's line that raised `exc`; else the innermost frame outside the checker (JAX's, NumPy's)."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if spec not in ("reference", "") and os.path.abspath(f.filename) == spec]
    outside = [f for f in frames if not inside(f.filename, CHECKER)]
    frame = (own or outside)[-1:]
    if not frame:
        return f"the call of `{function}` (no line of the file: raised inside JAX's compiled or native code)"
    return f"{frame[0].filename}:{frame[0].lineno} in {frame[0].name}"


class Server:
    """The loaded implementation, the callables it returned, and the channel to the checker."""

    def __init__(self, spec: str, read: int, write: int, call_seconds: float, poisoned: dict):
        import shardlab.checker.guard as guard

        self.spec, self.read, self.write = spec, read, write
        self.guard = guard.Guard(None, call_seconds, poisoned, worker=True)
        self.impl, self.handles, self.names = None, [], []

    def keep(self, value) -> int:
        self.handles.append(value)
        return len(self.handles) - 1

    def hello(self) -> dict:
        import jax

        import shardlab.checker.guard as guard
        from shardlab.learner import implementation

        found = {"pid": os.getpid(), "environment": {"jax": jax.__version__, "devices": len(jax.devices())}}
        found["environment"]["platform"] = jax.default_backend()
        try:
            if os.environ.get(seal.SEAL_ENV) and self.spec not in ("", "reference"):
                seal.seal()  # graded: the course's own seven functions are out of the file's reach
            module = self.guard.call("importing the file", implementation.load, self.spec)
        except (Exception, guard.Overrun) as exc:
            cause = exc.__cause__ or exc
            found["error"] = {
                "text": str(exc),
                "cause": f"{type(cause).__name__}: {cause}",
                "known": isinstance(exc, guard.Overrun) or type(exc).__name__ == "ImplementationError",
                "where": _where(exc, self.spec),
            }
            return found
        self.impl = guard.BoundedImplementation(module, implementation.API, self.guard)
        try:
            from shardlab.checker.reuse import function_digests

            found["digests"] = function_digests(module, implementation.API)
        except Exception:
            found["digests"] = {}
        return found

    def target(self, name):
        from shardlab.learner.implementation import API

        if isinstance(name, str) and name in API:
            return getattr(self.impl, name)
        if isinstance(name, int) and 0 <= name < len(self.handles):
            return self.handles[name]
        raise ValueError(f"no function {str(name)[:40]} here")

    def answer(self, header: dict, blobs: list) -> tuple[dict, list]:
        import shardlab.checker.guard as guard
        import shardlab.checker.probes as probes
        import shardlab.checker.wire as wire

        where = header.get("cwd")
        if isinstance(where, str):  # the folder the checker is in (a bare file name is relative to it)
            with contextlib.suppress(OSError):
                os.chdir(where)
        decoder = wire.Decoder(blobs, handle=lambda number, node: self.target(number))
        args = [decoder.decode(a) for a in header.get("args", [])]
        kwargs = {str(k): decoder.decode(v) for k, v in header.get("kwargs", {}).items()}
        before = wire.identities(args)
        signed = [wire.signature(a) for a in args]
        reply, encoder = {}, wire.Encoder(handles=self.keep, refs={id(v): p for p, v in before.items()})
        name = "the implementation"
        try:
            if header["op"] == "probe":
                name = str(header["probe"])
                target, rest = args[0], args[1:]
                seal.CALLING[0] = f"`{getattr(target, '_name', 'the step from make_step')}`"
                run = probes.PROBES[name]
                if name in probes.LONG:
                    value = run(target, *rest)
                else:
                    value = self.guard.call(getattr(target, "_name", "the step from make_step"), run, target, *rest)
            else:
                target = self.target(header["target"])
                name = str(getattr(target, "_name", header["target"]))
                seal.CALLING[0] = f"`{name}`" if isinstance(header["target"], str) else name
                value = target(*args, **kwargs)
            reply["ok"] = encoder.encode(value)
        except guard.Overrun as exc:
            reply["overrun"] = str(exc)
        except BaseException as exc:  # KeyboardInterrupt, GeneratorExit raised by learner code too
            reply["raised"] = wire.exception(exc, _where(exc, self.spec, name))
        if seal.REACHED:  # the course's own code was reached during this call, even if the file swallowed it
            reply["course_code"] = str(seal.REACHED[0])[:600]
            seal.REACHED.clear()
        changed = wire.Encoder(handles=self.keep, before=before)
        reply["changes"] = [
            [i, changed.encode(arg, (i,))] for i, arg in enumerate(args) if wire.signature(arg) != signed[i]
        ]
        return reply, encoder.blobs + changed.blobs, len(encoder.blobs)

    def serve(self) -> int:
        import shardlab.checker.wire as wire

        wire.send(self.write, {"hello": self.hello()}, [])
        if self.impl is None:
            return 0
        while True:
            try:
                header, blobs = wire.receive(self.read)
            except EOFError:
                return 0
            try:
                reply, out, split = self.answer(header, blobs)
            except Exception as exc:  # a message this worker cannot carry out: the call fails, the worker goes on
                reply, out, split = {"raised": wire.exception(exc, "the checker's message")}, [], 0
            reply["split"] = split  # blobs before this index belong to the answer, the rest to the changes
            wire.send(self.write, reply, out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shardlab.checker.worker")
    parser.add_argument("--implementation", required=True)
    parser.add_argument("--channel", required=True, help="IN,OUT: the file descriptors of the checker's pipes")
    parser.add_argument("--call-seconds", type=float, required=True)
    parser.add_argument("--poison", default="{}")
    args = parser.parse_args(argv)
    read, write = (int(part) for part in args.channel.split(","))
    for descriptor in (read, write):
        os.set_inheritable(descriptor, False)  # a process the learner's code starts does not get the channel
    server = Server(args.implementation, read, write, args.call_seconds, json.loads(args.poison))
    return server.serve()


if __name__ == "__main__":
    _dying = __import__("ctypes").CDLL(None).prctl
    _dying(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: the worker ends with the checker that started it
    setup_devices(NUM_DEVICES)
    import shardlab.checker.compile_cache as compile_cache

    compile_cache.enable()
    sys.exit(main())
