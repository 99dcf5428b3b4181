"""Evidence a person opens anywhere: offline HTML pages with drawn maths, the index, the summary, stable files.

Offline-ness is checked here by two detectors written in this file (`remote_references` over every
URL-valued attribute, `external_references` over what a page would load), both on the standard
library's HTML parser; the browser test (browser_tests/) checks it in a real Chromium.
"""

import base64
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from shardlab.course import execute as runner
from shardlab.errors import PageError
from shardlab.evidence import headline, pages, stable
from shardlab.evidence.index import INDEX

pytestmark = pytest.mark.stage4

REMOTE = re.compile(r"^\s*([a-z][a-z0-9+.-]*:)?//", re.I)  # http://, https://, or protocol-relative //
CSS_URL = re.compile(r"url\(\s*['\"]?([^'\")]+)|@import\s+['\"]([^'\"]+)", re.I)
RUN_LEVEL = {"audit.json", "index.html", "wall_time.json", ".shardlab-manifest.json"}  # describe the whole run


class Links(HTMLParser):
    """Every URL-valued attribute of the page, every inline <style>/<script> text."""

    def __init__(self):
        super().__init__()
        self.urls, self.inline, self.tags, self._keep = [], [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "action", "poster", "srcset") and value:
                self.urls.append((tag, value))
        self._keep = tag in ("style", "script")

    def handle_data(self, data):
        if self._keep:
            self.inline.append(data)

    def handle_endtag(self, tag):
        self._keep = False


def remote_references(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".css":
        return [u for m in CSS_URL.finditer(text) for u in m.groups() if u and REMOTE.match(u)]
    parser = Links()
    parser.feed(text)
    found = [f"<{tag}> {url}" for tag, url in parser.urls if tag != "a" and REMOTE.match(url)]  # <a>: a click
    for block in parser.inline:
        found += [u for m in CSS_URL.finditer(block) for u in m.groups() if u and REMOTE.match(u)]
        found += re.findall(r"import\(\s*['\"](?:https?:)?//[^'\"]+", block)
    return found


RESOURCE_ATTRIBUTES = ("src", "href", "xlink:href", "srcset", "poster", "data")
CSS_REMOTE = re.compile(r"""(?:url\(\s*["']?|@import\s+["']|import\(\s*["'])\s*(?:[a-z][a-z0-9+.-]*:)?//""", re.I)


class _Resources(HTMLParser):
    """Collects what a page would fetch: URL attributes of every tag but <a>, and inline style/script text."""

    def __init__(self):
        super().__init__()
        self.found, self._inline = [], False

    def handle_starttag(self, tag, attrs):
        self._inline = tag in ("style", "script")
        if tag == "a":  # a link is followed only when clicked; it is not part of rendering the page
            return
        self.found += [f"<{tag} {n}={v}>" for n, v in attrs if n in RESOURCE_ATTRIBUTES and v and REMOTE.match(v)]
        self.found += [f"<{tag} style>" for n, v in attrs if n == "style" and v and CSS_REMOTE.search(v)]

    def handle_data(self, data):
        if self._inline and CSS_REMOTE.search(data):
            self.found.append(data[max(0, CSS_REMOTE.search(data).start() - 40) :][:120])


def external_references(text: str, css: bool = False) -> list[str]:
    """What a page (or, with css=True, a stylesheet) would load from another host; empty for an offline page.

    Hyperlinks (<a href>) to other sites are not loads and are not listed.
    """
    if css:
        return [text[max(0, m.start() - 40) : m.end() + 60] for m in CSS_REMOTE.finditer(text)]
    parser = _Resources()
    parser.feed(text)
    return parser.found


def test_no_receipt_references_an_external_url(run_dir):
    pages_seen = sorted(run_dir.glob("*.html")) + sorted(run_dir.glob("*.css"))
    assert {p.name for p in run_dir.glob("*.html")} >= {INDEX, "stage1_batches.html", "stage2_update.html"}
    for path in pages_seen:
        assert remote_references(path) == [], f"{path.name} asks the network for something"
        assert external_references(path.read_text(encoding="utf-8"), css=path.suffix == ".css") == [], path.name


def stylesheets(page: Path) -> list[Path]:
    """The files a page's <link href>s name, resolved from the page's folder (a remote href fails the test)."""
    parser = Links()
    parser.feed(page.read_text(encoding="utf-8"))
    hrefs = [url for tag, url in parser.urls if tag == "link"]
    assert all(not REMOTE.match(h) and not h.startswith("/") for h in hrefs), hrefs
    return [Path(os.path.normpath(page.parent / h)) for h in hrefs]


def test_every_page_links_a_stylesheet_inside_the_run_folder(run_dir):
    top = os.path.normpath(run_dir)
    for page in sorted(run_dir.rglob("*.html")):
        for sheet in stylesheets(page):
            assert sheet.is_file() and os.path.commonpath([top, sheet]) == top, (page, sheet)
    assert not list((run_dir / "fixtures").rglob("*.css"))  # the fixtures' pages link the top stylesheet


def test_pages_in_a_subfolder_link_the_one_stylesheet_above_them_and_open_from_a_copy(tmp_path):
    import shutil

    run = tmp_path / "run"
    nested = run / "fixtures" / "seed29_batch10"
    nested.mkdir(parents=True)
    for folder, text in ((run, "top page"), (nested, "fixture page")):
        nbformat.write(new_notebook(cells=[new_markdown_cell(text)]), folder / "page.ipynb")
        pages.export_html(folder / "page.ipynb", run)
    sheets = sorted(p.relative_to(run).as_posix() for p in run.rglob("*.css"))
    assert len(sheets) == 1 and "/" not in sheets[0]  # one stylesheet, at the top
    assert stylesheets(run / "page.html") == [run / sheets[0]]
    assert stylesheets(nested / "page.html") == [run / sheets[0]]  # ../../notebook-*.css
    assert "<style" not in (nested / "page.html").read_text() and "fixture page" in (nested / "page.html").read_text()
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(run, copy)
    shutil.rmtree(run)  # the copy must not lean on the original
    for page in (copy / "page.html", copy / "fixtures" / "seed29_batch10" / "page.html"):
        assert stylesheets(page) == [copy / sheets[0]] and (copy / sheets[0]).stat().st_size > 10_000


def test_a_stylesheet_folder_that_does_not_hold_the_page_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    nbformat.write(new_notebook(cells=[new_markdown_cell("x")]), tmp_path / "a" / "page.ipynb")
    with pytest.raises(PageError, match="does not hold"):
        pages.export_html(tmp_path / "a" / "page.ipynb", tmp_path / "b")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "page.ipynb"]


def test_stage2_maths_is_drawn_not_left_as_tex(run_dir):
    source = nbformat.read(run_dir / "stage2_update.ipynb", as_version=4)
    formulas = sum(
        len(re.findall(r"\$\$.+?\$\$", c.source, re.S)) + len(re.findall(r"(?<!\$)\$[^$\n]+\$(?!\$)", c.source))
        for c in source.cells
        if c.cell_type == "markdown"
    )
    html = (run_dir / "stage2_update.html").read_text(encoding="utf-8")
    parser = Links()
    parser.feed(html)
    images = [(a.get("alt", ""), a["src"]) for t, a in parser.tags if t == "img" and a.get("class") == "shardlab-math"]
    assert formulas >= 8 and len(images) == formulas
    assert "$$" not in html and "\\nabla L(w)" not in re.sub(r'alt="[^"]*"', "", html)
    assert any("\\nabla L(w)" in alt for alt, _ in images)  # the TeX stays readable as alt text
    prefix = "data:image/svg+xml;base64,"
    for _, src in images:
        assert src.startswith(prefix) and b"<svg" in base64.b64decode(src[len(prefix) :])


def test_index_links_every_page_and_shows_this_runs_numbers(run_dir):
    audit = json.loads((run_dir / "audit.json").read_text())
    parser = Links()
    parser.feed((run_dir / INDEX).read_text(encoding="utf-8"))
    targets = {url for _, url in parser.urls}
    for name in audit["run"]["notebooks"]:
        assert f"{name}.html" in targets and f"{name}.ipynb" in targets
    assert audit["trace"]["xplane"] in targets and audit["figure"]["svg"] in targets
    for url in targets:
        assert (run_dir / url).is_file(), f"index.html links {url}, which is not in the folder"
    text = (run_dir / INDEX).read_text(encoding="utf-8")
    assert "seed 17, batch size 7, implementation reference" in text
    assert f"<td>{audit['all_reduce']['count']}</td>" in text
    assert "xprof --logdir trace" in text and "ui.perfetto.dev" in text


def test_summary_follows_the_runs_parameters():
    # batch 10 on 4 devices: 10 rows pad to 12 slots, 3 per device -> [3, 3, 3, 1]; 23 = 10 + 10 + 3 -> [1, 1, 1, 0]
    audit = {
        "run": {"seed": 29, "batch_size": 10, "implementation": {"file": "mine.py", "sha256": "ab" * 32}},
        "device_counts": {"batch_of_7_rows": [2, 2, 2, 1], "batch_of_1_row": [1, 0, 0, 0], "walk": []},
    }
    walk = []
    for rows in (10, 10, 3, 10, 10, 3):
        per = -(-rows // 4)
        walk.append([max(0, min(per, rows - d * per)) for d in range(4)])
    audit["device_counts"]["walk"] = walk
    text = "\n".join(headline.lines(audit))
    assert "seed 29, batch size 10, implementation mine.py (sha256 abababababab)" in text
    assert "batch size 10: 10 rows -> [3, 3, 3, 1], 3 rows -> [1, 1, 1, 0]" in text


def test_a_formula_mathtext_cannot_draw_is_refused(tmp_path):
    nb = new_notebook(cells=[new_markdown_cell(r"ok $x^2$ and `$HOME` but $\begin{pmatrix} a \end{pmatrix}$")])
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(PageError, match="mathtext cannot draw"):
        pages.export_html(path)
    assert not (tmp_path / "bad.html").exists()


def test_external_loads_are_found_and_links_are_not():
    page = (
        '<script src="https://cdn.example/require.js"></script><link rel="stylesheet" href="//cdn.example/a.css">'
        '<style>@import "https://fonts.example/f.css"; b { background: url(http://x.example/i.png) }</style>'
        '<img src="evidence.svg"><a href="https://ui.perfetto.dev">Perfetto</a>'
        '<svg xmlns="http://www.w3.org/2000/svg"></svg>'
    )
    found = external_references(page)
    assert len(found) == 3 and not any("perfetto" in f or "w3.org" in f or "evidence.svg" in f for f in found)
    assert len(external_references("a{src:url('https://x.example/f.woff')} b{c:url(data:x)}", css=True)) == 1


def test_code_keeps_its_dollars():
    out = pages.render_math("cost `$HOME` and ```\n$x$\n``` but $x$")
    assert "`$HOME`" in out and "```\n$x$\n```" in out and out.count("shardlab-math") == 1


def test_a_page_shows_the_parameters_once_with_the_values_the_run_used():
    defaults = new_code_cell(
        'seed = 17  # PRNG seed\nout_dir = "lab_run"  # results go here\nepochs = 2', metadata={"tags": ["parameters"]}
    )
    injected = new_code_cell(
        '# Parameters\nseed = 29\nout_dir = "."\nextra = [1, 2]\n', metadata={"tags": ["injected-parameters"]}
    )
    nb = new_notebook(cells=[new_markdown_cell("# A"), defaults, injected, new_code_cell("print(seed)")])
    body, _, _ = pages.notebook_html(nb)
    assert [c.source for c in nb.cells[1:3]] == [defaults.source, injected.source]  # the notebook keeps both
    shown = re.sub(r"<[^>]+>", "", body).replace("&quot;", '"').replace("&#34;", '"')
    assert shown.count("seed = ") == 1 and "seed = 29  # PRNG seed" in shown and "seed = 17" not in shown
    assert 'out_dir = "."  # results go here' in shown and "lab_run" not in shown and "epochs = 2" in shown
    assert "extra = [1, 2]  # given to this run" in shown and "# Parameters" not in shown
    alone = new_notebook(cells=[new_code_cell("seed = 17", metadata={"tags": ["parameters"]})])
    pages.merge_parameters(alone)  # a notebook papermill did not run keeps its one cell as it is
    assert [c.source for c in alone.cells] == ["seed = 17"]


def test_a_source_folded_in_jupyter_is_folded_on_the_page_and_its_output_stays_open():
    folded = new_code_cell("answer = 6 * 7", metadata={"jupyter": {"source_hidden": True}})
    folded.outputs = [new_output("stream", name="stdout", text="the folded cell's output\n")]
    nb = new_notebook(cells=[new_code_cell("shown_here = 1"), folded])
    body, _, _ = pages.notebook_html(nb)
    details = re.findall(r'<details class="shardlab-folded">.*?</details>', body, flags=re.S)
    assert len(details) == 1 and "answer" in details[0] and "shown_here" not in details[0]
    assert "shown_here" in body and "the folded cell&#x27;s output" not in details[0]
    assert "the folded cell" in re.sub(r"<details.*?</details>", "", body, flags=re.S)


def test_an_output_folded_in_jupyter_is_folded_on_the_page():
    folded = new_code_cell("print(verdict)", metadata={"jupyter": {"outputs_hidden": True}})
    folded.outputs = [new_output("stream", name="stdout", text="opened on purpose\n")]
    shown = new_code_cell("print(table)")
    shown.outputs = [new_output("stream", name="stdout", text="always in view\n")]
    body, _, _ = pages.notebook_html(new_notebook(cells=[shown, folded]))
    details = re.findall(r'<details class="shardlab-folded-output">.*?</details>', body, flags=re.S)
    assert len(details) == 1 and "opened on purpose" in details[0] and "always in view" not in details[0]
    assert "print" in re.sub(r"<details.*?</details>", "", body, flags=re.S)  # the source stays in view


def test_stable_notebook_fixes_ids_drops_clocks_and_joins_streams(tmp_path):
    cell = new_code_cell("print(1); print(2)")
    cell.metadata = {"tags": ["injected-parameters"], "execution": {"iopub.status.busy": "2026"}}
    cell.metadata["papermill"] = {"start_time": "a", "end_time": "b", "duration": 1.0, "status": "completed"}
    cell.outputs = [new_output("stream", name="stdout", text="1\n"), new_output("stream", name="stdout", text="2\n")]
    cell.outputs.append(new_output("stream", name="stderr", text="w\n"))
    path = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=[cell]), path)
    stable.notebook(path)
    (got,) = nbformat.read(path, as_version=4).cells
    assert got.id == "injected-parameters" and "execution" not in got.metadata
    assert got.metadata.papermill == {"status": "completed"}
    assert [(o.name, o.text) for o in got.outputs] == [("stdout", "1\n2\n"), ("stderr", "w\n")]


def test_an_executed_notebook_keeps_one_parameters_cell_with_the_values_it_ran_with(tmp_path):
    defaults = new_code_cell(
        'seed = 17  # PRNG seed\nout_dir = "lab_run"  # results go here', metadata={"tags": ["parameters"]}
    )
    injected = new_code_cell('# Parameters\nseed = 29\nout_dir = "."\n', metadata={"tags": ["injected-parameters"]})
    path = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=[defaults, injected, new_code_cell("print(seed)")]), path)
    stable.notebook(path)
    cells = nbformat.read(path, as_version=4).cells
    tagged = [c for c in cells if {"parameters", "injected-parameters"} & set(c.metadata.get("tags", []))]
    assert len(cells) == 2 and len(tagged) == 1 and tagged[0].metadata.tags == ["parameters"]
    assert "seed = 29  # PRNG seed" in tagged[0].source and 'out_dir = "."  # results go here' in tagged[0].source
    assert "17" not in tagged[0].source and "lab_run" not in tagged[0].source


def normalised(path: Path) -> bytes:
    """The file's bytes, with what legitimately differs between two runs masked."""
    data = path.read_bytes()
    if path.name == "_CHECKPOINT_METADATA":  # Orbax's init and commit timestamps
        found = json.loads(data)
        return json.dumps({k: v for k, v in found.items() if not k.endswith("_timestamp_nsecs")}).encode()
    if path.name == "commit_success.txt":  # Orbax names the staging folder it committed from (pid + random)
        return re.sub(rb"\.tmp-\d+-[^/]+\.orbax", b".tmp-PID.orbax", data)
    if path.name == ".shardlab-manifest.json":  # lists every file's hash; the files are compared one by one
        found = json.loads(data)
        for section in found["commands"].values():
            section["files"] = sorted(section["files"])
        return json.dumps(found, sort_keys=True).encode()
    if path.suffix in (".ipynb", ".html", ".json"):
        text = data.decode("utf-8")
        # stage 3 shows which process saved and which restored: a fresh kernel has a new pid and start time
        text = re.sub(r"(pid\W{0,3}:\s*)\d+", r"\g<1>0", text)
        text = re.sub(r"(started\W{0,3}:\s*)[0-9.e+]+", r"\g<1>0", text)
        if path.suffix == ".ipynb":  # the notebook-level papermill clock: this run's timing
            nb = json.loads(text)
            for key in ("start_time", "end_time", "duration"):
                nb["metadata"]["papermill"].pop(key, None)
            text = json.dumps(nb, sort_keys=True)
        return text.encode()
    return data


@pytest.mark.notebooks
@pytest.mark.long  # two runs of two notebooks in fresh kernels: make test-long's
def test_a_second_run_changes_nothing_but_clocks_and_process_ids(tmp_path):
    names = ["stage1_batches", "stage3a_checkpoint"]  # a cheap subset: stage 3 holds the Orbax and NPZ files
    # the first as `make run` runs them, its kernels sharing a compilation cache; the second without that cache
    first = runner.run(tmp_path / "first", seed=17, batch_size=7, notebooks=names)
    again = runner.run(tmp_path / "again", seed=17, batch_size=7, notebooks=names, compilation_cache=False)

    def owned(run):
        return {f for p in run.rglob("*") if p.is_file() and (f := p.relative_to(run).as_posix()) not in RUN_LEVEL}

    assert owned(again) == owned(first) and any(f.startswith("stage3/orbax/") for f in owned(again))
    for name in sorted(owned(again)):  # the cache changes no file, nor does running again
        assert normalised(again / name) == normalised(first / name), f"{name} differs between two runs"
    umask = os.umask(0)
    os.umask(umask)
    for path in [again, *again.rglob("*")]:
        want = (0o777 if path.is_dir() else 0o666) & ~umask
        assert path.stat().st_mode & 0o777 == want, f"{path.relative_to(again)} has mode {path.stat().st_mode:o}"


@pytest.mark.notebooks
def test_the_runner_prints_progress_and_no_kernel_transport_warning(tmp_path, monkeypatch, capfd):
    source = tmp_path / "src"
    source.mkdir()
    params = new_code_cell("seed = 17  # x\nbatch_size = 7  # x\nout_dir = '.'  # x\nimplementation = 'reference'  # x")
    params.metadata["tags"] = ["parameters"]
    nb = new_notebook(cells=[params, new_code_cell("print(seed * batch_size)")])
    nb.metadata["kernelspec"] = {"name": "shardlab", "display_name": "Python (shardlab)", "language": "python"}
    nbformat.write(nb, source / "tiny.ipynb")
    monkeypatch.setattr(runner.catalog, "NOTEBOOK_DIR", source)
    monkeypatch.setattr(runner.catalog, "NOTEBOOKS", ["tiny"])
    runner.run(tmp_path / "out", seed=3, batch_size=5, notebooks=["tiny"], html=False)
    out, err = capfd.readouterr()
    assert "run: seed 3, batch size 5, implementation reference" in out
    assert re.search(r"1/1 tiny\.ipynb done in \d+\.\d s", out)
    assert "without encryption" not in out + err  # the kernel talks over IPC, not TCP


def test_the_evidence_figure_draws_no_empty_panel_when_stage3_did_not_run(tmp_path):
    from shardlab.evidence import figure

    timing = {v: {"samples_ms": [1.0, 2.0, 3.0]} for v in ("eager_4dev", "compiled_4dev", "compiled_1dev")}
    transitions = [{"transition": 1, "prepare_and_place_ms": 1.5, "compiled_update_and_wait_ms": 0.5}]
    alone, drawn = figure.figure(tmp_path, None, timing, transitions)
    assert drawn["panels"] == ["timing samples", "traced durations"] and len(alone.axes) == 2
    faults = [{"fixture": "seed17_batch7", "fault": f, "max_weight_error": 0.1} for f in figure.FAULTS]
    full, drawn = figure.figure(tmp_path, faults, timing, transitions)
    assert drawn["panels"][0] == "fault errors" and len(full.axes) == 3
    assert all(ax.has_data() for ax in full.axes + alone.axes)


@pytest.mark.parametrize(
    ("prepare", "update", "words"),
    [
        ((1.5, 1.594, 2.867), (0.579, 1.758, 3.725), "the middle halves overlap"),  # one executed run's halves
        ((1.8, 1.9, 2.0), (0.7, 0.8, 0.9), "prepare_and_place longer by 2.37x, beyond both middle halves"),
    ],
)
def test_the_evidence_page_names_a_longer_annotation_only_beyond_the_middle_halves(prepare, update, words):
    d = {"dominant": "prepare_and_place" if prepare[1] >= update[1] else "compiled_update_and_wait"}
    d["factor"] = max(prepare[1], update[1]) / min(prepare[1], update[1])
    for name, (q1, median, q3) in (("prepare_and_place", prepare), ("compiled_update_and_wait", update)):
        d.update({f"q1_{name}_ms": q1, f"median_{name}_ms": median, f"q3_{name}_ms": q3})
    (row,) = [
        r for r in headline.facts({"trace": {"dominant": d, "transitions": [{}] * 4}}) if r[0].startswith("trace")
    ]
    assert words in row[1], row
    assert ("dominates" in row[1]) is False, row
