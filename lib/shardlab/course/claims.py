"""Sentences about measured values, chosen by the values: a notebook never states a comparison the run contradicts.

A claim names the results it rests on and one sentence per outcome of a comparison:

    say("stage5b_scaling", "async_vs_sync", "a < b",
        {"a": ("async_step_ms", async_ms), "b": ("sync_step_ms", sync_ms)},
        true="the asynchronous save's step was faster ({a:.3g} ms against {b:.3g} ms)",
        false="the asynchronous save's step was not faster here ({a:.3g} ms against {b:.3g} ms)")

Each value is given with the results key (of the same notebook) that records it: a name, or a dotted
path into a recorded dict or list ("timing.median_ms", "rows.2.loss"). `say` evaluates the
relation, formats the sentence it picks and records the claim (relation, values, keys, chosen
outcome, text) in the notebook's results under `claims`; tests/test_claims.py re-reads every recorded
claim, looks each value up under its key and re-evaluates the relation, so a sentence that a value
contradicts fails the suite. Relations are a small grammar (comparisons, `and`, `or`, `not`, `abs`,
arithmetic, numbers and value names), evaluated here and in the test with the same `holds`.
"""

import ast
import operator

from shardlab.errors import UsageError

CLAIMS = "claims"  # the results key holding a notebook's recorded claims

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_COMPARE = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


def holds(relation: str, values: dict) -> bool:
    """The truth of `relation` (e.g. "a < 0.9 * b and c > 0") for the named values; UsageError for other syntax."""
    try:
        tree = ast.parse(relation, mode="eval").body
    except SyntaxError as exc:
        raise UsageError(f"claim relation {relation!r} is not an expression: {exc.msg}") from None
    return bool(_value(tree, values, relation))


def _value(node, values: dict, relation: str):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise UsageError(f"claim relation {relation!r} names {node.id!r}, which the claim gives no value for")
        return values[node.id]
    if isinstance(node, ast.BoolOp):
        parts = [_value(v, values, relation) for v in node.values]
        return all(parts) if isinstance(node.op, ast.And) else any(parts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        inner = _value(node.operand, values, relation)
        return (not inner) if isinstance(node.op, ast.Not) else -inner
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_value(node.left, values, relation), _value(node.right, values, relation))
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        return _compare(node, values, relation)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("abs", "min", "max"):
        args = [_value(a, values, relation) for a in node.args]
        return {"abs": abs, "min": min, "max": max}[node.func.id](*args)
    raise UsageError(f"claim relation {relation!r} uses {ast.unparse(node)!r}, outside the claims grammar")


def _compare(node: ast.Compare, values: dict, relation: str) -> bool:
    left, result = _value(node.left, values, relation), True
    for op, right_node in zip(node.ops, node.comparators):
        right = _value(right_node, values, relation)
        result, left = result and _COMPARE[type(op)](left, right), right
    return result


def _has_results(out_dir: str, notebook: str) -> bool:
    import os

    from shardlab.course.results import RESULTS

    return os.path.exists(os.path.join(out_dir, RESULTS, f"{notebook}.json"))


# --- claims written for a reader: the wording in the lesson cell, the results keys in the closing cell ---------

_PENDING: dict = {}  # name -> claim, chosen in this process by `choose` and not yet recorded


def choose(name: str, relation: str, values: dict, *, true: str, false: str) -> str:
    """The sentence for the outcome of `relation` over `values` ({name: value}), kept until `record` files it.

    The lesson cell reads as the sentence it prints: a condition and one wording per outcome, no results
    keys. The notebook's closing cell calls `record` with the results key each value rests on, so the
    recorded claim is the same as `say` records and tests/test_claims.py re-checks it the same way.
    """
    outcome = holds(relation, values)
    text = (true if outcome else false).format(**values)
    _PENDING[name] = {
        "relation": relation,
        "values": dict(values),
        "holds": outcome,
        "sentences": {"true": true, "false": false},
        "text": text,
    }
    return text


def record(out_dir: str, notebook: str, keys: dict, *, partial: bool = False) -> None:
    """File every claim `choose` made in this process, each value with its results key ({claim: {value: key}}).

    A claim chosen but given no keys, or keys for a claim never chosen or for other values than it used,
    is a UsageError: a sentence about a measurement is never printed without being re-checkable.
    `partial` files only the claims `keys` names and leaves the others chosen for a later `record`.
    """
    from shardlab.course import results

    unkeyed, unsaid = sorted(set(_PENDING) - set(keys)), sorted(set(keys) - set(_PENDING))
    if (unkeyed and not partial) or unsaid:
        raise UsageError(f"claims chosen without results keys: {unkeyed}; keys for claims never chosen: {unsaid}")
    for name, named in keys.items():
        if set(named) != set(_PENDING[name]["values"]):
            raise UsageError(
                f"claim {name!r} uses values {sorted(_PENDING[name]['values'])}, keys name {sorted(named)}"
            )
    found = results.load(out_dir, notebook) if _has_results(out_dir, notebook) else {}
    recorded = dict(found.get(CLAIMS, {}))
    for name, named in keys.items():
        claim = _PENDING.pop(name)
        recorded[name] = {
            "relation": claim["relation"],
            "keys": dict(named),
            **{k: v for k, v in claim.items() if k != "relation"},
        }
    results.emit(out_dir, notebook, CLAIMS, recorded, shown=False)  # returns nothing: a closing cell shows nothing
