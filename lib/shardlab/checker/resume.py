"""Fresh-interpreter half of the stage 3 proof: restore a checkpoint, continue, write the record.

Run by the checker as `python -m shardlab.checker.resume ...`; four CPU devices are set
before anything else touches JAX, exactly as a learner's fresh kernel would.
"""

import argparse
import sys

from shardlab.core.config import NUM_DEVICES
from shardlab.core.devices import make_mesh, setup_devices


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shardlab.checker.resume")
    for name in ("--implementation", "--checkpoint", "--record"):
        parser.add_argument(name, required=True)
    for name in ("--steps", "--seed", "--batch-size"):
        parser.add_argument(name, type=int, required=True)
    args = parser.parse_args(argv)
    setup_devices(NUM_DEVICES)
    from shardlab.core.config import Config
    from shardlab.core.fixtures import teaching_fixture
    from shardlab.learner import implementation
    from shardlab.verify import replay

    impl, data, mesh = implementation.load(args.implementation), teaching_fixture(), make_mesh(NUM_DEVICES)
    contract = impl.contract(data, Config(seed=args.seed, batch_size=args.batch_size))
    state = impl.restore(args.checkpoint, contract, mesh)
    record = replay.run(state, data, args.batch_size, args.steps, mesh, impl.make_step(mesh), impl.transition)
    replay.save_record(args.record, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
