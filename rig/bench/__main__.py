"""`python -m rig.bench --out DIR`: every measurement of `make bench`'s first half; `--help` lists the options."""

import sys

from rig.bench import command

if __name__ == "__main__":
    sys.exit(command())
