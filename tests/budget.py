"""How many examples a property test draws: every one in `make test`, a fifth in `make test-quick`.

`make test` (and so CI) draws each property's full count; the inner loop after an edit draws a
smaller sample of the same strategies, so every property still runs there, only less of its search.
tests/conftest.py sets SHARDLAB_TEST_QUICK for a `--quick` session before any test module is imported.
"""

import os

QUICK = "SHARDLAB_TEST_QUICK"


def examples(full: int) -> int:
    """`full` in a whole run; under --quick a fifth of it, at least three."""
    return max(3, full // 5) if os.environ.get(QUICK) == "1" else full
