"""Every sentence a notebook states about a measured value is true of the run that printed it.

The notebooks choose such sentences with shardlab.course.claims.say, which records each claim with
the results keys its values came from. Here every recorded claim of the course run is re-checked:
each value is looked up under its key in the notebook's results file (so the sentence rests on the
number the notebook recorded, not on a copy), the relation is evaluated again, and the printed text
must be the sentence for that outcome. Planted false claims show the check can fail.
"""

import math
import re

import pytest
from conftest import results

from shardlab.course import catalog, claims
from shardlab.errors import UsageError

pytestmark = pytest.mark.notebooks


def check_claims(found: dict) -> list[str]:
    """Every way the recorded claims of one notebook's results disagree with the values they name."""
    problems = []
    for name, claim in found.get(claims.CLAIMS, {}).items():
        values = {}
        for var, key in claim["keys"].items():
            try:
                values[var] = claims.lookup(found, key)
            except KeyError as exc:
                problems.append(f"{name}: {exc}")
                continue
            recorded = claim["values"][var]
            if isinstance(recorded, float) and not math.isclose(recorded, values[var], rel_tol=1e-12, abs_tol=0):
                problems.append(f"{name}: {var} = {recorded} but {key} records {values[var]}")
            elif not isinstance(recorded, float) and recorded != values[var]:
                problems.append(f"{name}: {var} = {recorded!r} but {key} records {values[var]!r}")
        if len(values) == len(claim["keys"]):
            truth = claims.holds(claim["relation"], values)
            said = claim["holds"]
            if truth != said:
                problems.append(f"{name}: {claim['relation']} is {truth} for {values}, the notebook said {said}")
            elif claim["text"] != claim["sentences"][str(truth).lower()].format(**values):
                problems.append(f"{name}: the text shown is not the sentence for {claim['relation']} = {truth}")
    return problems


def test_relations_follow_their_grammar():
    assert claims.holds("a < b", {"a": 1.0, "b": 2.0})
    assert not claims.holds("a < 0.5 * b and b > 0", {"a": 1.5, "b": 2.0})
    assert claims.holds("abs(a - b) <= c or not d", {"a": 1, "b": 3, "c": 1, "d": False})
    assert claims.holds("0 < a <= 1", {"a": 1})
    for bad in ("__import__('os')", "a.b < 1", "a <", "c < 1"):
        with pytest.raises(UsageError):
            claims.holds(bad, {"a": 1})


def test_a_planted_false_claim_is_found():
    found = {"async_ms": 7.0, "sync_ms": 10.0, "timing": {"median_ms": [3.0, 4.0]}}
    good = {
        "relation": "a < b",
        "keys": {"a": "async_ms", "b": "sync_ms"},
        "values": {"a": 7.0, "b": 10.0},
        "sentences": {"true": "faster", "false": "not faster"},
    }
    found[claims.CLAIMS] = {
        "faster": {**good, "holds": True, "text": "faster"},
        "says_slower": {**good, "holds": False, "text": "not faster"},  # the sentence the numbers contradict
        "copied_value": {**good, "values": {"a": 7.5, "b": 10.0}, "holds": True, "text": "faster"},
        "no_such_key": {**good, "keys": {"a": "missing", "b": "sync_ms"}, "holds": True, "text": "faster"},
        "wrong_text": {**good, "holds": True, "text": "not faster"},  # outcome right, the other sentence shown
        "dotted": {
            "relation": "a < b",
            "keys": {"a": "timing.median_ms.0", "b": "timing.median_ms.1"},
            "values": {"a": 3.0, "b": 4.0},
            "holds": True,
            "sentences": {"true": "{a} before {b}", "false": "{b} before {a}"},
            "text": "3.0 before 4.0",
        },
    }
    problems = check_claims(found)
    flagged = sorted({p.split(":")[0] for p in problems})
    assert flagged == ["copied_value", "no_such_key", "says_slower", "wrong_text"], problems


def test_say_records_what_it_printed(tmp_path):
    from shardlab.course import results as record

    record.emit(str(tmp_path), "nb", "async_ms", 12.0, shown=False)
    record.emit(str(tmp_path), "nb", "sync_ms", 10.0, shown=False)
    text = claims.say(
        str(tmp_path),
        "nb",
        "faster",
        "a < b",
        {"a": ("async_ms", 12.0), "b": ("sync_ms", 10.0)},
        true="faster ({a:.1f} < {b:.1f})",
        false="not faster ({a:.1f} >= {b:.1f})",
    )
    assert text == "not faster (12.0 >= 10.0)"
    found = record.load(str(tmp_path), "nb")
    assert found[claims.CLAIMS]["faster"]["holds"] is False and not check_claims(found)


def test_choose_keeps_the_wording_in_the_cell_and_record_files_it_with_its_keys(tmp_path):
    from shardlab.course import results as record

    record.emit(str(tmp_path), "nb", "timing", {"async_ms": 12.0, "sync_ms": 10.0}, shown=False)
    text = claims.choose("faster", "a < b", {"a": 12.0, "b": 10.0}, true="faster ({a})", false="not faster ({a})")
    assert text == "not faster (12.0)"
    with pytest.raises(UsageError):  # a chosen sentence must be filed with the key of every value it used
        claims.record(str(tmp_path), "nb", {"faster": {"a": "timing.async_ms"}})
    with pytest.raises(UsageError):  # and nothing is filed that was never chosen
        claims.record(str(tmp_path), "nb", {"faster": {"a": "timing.async_ms", "b": "timing.sync_ms"}, "other": {}})
    claims.record(str(tmp_path), "nb", {"faster": {"a": "timing.async_ms", "b": "timing.sync_ms"}})
    found = record.load(str(tmp_path), "nb")
    assert found[claims.CLAIMS]["faster"]["holds"] is False and not check_claims(found)
    found["timing"]["async_ms"] = 9.0  # the number under the key no longer says what the sentence rests on
    assert check_claims(found)
    with pytest.raises(UsageError):  # filed once: a second record finds nothing chosen for these keys
        claims.record(str(tmp_path), "nb", {"faster": {"a": "timing.async_ms", "b": "timing.sync_ms"}})


@pytest.mark.parametrize("name", catalog.NOTEBOOKS)
def test_every_claim_of_the_course_run_is_true(run_dir, name):
    found = results(run_dir, name)
    problems = check_claims(found)
    assert not problems, f"{name}: " + "; ".join(problems)


def test_a_sentence_of_the_table_is_recorded_as_a_claim_the_check_accepts(tmp_path):
    from shardlab.course import results as record
    from shardlab.course import sentences

    record.emit(str(tmp_path), "stage5a_protocol", "world_change", {"runs": {"1x2": {"max_weight_diff": 0.0}}})
    text = sentences.state(str(tmp_path), "stage5a_protocol", "world_change_<world>_exact", {"world": "1x2"}, d=0.0)
    assert text == "bit for bit"
    found = record.load(str(tmp_path), "stage5a_protocol")
    claim = found[claims.CLAIMS]["world_change_1x2_exact"]
    assert claim["keys"] == {"d": "world_change.runs.1x2.max_weight_diff"} and not check_claims(found)
    found["world_change"]["runs"]["1x2"]["max_weight_diff"] = 1e-7  # the recorded value no longer says "bit for bit"
    assert check_claims(found)
    with pytest.raises(UsageError, match="missing"):
        sentences.state(str(tmp_path), "stage5a_protocol", "skip_stop_near_bound", d=1.0)
    with pytest.raises(UsageError, match="no sentence"):
        sentences.state(str(tmp_path), "stage5a_protocol", "faster")


def test_every_sentence_of_the_table_names_a_value_for_each_name_its_relation_uses():
    import ast

    from shardlab.course import sentences

    for notebook, rows in sentences.SENTENCES.items():
        for name, row in rows.items():
            used = {n.id for n in ast.walk(ast.parse(row.relation, mode="eval")) if isinstance(n, ast.Name)}
            assert used - {"abs", "min", "max"} <= set(row.keys), (notebook, name)
            for text in (row.true, row.false):  # every value a sentence formats is one the claim records
                fields = set(re.findall(r"\{(\w+)(?::[^}]*)?\}", text))
                assert fields <= set(row.keys), (notebook, name, fields)
