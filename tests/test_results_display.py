"""What a cell's stored result shows: the rounded line, or with shown=False nothing (the value rides in metadata)."""

import html
import json
import re

import IPython.display
import nbformat
import pytest
from course_records import from_notebook

from shardlab.course import results, show
from shardlab.errors import UsageError
from shardlab.evidence import pages


def test_a_hidden_result_is_stored_and_carried_but_not_shown(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(results, "_in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", lambda data, raw, metadata: seen.append((data, metadata)))
    value = {"resumed_from": 3, "steps_lost": 37}
    results.emit(str(tmp_path), "nb", "shown_one", value)
    results.emit(str(tmp_path), "nb", "hidden_one", value, shown=False)
    stored = json.loads((tmp_path / "results" / "nb.json").read_text())
    assert stored == {"shown_one": value, "hidden_one": value}
    (line, meta_a), (hidden, meta_b) = seen
    assert meta_a == {"shardlab": "shown_one", "value": value} and "37" in line["text/plain"]
    assert {k: meta_b[k] for k in ("shardlab", "value")} == {"shardlab": "hidden_one", "value": value}
    assert not [m for m in hidden if m.startswith(("text/", "image/"))], hidden  # nothing a front end draws


def _notebook(outputs):
    cell = nbformat.v4.new_code_cell("record()", execution_count=1, outputs=outputs)
    cell.metadata["tags"] = ["record"]
    return nbformat.v4.new_notebook(cells=[cell])


def _hidden(name):
    data = {results.HIDDEN_MIME: {"name": name}}
    meta = {"shardlab": name, "value": 1, "tags": [results.HIDDEN_TAG]}
    return nbformat.v4.new_output("display_data", data=data, metadata=meta)


def test_a_cell_of_hidden_records_has_no_output_area_on_its_page_and_keeps_its_records():
    nb = _notebook([_hidden("a"), _hidden("b")])
    body, _, _ = pages.notebook_html(nb)
    (cell,) = re.findall(r'<div [^>]*class="(jp-Cell jp-CodeCell[^"]*)"', body)
    assert "jp-mod-noOutputs" in cell and "celltag_record" in cell
    assert not re.search(r'class="[^"]*jp-OutputArea-child', body)
    assert from_notebook(nb) == {"a": 1, "b": 1}  # the executed notebook still holds them
    shown = nbformat.v4.new_output("stream", text="visible line\n")
    body, _, _ = pages.notebook_html(_notebook([_hidden("a"), shown]))
    assert len(re.findall(r'class="[^"]*jp-OutputArea-child', body)) == 1 and "visible line" in body


def test_table_cells_keep_their_whole_text():
    words = "agreement on step 3 (waiting for process 0) did not complete within the 10 s bound; | they never"
    text = show.table([{"process": 0, "its error": words}])
    assert words.replace("|", "\\|") in text and "..." not in text


def test_a_column_named_with_a_bar_keeps_the_table_a_table():
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    page = markdown2html_mistune(show.table([{"step": 6, "max |Δw|": 0.0, "equal": True}]))
    assert re.findall(r"<th>(.*?)</th>", page) == ["step", "max |Δw|", "equal"]
    assert re.findall(r"<td>(.*?)</td>", page) == ["6", "0.0", "True"]


def test_a_type_in_angle_brackets_reads_as_written_on_the_page():
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    page = markdown2html_mistune(show.table([{"type": "tensor<f32>", "dtype": "<U64", "pair": "a & b", "op": "`x<y`"}]))
    cells = re.findall(r"<td>(.*?)</td>", page)
    assert [html.unescape(c) for c in cells] == ["tensor<f32>", "<U64", "a & b", "<code>x<y</code>"], page


def test_a_folded_table_shows_the_chosen_rows_and_folds_each_other_row_once():
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    rows = [{"case": f"case {n}", "error": "E"} for n in range(5)]
    page = markdown2html_mistune(show.folded([rows[0], rows[3]], rows))
    in_view, fold = page.split("<details>")
    assert re.findall(r"<td>(case \d)</td>", in_view) == ["case 0", "case 3"]
    assert re.findall(r"<td>(case \d)</td>", fold) == ["case 1", "case 2", "case 4"]  # the table's order, none twice
    assert "<summary>the other 3 rows (of 5)</summary>" in fold and fold.rstrip().endswith("</details>")
    assert "<details>" not in show.folded(rows, rows)  # every row in view: nothing to fold
    one = markdown2html_mistune(show.folded(rows[:4], rows))
    assert "<summary>the other 1 row (of 5)</summary>" in one and one.count("<td>case 4</td>") == 1
    with pytest.raises(UsageError, match="not rows of the table"):
        show.folded([{"case": "case 9", "error": "E"}], rows)


def test_progress_lines_show_while_running_and_leave_only_the_hidden_form(monkeypatch):
    shown = []

    class Handle:
        def update(self, data, raw, metadata=None):
            shown.append((data, metadata))

    def display(data, raw, metadata, display_id):
        shown.append((data, metadata))
        return Handle()

    monkeypatch.setattr(results, "_in_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", display)
    with results.progress() as running:
        running("round 2/11 done")
    assert shown[1][0] == {"text/plain": "round 2/11 done"}  # seen while the cell runs
    last, meta = shown[-1]  # what the executed notebook keeps: no text, tagged to leave the page
    assert list(last) == [results.HIDDEN_MIME] and meta == {"tags": [results.HIDDEN_TAG]}
    assert from_notebook(_notebook([nbformat.v4.new_output("display_data", data=last, metadata=meta)])) == {}


def test_the_runner_moves_hidden_records_into_cell_metadata_and_drops_finished_progress(tmp_path):
    from shardlab.evidence import stable

    finished = nbformat.v4.new_output(
        "display_data", data={results.HIDDEN_MIME: {"name": "progress"}}, metadata={"tags": [results.HIDDEN_TAG]}
    )
    line = nbformat.v4.new_output("stream", text="observed: a\n")
    later = nbformat.v4.new_output("stream", text="observed: b\n")
    again = _hidden("a")
    again.metadata["value"] = 2  # a later record of the same name wins, as it does in the outputs
    nb = _notebook([finished, line, _hidden("a"), later, again, _hidden("b")])
    before = from_notebook(nb)
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    stable.notebook(path)
    (cell,) = nbformat.read(path, as_version=4).cells
    assert [o.get("text") for o in cell.outputs] == ["observed: a\nobserved: b\n"]  # the two lines, joined
    assert from_notebook(nbformat.read(path, as_version=4)) == before == {"a": 2, "b": 1}


def test_an_excerpt_keeps_the_named_lines_in_order_and_marks_each_gap():
    source = "def f(x):\n    a = 1\n    b = 2\n    if x:\n        c = 3\n    return a\n"
    kept = show.excerpt(source, ["def f", "b = 2", "return"])
    assert kept == "def f(x):\n    # ... 1 line\n    b = 2\n    # ... 2 lines\n    return a"
    assert show.excerpt(source, ["a = 1", "b = 2"]) == "a = 1\nb = 2"  # no gap, no mark; the common indent gone
    assert show.excerpt(source, ["c = 3", "def f"]) == "def f(x):\n        # ... 3 lines\n        c = 3"  # in order
    with pytest.raises(UsageError, match="no line with 'd = 4'"):
        show.excerpt(source, ["a = 1", "d = 4"])
