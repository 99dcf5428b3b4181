"""What a person sees, in a real browser: stage 1 run through JupyterLab's UI, and the receipts opened offline.

Run by `make test-browser` (from the repository root, so `tests.test_lab` imports the same
JupyterLab launcher `tests/test_lab.py` uses: `make lab`'s command on a learner workspace).
"""

import json
import re
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from conftest import watch

from shardlab.course import execute as runner
from shardlab.errors import TraceError
from shardlab.evidence import trace
from tests.test_lab import NOTEBOOK, lab, padding_line  # noqa: F401  (`lab`: the fixture that starts JupyterLab)

RUN_TIMEOUT_MS = 240_000  # every stage 1 cell through the UI, on a loaded 2-core machine
START_TIMEOUT_MS = 120_000  # the page, then the kernel
STDERR = "application/vnd.jupyter.stderr"  # JupyterLab renders stderr streams and tracebacks with it
LOCAL = ("file:", "data:", "about:", "blob:")
IMAGES = "els => els.map(e => [e.getAttribute('src').slice(0, 40), e.naturalWidth])"  # [src start, width]


def _xprof(xplane, tool: str):
    """XProf's converter output for `tool`, read from a copy: XProf caches results beside the file it reads."""
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError as exc:
        raise TraceError(
            "reading the trace with XProf needs the xprof package: pip install -r requirements-browser.txt "
            "(make test-browser installs it)"
        ) from exc
    with tempfile.TemporaryDirectory() as scratch:
        copy = shutil.copy(xplane, Path(scratch) / Path(xplane).name)
        data, _ = raw_to_tool_data.xspace_to_tool_data([copy], tool, {"use_saved_result": False})
    if data is None:
        raise TraceError(f"XProf could not convert {Path(xplane).name} with its '{tool}' tool; capture again")
    return json.loads(data)


def xprof_events(xplane, names=trace.ANNOTATIONS) -> list[tuple[str, int, int]]:
    """(name, start_ns, duration_ns) of every annotation event, as XProf's trace viewer reads the XPlane.

    XProf shows a step marker as '<name> <step_num>'; the name is given back without the number.
    XProf's timestamps start at the capture, not at the epoch: compare starts relative to the first.
    """
    found = []
    for event in _xprof(xplane, "trace_viewer")["traceEvents"]:
        name, number = event.get("name", ""), event.get("args", {}).get("step_num")
        if number is not None and name.endswith(f" {number}"):
            name = name[: -len(f" {number}")]
        if event.get("ph") == "X" and name in names:
            found.append((name, round(1e3 * event["ts"]), round(1e3 * event["dur"])))
    return sorted(found, key=lambda e: (e[1], e[0]))


def xprof_steps(xplane) -> list[str]:
    """The step numbers XProf's overview page lists (empty when the trace has no step markers)."""
    for table in _xprof(xplane, "overview_page"):
        if any(col.get("id") == "stepnum" for col in table.get("cols", [])):
            return [str(row["c"][0]["v"]) for row in table.get("rows", [])]
    return []


def test_stage1_runs_through_the_lab_ui_with_outputs_and_no_error(lab, browser, tmp_path):  # noqa: F811
    saved = tmp_path / "workspace" / NOTEBOOK  # the learner's copy the lab fixture made
    cells = [c for c in nbformat.read(saved, as_version=4).cells if c.cell_type == "code"]
    code_cells = len(cells)
    # a cell whose source is folded shows no prompt; the saved copy's execution counts below cover it
    shown = sum(1 for c in cells if not c.metadata.get("jupyter", {}).get("source_hidden"))
    page = browser.new_page()
    page.goto(f"{lab.base}/lab/tree/{NOTEBOOK}?token={lab.token}")
    page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=START_TIMEOUT_MS)
    page.get_by_text("Python (shardlab) | Idle").wait_for(timeout=START_TIMEOUT_MS)  # the kernel is connected

    page.locator("#jp-MainMenu").get_by_text("Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
    # textContent, not innerText: the notebook skips rendering cells scrolled out of view
    done = f"""() => {{
        const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')];
        const numbered = prompts.filter(p => /\\[\\d+\\]/.test(p.textContent));
        return prompts.length === {code_cells} && numbered.length === {shown};
    }}"""
    try:
        page.wait_for_function(done, timeout=RUN_TIMEOUT_MS)
    except Exception as exc:
        page.screenshot(path=str(tmp_path / "lab.png"))
        prompts = [p.text_content() for p in page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").all()]
        raise AssertionError(f"{code_cells} code cells, prompts {prompts}; see {tmp_path / 'lab.png'}") from exc

    text = page.locator(".jp-Notebook").text_content()
    assert padding_line() in text  # 7 rows pad to 8 slots, 2 per device: [2, 2, 2, 1]
    stderr = [o.text_content() for o in page.locator(f".jp-OutputArea-output[data-mime-type='{STDERR}']").all()]
    assert not [s for s in stderr if "Traceback" in s or "Error" in s], stderr
    assert page.locator(".jp-OutputArea-output").count() >= code_cells // 2

    page.keyboard.press("Control+s")  # what the learner keeps: the saved copy holds outputs and no error
    page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)
    nb = nbformat.read(saved, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert [c.execution_count for c in nb.cells if c.cell_type == "code"] == list(range(1, code_cells + 1))
    assert outputs and not [o for o in outputs if o.output_type == "error"]


@pytest.fixture(scope="module")
def receipts(tmp_path_factory):
    """A complete fresh `python -m shardlab run`, as `make run` leaves it."""
    return runner.run(tmp_path_factory.mktemp("fresh") / "receipts", seed=17, batch_size=7)


FIGURED = ("index.html", "stage2_update.html", "stage5b_scaling.html")  # pages whose lesson shows figures or formulas


@pytest.mark.parametrize("name", [*FIGURED, "stage4a_profile.html"])
def test_receipts_render_offline_with_no_console_error(receipts, browser, name):
    page = browser.new_page()
    seen = watch(page)
    page.goto((receipts / name).as_uri())
    page.wait_for_load_state("load")
    images = page.eval_on_selector_all("img", IMAGES)
    assert images or name not in FIGURED, f"{name} shows no figure"
    assert all(width > 0 for _, width in images), f"an image did not load: {images}"
    assert seen["errors"] == [], seen["errors"]
    assert [url for url in seen["requests"] if not url.startswith(LOCAL)] == [], "a request left the folder"
    if name == "stage2_update.html":  # every formula drawn: stage 2's derivation has at least eight
        assert page.locator("img.shardlab-math").count() >= 8
        assert "$$" not in page.locator("body").inner_text()
    if name == "index.html":
        assert "seed 17, batch size 7, implementation reference" in page.locator("body").inner_text()
        assert page.locator("table tr").count() >= 10


def test_xprof_reads_the_same_annotations_and_finds_one_step_per_transition(receipts):
    """XProf's own converter, a third reader of the XPlane, agrees with jax's ProfileData and the Perfetto JSON."""
    files = trace.find_files(receipts / "trace")
    readings = [xprof_events(files.xplane), trace.xplane_events(files.xplane)]
    readings = [sorted(r, key=lambda e: (e[1], e[0])) for r in [*readings, trace.perfetto_events(files.perfetto)]]
    names = [[e[0] for e in r] for r in readings]
    assert names[0] == names[1] == names[2] and names[0].count(trace.STEP) == 4
    for other in readings[1:]:  # XProf counts time from the capture's start: compare durations and offsets
        for (_, x_start, x_dur), (_, o_start, o_dur) in zip(readings[0], other):
            assert abs(x_dur - o_dur) <= 1e3 * trace.TOLERANCE_MS
            assert abs((x_start - readings[0][0][1]) - (o_start - other[0][1])) <= 1e3 * trace.TOLERANCE_MS
    audit = json.loads((receipts / "audit.json").read_text())
    steps = [row["step"] for row in audit["trace"]["transitions"]]
    assert xprof_steps(files.xplane) == [f"{trace.STEP} {n}" for n in steps]  # no "No step marker"
    assert sorted(p.name for p in files.xplane.parent.iterdir()) == sorted([files.xplane.name, files.perfetto.name])
