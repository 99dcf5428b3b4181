"""The held-out wrong files only the randomised search catches are caught by it: `make test-heldout`.

Not collected by `make test` (the name does not start with test_); the Makefile target names this file and
.ci/run calls it. Each case runs one randomised check with its search and shrinking, a few seconds each: about
fifty cases, kept out of the inner loop and out of `make test`'s budget. tests/test_checker.py keeps the cheap
half of the promise (`test_every_held_out_file_was_measured`: every held-out file was measured, and no check
rejects a correct one).
"""

import pytest
from test_checker import SEARCH_ONLY

from shardlab.checker import cli


@pytest.mark.parametrize("name", sorted(SEARCH_ONLY))
def test_held_out_mistake_is_caught_by_the_search(name, heldout):
    check = SEARCH_ONLY[name]
    stage = next(s for s, m in cli.STAGES.items() if check in {c.__name__ for c in m.CHECKS})
    skip = [c.__name__ for c in cli.checks_of(stage) if c.__name__ != check]
    results = cli.run_checks(str(heldout / name), stage, only=True, skip=skip)
    assert [r.name for r in results] == [check] and not results[0].passed
    assert "Minimal case (search seed" in results[0].diagnosis or check == "contracts_agree_in_a_fresh_process"
