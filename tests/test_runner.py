"""The runner treats errors and timeouts as failures and never touches an earlier run."""

import hashlib
import json
import os

import nbformat
import pytest
from course_records import read_reached_folder
from nbformat.v4 import new_code_cell, new_notebook

from shardlab import outdir
from shardlab.course import catalog
from shardlab.course import execute as runner
from shardlab.errors import ConfigError

pytestmark = pytest.mark.notebooks  # tiny notebooks, each in a fresh kernel


def write_notebook(folder, name, code):
    params = new_code_cell("seed = 17  # x\nbatch_size = 7  # x\nout_dir = '.'  # x\nimplementation = 'reference'  # x")
    params.metadata["tags"] = ["parameters"]
    nb = new_notebook(cells=[params, new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "shardlab", "display_name": "Python (shardlab)", "language": "python"}
    nbformat.write(nb, folder / f"{name}.ipynb")


def tree_digest(folder, leave_out=()):
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.relative_to(folder).parts[0] not in leave_out):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def sources(tmp_path, monkeypatch):
    folder = tmp_path / "src"
    folder.mkdir()
    write_notebook(folder, "ok", "open('ok.txt', 'w').write(str(seed * batch_size))")
    write_notebook(folder, "raises", "raise ValueError('deliberate failure')")
    write_notebook(folder, "sleeps", "import time\ntime.sleep(30)")
    monkeypatch.setattr(catalog, "NOTEBOOK_DIR", folder)
    monkeypatch.setattr(catalog, "NOTEBOOKS", ["ok", "raises", "sleeps", "ok2"])
    return folder


def test_a_successful_run_passes_parameters_and_publishes(sources, tmp_path):
    out = runner.run(tmp_path / "out", seed=3, batch_size=5, notebooks=["ok"], html=False)
    assert (out / "ok.txt").read_text() == "15"
    assert (out / outdir.MANIFEST).exists() and (out / "ok.ipynb").exists()


def test_a_failing_cell_names_notebook_and_cell_and_keeps_the_previous_run(sources, tmp_path):
    out = runner.run(tmp_path / "out", seed=1, batch_size=2, notebooks=["ok"], html=False)
    before, section = tree_digest(out, leave_out=(outdir.MANIFEST,)), outdir.read_manifest(out)["run"]
    failure = r"raises\.ipynb failed at cell \[(\d+)\] .*deliberate failure"
    with pytest.raises(runner.NotebookFailed, match=failure) as info:
        runner.run(out, seed=1, batch_size=2, notebooks=["ok", "raises"], replace=True, html=False)
    assert tree_digest(out, leave_out=("failed", outdir.MANIFEST)) == before  # the earlier receipts are untouched
    assert outdir.read_manifest(out)["run"] == section  # and so is the record of what the run wrote
    assert [p.name for p in out.iterdir() if "staging" in p.name] == []
    kept = out / "failed" / "raises.ipynb"  # the partly executed notebook, where the learner can open it
    assert str(kept) in str(info.value)
    cells = nbformat.read(kept, as_version=4).cells
    errors = [c for c in cells if any(o.output_type == "error" for o in c.get("outputs", []))]
    assert len(errors) == 1 and f"cell [{errors[0].execution_count}]" in str(info.value)
    assert "make check" not in str(info.value)  # the reference ran: nothing of the learner's to check


def test_a_failing_learner_run_suggests_make_check(sources, tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text("# a learner's file\n")
    with pytest.raises(runner.NotebookFailed, match=rf"gap in the course.*make check IMPL={mine} STAGE=all"):
        runner.run(tmp_path / "out", seed=1, batch_size=2, implementation=str(mine), notebooks=["raises"], html=False)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(["failed", outdir.MANIFEST])


@pytest.mark.parametrize(
    "spec, expected",
    [("README.md", "is not a Python file; expected 'reference' or a .py file"), (".", "is a folder; expected")],
)
def test_an_implementation_that_is_not_a_py_file_is_named(sources, tmp_path, spec, expected):
    target = tmp_path / spec
    if spec == "README.md":
        target.write_text("# notes\n")
    with pytest.raises(ConfigError, match=expected):
        runner.run(tmp_path / "out", seed=1, batch_size=2, implementation=str(target), notebooks=["ok"], html=False)
    assert not (tmp_path / "out").exists()


def test_a_cell_timeout_is_a_failure(sources, tmp_path):
    with pytest.raises(runner.NotebookFailed, match="CellTimeoutError"):
        runner.run(tmp_path / "out", seed=1, batch_size=2, notebooks=["sleeps"], timeout=3, html=False)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(["failed", outdir.MANIFEST])


def test_existing_output_folders_are_refused_unless_ours_and_replace(sources, tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="no shardlab command wrote there.*notes.txt.*move them away"):
        runner.run(foreign, seed=1, batch_size=2, notebooks=["ok"], replace=True, html=False)
    assert (foreign / "notes.txt").read_text() == "mine"
    out = runner.run(tmp_path / "out", seed=1, batch_size=2, notebooks=["ok"], html=False)
    with pytest.raises(ConfigError, match="--replace"):
        runner.run(out, seed=1, batch_size=2, notebooks=["ok"], html=False)
    with pytest.raises(ConfigError, match="batch_size"):
        runner.run(tmp_path / "new", seed=1, batch_size=0, notebooks=["ok"], html=False)


def test_unknown_notebooks_and_symlinked_outputs_are_refused(sources, tmp_path):
    with pytest.raises(ConfigError, match="no notebook named"):
        runner.run(tmp_path / "out", seed=1, batch_size=2, notebooks=["nope"], html=False)
    real = runner.run(tmp_path / "real", seed=1, batch_size=2, notebooks=["ok"], html=False)
    before = tree_digest(real)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="not a folder"):
        runner.run(link, seed=1, batch_size=2, notebooks=["ok"], replace=True, html=False)
    assert tree_digest(real) == before and link.is_symlink()


def test_html_copies_share_one_stylesheet(sources, tmp_path):
    write_notebook(sources, "ok2", "print('second page')")
    out = runner.run(tmp_path / "out", seed=1, batch_size=2, notebooks=["ok", "ok2"])
    sheets = list(out.glob("notebook-*.css"))
    assert len(sheets) == 1 and sheets[0].stat().st_size > 10_000
    for page in ("ok.html", "ok2.html"):
        text = (out / page).read_text()
        assert "<style" not in text and f'href="{sheets[0].name}"' in text
    assert "second page" in (out / "ok2.html").read_text()


@pytest.mark.long  # a run with both kernel lanes, HTML pages included: make test-long's
def test_the_other_fixtures_pages_link_the_stylesheet_at_the_top_of_the_run(sources, tmp_path, monkeypatch):
    for name in catalog.FRESH_KERNEL_PAIR:
        write_notebook(sources, name, f"print('{name}', seed, batch_size)")
    monkeypatch.setattr(catalog, "NOTEBOOKS", [*catalog.FRESH_KERNEL_PAIR])
    out = runner.run(tmp_path / "out", seed=17, batch_size=7, notebooks=list(catalog.FRESH_KERNEL_PAIR))
    (sheet,) = out.glob("notebook-*.css")
    for fixture in runner._other_fixtures(17, 7, list(catalog.FRESH_KERNEL_PAIR)):
        folder = out / catalog.FIXTURE_DIR / fixture
        assert not list(folder.glob("*.css"))
        for name in catalog.FRESH_KERNEL_PAIR:
            assert f'href="../../{sheet.name}"' in (folder / f"{name}.html").read_text()
    assert sorted(outdir.read_manifest(out)["run"]["files"]).count(sheet.name) == 1


def test_the_other_course_fixtures_rerun_the_resume_pair():
    from shardlab.core.config import FIXTURES

    everything = runner.catalog.NOTEBOOKS
    for seed, batch_size in [*FIXTURES.values(), (5, 3)]:
        others = runner._other_fixtures(seed, batch_size, everything)
        assert set(others.values()) == set(FIXTURES.values()) - {(seed, batch_size)}
    assert runner._other_fixtures(5, 3, ["stage3a_checkpoint"]) == {}  # no resume in this run: nothing to repeat


# A tiny notebook that compiles one program and records what JAX's cache did: the cache folder it was
# given, whether that compile was a cache hit (jax.monitoring's event), and the program's output bytes.
COMPILES = """
import json, os
import jax, jax.numpy as jnp
hits = []
jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name) if "cache_hits" in name else None)
value = jax.jit(lambda x: jnp.sin(x) * 3 + jnp.cumsum(x))(jnp.arange(64.0, dtype=jnp.float32))
folder = os.environ.get("JAX_COMPILATION_CACHE_DIR")
exists = bool(folder) and os.path.isdir(folder)
record = {"folder": folder, "hits": len(hits), "bytes": value.tobytes().hex(), "exists": exists}
open(NAME + ".json", "w").write(json.dumps(record))
"""


@pytest.mark.long  # four kernels that import JAX and compile: make test-long's
def test_the_kernels_of_one_run_share_a_compilation_cache_that_no_receipt_keeps(sources, tmp_path, monkeypatch):
    names = ["first", "second", runner.MEASURES_COMPILATION[0]]
    for name in names:
        write_notebook(sources, name, f"NAME = {name!r}\n" + COMPILES)
    monkeypatch.setattr(catalog, "NOTEBOOKS", names)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "the-shells-cache"))  # never inherited
    out = runner.run(tmp_path / "out", seed=1, batch_size=2, notebooks=names, html=False)
    first, second, measuring = (json.loads((out / f"{name}.json").read_text()) for name in names)
    assert first["exists"] and first["folder"] == second["folder"] and first["hits"] == 0
    assert second["hits"] >= 1, second  # the second kernel loaded what the first compiled
    assert runner.COMPILATION_CACHE in first["folder"] and "the-shells-cache" not in first["folder"]
    assert measuring["folder"] is None and measuring["hits"] == 0  # compile times there are compile times
    assert first["bytes"] == second["bytes"] == measuring["bytes"]  # a loaded program computes the same bytes
    assert not any(runner.COMPILATION_CACHE in str(p) for p in out.rglob("*"))
    assert not any(runner.COMPILATION_CACHE in f for f in outdir.read_manifest(out)["run"]["files"])
    assert not (tmp_path / "the-shells-cache").exists()
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "the-shells-cache")  # the caller's, restored
    off = runner.run(tmp_path / "off", seed=1, batch_size=2, notebooks=names[:1], html=False, compilation_cache=False)
    assert json.loads((off / "first.json").read_text())["folder"] is None


@pytest.mark.long  # two runs whose kernels import JAX and compile: make test-long's
def test_runs_given_one_cache_folder_share_it_and_it_outlives_them(sources, tmp_path, monkeypatch):
    """A folder given as compilation_cache: a later run loads what an earlier one compiled; no receipt holds it."""
    write_notebook(sources, "first", "NAME = 'first'\n" + COMPILES)
    monkeypatch.setattr(catalog, "NOTEBOOKS", ["first"])
    shared = tmp_path / "shared-cache"
    runs = [runner.run(tmp_path / "a", seed=1, batch_size=2, notebooks=["first"], html=False, compilation_cache=shared)]
    runs.append(
        runner.run(tmp_path / "b", seed=1, batch_size=2, notebooks=["first"], html=False, compilation_cache=shared)
    )
    earlier, later = (json.loads((out / "first.json").read_text()) for out in runs)
    assert earlier["folder"] == later["folder"] and earlier["folder"].startswith(str(shared))
    assert earlier["hits"] == 0 and later["hits"] >= 1 and earlier["bytes"] == later["bytes"]
    assert any(shared.rglob("*")) and not any(str(shared) in str(p) for out in runs for p in out.rglob("*"))


def test_each_notebook_of_a_run_records_the_functions_it_looked_up(sources, tmp_path, monkeypatch):
    """reached/<name>.txt holds the API names a notebook's cells looked up on the implementation, and no other."""
    calls = {"uses_two": "impl.initial, impl.save, impl.initial", "uses_none": "impl.__name__"}
    for name, body in calls.items():
        write_notebook(
            sources, name, f"from shardlab.learner import implementation as i\nimpl = i.load(implementation)\n{body}"
        )
    monkeypatch.setattr(catalog, "NOTEBOOKS", list(calls))
    runner.run(tmp_path / "out", seed=1, batch_size=2, notebooks=list(calls), html=False, reached=tmp_path / "reached")
    assert read_reached_folder(tmp_path / "reached") == {"uses_two": {"initial", "save"}}
    assert sorted((tmp_path / "reached" / "uses_two.txt").read_text().split()) == ["initial", "save"]  # each once


# A notebook that notes, in a file beside it and in `log`, when it started and ended (time.time(), one host's clock).
SPAN = """
import json, time
start = time.time()
open({log!r}, 'a').write({name!r} + ' started\\n')
{body}
open({name!r} + '.span', 'w').write(json.dumps([start, time.time()]))
"""


@pytest.mark.long  # a run with both kernel lanes: make test-long's
def test_the_other_fixtures_run_beside_the_untimed_notebooks_and_end_before_a_timed_one(sources, tmp_path, monkeypatch):
    log = str(tmp_path / "log")
    untimed, timed = catalog.BESIDE_FIXTURES[0], "stage4a_profile"
    assert timed not in catalog.BESIDE_FIXTURES
    names = [untimed, *catalog.FRESH_KERNEL_PAIR, timed]
    for name in names:
        write_notebook(sources, name, SPAN.format(log=log, name=name, body="time.sleep(1)"))
    monkeypatch.setattr(catalog, "NOTEBOOKS", names)
    out = runner.run(tmp_path / "out", seed=17, batch_size=7, notebooks=names, html=False)
    span = {name: json.loads((out / f"{name}.span").read_text()) for name in names}
    fixtures = runner._other_fixtures(17, 7, names)
    assert fixtures
    recorded = json.loads((out / runner.WALL_TIME).read_text())["notebook_s"]
    for fixture in fixtures:
        for name in catalog.FRESH_KERNEL_PAIR:
            start, end = json.loads((out / catalog.FIXTURE_DIR / fixture / f"{name}.span").read_text())
            assert end <= span[timed][0], (fixture, name)  # nothing else runs while a notebook times
            assert f"{fixture}/{name}" in recorded
    assert set(names) <= set(recorded)


@pytest.mark.long  # two kernel lanes: make test-long's
def test_the_second_lane_runs_its_course_notebooks_beside_the_first_lane_and_before_a_timed_one(
    sources, tmp_path, monkeypatch
):
    """A notebook of catalog.SECOND_LANE runs while the course's first notebook runs: that one waits (bounded)
    until the other has started, which it could not if the two ran one after the other."""
    log = str(tmp_path / "log")
    (beside,) = catalog.SECOND_LANE
    first = next(name for name in catalog.BESIDE_FIXTURES if name not in (beside, *catalog.FRESH_KERNEL_PAIR))
    timed = "stage4a_profile"
    names = [first, beside, *catalog.FRESH_KERNEL_PAIR, timed]
    waits = "deadline = time.time() + 120\nwhile not os.path.exists('beside.started') and time.time() < deadline:\n"
    waits += "    time.sleep(0.05)\nassert os.path.exists('beside.started'), 'the second lane never started'"
    bodies = {first: "import os\n" + waits, beside: "open('beside.started', 'w').close()"}
    for name in names:
        write_notebook(sources, name, SPAN.format(log=log, name=name, body=bodies.get(name, "")))
    monkeypatch.setattr(catalog, "NOTEBOOKS", names)
    out = runner.run(tmp_path / "out", seed=17, batch_size=7, notebooks=names)
    span = {name: json.loads((out / f"{name}.span").read_text()) for name in names}
    assert span[beside][0] < span[first][1]  # it started while the first lane's notebook was still running
    assert span[beside][1] <= span[timed][0]  # and ended before a notebook that times anything began
    assert (out / f"{beside}.html").is_file()  # its page, exported like every course notebook's
    assert beside in json.loads((out / runner.WALL_TIME).read_text())["notebook_s"]


@pytest.mark.long  # two runs with both kernel lanes: make test-long's
def test_a_failure_in_either_lane_fails_the_run_and_the_fixtures_start_nothing_after_it(sources, tmp_path, monkeypatch):
    log = tmp_path / "log"
    first, second = catalog.FRESH_KERNEL_PAIR
    untimed = catalog.BESIDE_FIXTURES[0]
    names = [untimed, first, second]
    monkeypatch.setattr(catalog, "NOTEBOOKS", names)
    fails_at_once = SPAN.format(log=str(log), name=untimed, body="raise ValueError('deliberate failure')")
    write_notebook(sources, untimed, fails_at_once)
    write_notebook(sources, first, SPAN.format(log=str(log), name=first, body="time.sleep(4 if seed != 17 else 0)"))
    write_notebook(sources, second, SPAN.format(log=str(log), name=second, body=""))
    with pytest.raises(runner.NotebookFailed, match=rf"{untimed}\.ipynb failed"):
        runner.run(tmp_path / "out", seed=17, batch_size=7, notebooks=names, html=False)
    started = log.read_text().splitlines()
    # the course's lane failed in its first notebook; the fixtures' lane finished the notebook it was running
    # (the other fixture's first, sleeping 4 s) and started no other
    assert started.count(f"{second} started") == 0 and started.count(f"{first} started") == 1, started
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.ipynb"))

    log.unlink()
    write_notebook(sources, untimed, SPAN.format(log=str(log), name=untimed, body=""))
    write_notebook(sources, second, SPAN.format(log=str(log), name=second, body="assert seed == 17, 'deliberate'"))
    with pytest.raises(runner.NotebookFailed, match=rf"{second}\.ipynb failed"):  # the other fixture's resume
        runner.run(tmp_path / "out", seed=17, batch_size=7, notebooks=names, html=False)


def test_a_notebook_is_given_only_the_parameters_its_parameters_cell_declares(tmp_path):
    given = {"seed": 29, "batch_size": 10, "out_dir": ".", "implementation": "reference"}
    nb = new_notebook(cells=[new_code_cell('out_dir = "lab_run"  # where\nimplementation = "reference"\nx = 1')])
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.cells.append(new_code_cell("seed = 3"))  # assigned outside the parameters cell: not a parameter
    nbformat.write(nb, tmp_path / "nb.ipynb")
    assert runner.declared(tmp_path / "nb.ipynb", given) == {"out_dir": ".", "implementation": "reference"}
    for name in catalog.NOTEBOOKS:  # every course notebook but the Orbax lesson takes the run's seed and batch size
        kept = runner.declared(catalog.NOTEBOOK_DIR / f"{name}.ipynb", given)
        assert set(kept) == set(given) - ({"seed", "batch_size"} if name == "stage3c_orbax_lesson" else set()), name


def test_the_untimed_pages_are_exported_beside_the_kernels_and_done_before_a_timed_notebook(tmp_path, monkeypatch):
    """The lanes as `run` drives them, with each kernel replaced by a short sleep and each page export by a slower
    one: every notebook gets one page; an untimed notebook's page is exported in the pages thread and ends before
    the first timed notebook starts; a timed notebook's page is exported by its lane after its kernel."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    events, lock = [], threading.Lock()

    def note(*event):
        with lock:
            events.append((*event, threading.current_thread().name, time.perf_counter()))

    def fake_execute(name, folder, parameters, out, implementation, timeout, sheets, label, cache=None, reached=None):
        note("start", f"{folder.name}/{name}")
        time.sleep(0.05)
        executed = folder / f"{name}.ipynb"
        executed.write_text("{}")
        note("end", f"{folder.name}/{name}")
        if sheets is not None:  # what the real _execute_one does with `sheets`
            runner.export_html(executed, sheets)
        return executed

    def slow_export(executed, sheets):
        time.sleep(0.2)  # longer than a notebook here: a page not waited for would still be running
        note("page", f"{executed.parent.name}/{executed.stem}")
        return executed.with_suffix(".html")

    monkeypatch.setattr(runner, "_execute_one", fake_execute)
    monkeypatch.setattr(runner, "export_html", slow_export)
    staging = tmp_path / "staging"
    staging.mkdir()
    (second,) = catalog.SECOND_LANE
    course = [name for name in catalog.BESIDE_FIXTURES if name != second] + ["stage4a_profile", "stage4b_beyond"]
    fixtures = {"other": (29, 10)}
    pages = runner._Pages(staging)
    with ThreadPoolExecutor(1, "fixtures") as beside:
        lane = beside.submit(
            runner._fixture_lane, fixtures, staging, {}, tmp_path, "reference", 60, None, threading.Event(), None,
            [second], pages,
        )  # fmt: skip
        seconds = runner._course_lane(course, lane, pages, staging, {}, tmp_path, "reference", 60, staging, None, None)
        seconds.update(lane.result())
        pages.drain()
    pages.close()

    executed = [f"staging/{name}" for name in [*course, second]]
    executed += [f"other/{name}" for name in catalog.FRESH_KERNEL_PAIR]
    paged = [name for kind, name, *_ in events if kind == "page"]
    assert sorted(paged) == sorted(executed)  # one page per executed notebook
    first_timed = next(at for kind, name, _, at in events if kind == "start" and name == "staging/stage4a_profile")
    for kind, name, thread, at in events:
        if kind != "page":
            continue
        if name.split("/")[1] in catalog.BESIDE_FIXTURES:
            assert thread.startswith("pages") and at < first_timed, (name, thread)
        else:
            ended = next(t for k, n, _, t in events if k == "end" and n == name)
            assert thread == threading.main_thread().name and at >= ended, (name, thread)
    assert set(seconds) == {*course, second, *(f"other/{name}" for name in catalog.FRESH_KERNEL_PAIR)}
