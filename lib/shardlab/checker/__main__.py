"""Child interpreter of `python -m shardlab check`: four CPU devices first, then the checks."""

import argparse
import sys

import shardlab.checker.compile_cache as compile_cache
from shardlab.core.config import NUM_DEVICES
from shardlab.core.devices import setup_devices


def main(argv=None) -> int:
    import shardlab.checker.cli as runner

    parser = argparse.ArgumentParser(prog="python -m shardlab.checker")
    runner.add_child_arguments(parser)
    args = parser.parse_args(argv)
    return runner.child_main(args)


if __name__ == "__main__":
    setup_devices(NUM_DEVICES)  # the interpreter's first JAX configuration: CPU, four logical devices
    compile_cache.enable()  # programs compiled by an earlier check run are reused (never a different result)
    sys.exit(main())
