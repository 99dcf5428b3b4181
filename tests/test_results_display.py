"""What a cell's stored result shows: the rounded line, or with shown=False nothing (the value rides in metadata)."""

import json

import IPython.display

from shardlab.course import results


def test_a_hidden_result_is_stored_and_carried_but_not_shown(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(results, "_in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", lambda data, raw, metadata: seen.append((data, metadata)))
    value = {"resumed_from": 3, "steps_lost": 37}
    results.emit(str(tmp_path), "nb", "shown_one", value)
    results.emit(str(tmp_path), "nb", "hidden_one", value, shown=False)
    stored = json.loads((tmp_path / "results" / "nb.json").read_text())
    assert stored == {"shown_one": value, "hidden_one": value}
    (line, meta_a), (hidden, meta_b) = [(d["text/plain"], m) for d, m in seen]
    assert meta_a == {"shardlab": "shown_one", "value": value} and meta_b == {"shardlab": "hidden_one", "value": value}
    assert "37" in line and hidden == ""
