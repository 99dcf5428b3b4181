"""The test suite's one reach into private pytest API, behind the versions requirements-cpu.txt pins.

pytest-xdist's `loadgroup` scheduling groups tests by an `@group` suffix of their node id.
xdist 3.8.0 writes that suffix where pytest 9.2 no longer reads it (upstream #1386), so
tests/conftest.py writes it through pytest's private `NodeId`. Nothing in the library needs
this; it lives beside the tests, checked the way shardlab.compat checks the library's own
private APIs (an upgrade is refused by name, not turned into a silently serial suite).
"""

from shardlab import compat

PINS = {"pytest": "9.2.0", "pytest-xdist": "3.8.0"}
HOME = "tests/_xdist.py"


def group_node_id(item, group: str) -> None:
    """Give a collected test the node id `<id>@<group>` that xdist's loadgroup scheduling groups by."""
    compat.require("pytest", pins=PINS, home=HOME)
    compat.require("pytest-xdist", pins=PINS, home=HOME)
    from _pytest import nodeid

    parse = compat.private(compat.private(nodeid, "NodeId", "pytest", PINS), "parse", "pytest", PINS)
    if "@" not in item.nodeid:
        item._id = parse(f"{item.nodeid}@{group}")
