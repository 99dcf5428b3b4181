"""Mistake: restore checks every course rule but finiteness: NaN or infinite weights and momentum are accepted.

It is the course-rules restore of tests/correct/restore_checks_each_rule.py with its finiteness test dropped.
"""

import importlib.util
from pathlib import Path

from shardlab.learner.reference import *  # noqa: F403

_SPEC = importlib.util.spec_from_file_location(
    "rules_without_finite", Path(__file__).parents[1] / "correct" / "restore_checks_each_rule.py"
)
_rules = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_rules)
_need = _rules._need


def _need_but_finiteness(ok, path, what):
    if not what.endswith("is not finite"):  # the mistake: a non-finite field passes
        _need(ok, path, what)


_rules._need = _need_but_finiteness
restore = _rules.restore
