"""Mistake: restore checks every course rule but finiteness: NaN or infinite weights and momentum are accepted.

It is the course-rules restore of tests/correct/restore_checks_each_rule.py with no field checked for finite values.
"""

import importlib.util
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_SPEC = importlib.util.spec_from_file_location(
    "rules_without_finite", Path(__file__).parents[1] / "correct" / "restore_checks_each_rule.py"
)
_rules = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_rules)
_rules.FINITE_FIELDS = ()  # the mistake: no field is checked for finite values
restore = _rules.restore
