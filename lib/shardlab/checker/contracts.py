"""Fresh-interpreter half of `contracts_agree_in_a_fresh_process`: the drawn experiments' contracts, as JSON.

Run by the checker as `python -m shardlab.checker.contracts ...`; it draws the same cases from the
same search seed and writes the list of contracts the implementation gives for them.
"""

import argparse
import json
import sys

from shardlab.core.devices import setup_devices


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shardlab.checker.contracts")
    parser.add_argument("--implementation", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    setup_devices(4)
    import shardlab.checker.properties as properties
    import shardlab.checker.search as search
    from shardlab.learner import implementation

    impl = implementation.load(args.implementation)
    prop = search.PROPERTIES["contract_tells_apart"]
    cases = search.cases_for(prop, args.seed, prop.cases)
    found = [impl.contract(properties.data_for(c), properties._config(c)) for c in cases]
    with open(args.out, "x") as handle:
        json.dump(found, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
