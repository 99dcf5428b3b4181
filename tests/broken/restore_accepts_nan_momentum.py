"""Mistake: restore checks every course rule but finite momentum (NaN momentum cannot continue the run).

It is the course-rules restore of tests/correct/restore_checks_each_rule.py with momentum left out of the
fields it checks.
"""

import importlib.util
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_SPEC = importlib.util.spec_from_file_location(
    "rules_without_momentum", Path(__file__).parents[1] / "correct" / "restore_checks_each_rule.py"
)
_rules = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_rules)
_rules.FINITE_FIELDS = ("weights",)  # the mistake: momentum is not checked
restore = _rules.restore
