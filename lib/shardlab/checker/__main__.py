"""Child interpreter of `python -m shardlab check`: four CPU devices first, then the checks.

Before its own imports of JAX and the checks, it makes the run's scratch folders and starts the
implementation's interpreter (checker/early.py), so the two interpreters start side by side. Once
the checks are reported it ends at `os._exit`, without the teardown of JAX and XLA.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import shardlab.checker.command as command
import shardlab.checker.compile_cache as compile_cache
import shardlab.checker.early as early


def arguments(argv=None):
    parser = argparse.ArgumentParser(prog="python -m shardlab.checker")
    command.add_child_arguments(parser)
    return parser.parse_args(argv)


def started(args, workdir: str, other: str | None) -> early.Early:
    """The first worker, launched now with exactly the arguments the run's first worker would have."""
    box, writable = early.box_for(args.implementation, workdir, other, args.sandbox)
    if args.implementation != "reference":
        try:  # a path the run refuses is refused by the run, with its own verdict
            from shardlab.learner.implementation import check_path

            check_path(args.implementation)
        except Exception:
            return early.Early(workdir, other, None)
    poisoned = json.loads(args.poison)
    if box is None:  # every unsandboxed worker of this run is a fork of one server (checker/forkserver.py)
        early.warm(writable)  # the server starts now; the fork waits for its imports in a thread, beside ours
        launching = early.in_background(
            lambda: early.launch(args.implementation, args.call_seconds, poisoned, box, writable)
        )
        return early.Early(workdir, other, launching)
    return early.Early(workdir, other, early.launch(args.implementation, args.call_seconds, poisoned, box, writable))


def main(argv=None) -> int:
    args = arguments(argv)
    compile_cache.environment()  # the worker inherits the cache's settings, as a later one would
    workdir = tempfile.mkdtemp(prefix="shardlab-check-")
    try:
        with early.other_file_system(workdir) as other:
            first = started(args, workdir, other)
            from shardlab.core.config import NUM_DEVICES
            from shardlab.core.devices import setup_devices

            setup_devices(NUM_DEVICES)  # the interpreter's first JAX configuration: CPU, four logical devices
            compile_cache.enable()  # programs compiled by an earlier check run are reused (never another result)
            import shardlab.checker.cli as runner

            return runner.child_main(args, first)
    finally:
        import shardlab.checker.forkserver as forkserver

        forkserver.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    status = main()
    # every event is on the progress file and the folders are gone: the interpreter ends here, without tearing
    # down XLA's CPU client and JAX's modules (tenths of a second that the supervisor would wait for)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
