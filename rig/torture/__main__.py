"""`python -m rig.torture --out DIR`: the whole campaign (`make torture`); `--help` lists the options."""

import sys

from rig.torture import command

if __name__ == "__main__":
    sys.exit(command())
