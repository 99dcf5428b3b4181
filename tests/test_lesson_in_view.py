"""The lesson in view: each notebook shows the JAX it teaches, keeps its records out of sight, and every
self-check question points at a cell whose output answers it.

Construct cells carry the tag `construct`. Their sources must hold the stage's JAX (checked on the
source notebooks); their outputs must exist in the executed course run and agree with what is read
here independently (the lowered IR file, the checkpoint file on disk, the course's split-then-permute
order).
"""

import html
import re
import zipfile

import nbformat
import numpy as np
import pytest
from conftest import REPO, cell_tags, executed, results

import shardlab as sl
from shardlab.course import results as record
from shardlab.course import selfcheck
from shardlab.verify import oracle

CONSTRUCT, RECORD = "construct", "record"
# per notebook: the JAX (or file format) a construct cell of that stage must show in its source
SHOWN = {
    "stage1_batches": ("addressable_shards", ".sharding", "jax.Array", 'jax.config.update("jax_num_cpu_devices", 4)'),
    "stage2_update": ("jax.shard_map", "in_specs=", "out_specs=P()", "jax.lax.psum", "all_reduce"),
    "stage3a_checkpoint": ("zipfile.ZipFile", ".file_size", "np.load(", "allow_pickle=False"),
    "stage3b_resume": ("addressable_shards", ".sharding"),
    "stage3c_orbax_lesson": ("jax.ShapeDtypeStruct(", ".sharding", "NamedSharding(mesh, P())"),
    "stage4a_profile": (
        "inspect.getsource(trace.traced_transition)",
        "inspect.getsource(timing.sample_ms)",  # the sample the timing takes, before its table
        ".lower(",
        ".compile()",
        "jax.profiler.trace(",
        "jax.profiler.TraceAnnotation(",
        ".as_text()",  # the timed four-device step lowered to StableHLO, its all_reduce lines labelled
        "label_all_reduces(",
    ),
    "stage4b_beyond": (
        "inspect.getsource(steps._step_by_step)",
        "inspect.getsource(fused.compile_loop)",
        "packed.packed_psum",
        "jax.lax.psum",
        "inspect.getsource(stats._statistics)",
        "device_sampler.plan",
    ),
    "stage5a_protocol": (
        "manifest.read",
        "sha256",
        "jax.make_array_from_callback",
        "ocp.CheckpointManager",
        "jax.distributed.initialize(",
        "os.link(",
        "os.fsync(",
        "signal.SIGTERM",  # the controllers' handler, installed after jax.distributed.initialize
        "inspect.getsource(group_supervisor._watch)",  # the supervisor's loop, before the drill it runs
        "inspect.getsource(program.Controller.publish)",  # how a controller publishes a saved step
        "inspect.getsource(program.Controller.train)",  # the loop's lines where each drill strikes, before the drills
    ),
    "stage5b_scaling": (
        "inspect.getsource(program.step_times)",
        "inspect.getsource(scaling.weak)",  # the program the scaling table times
    ),
}
NOTEBOOKS = list(SHOWN)
LATE = ["stage4a_profile", "stage5a_protocol", "stage5b_scaling"]  # every question says what its output shows
ASKING = [name for name in NOTEBOOKS if selfcheck.questions(name)]
BOOKKEEPING = re.compile(r"stored in results|full value in results|results/\w+\.json|make check does not ask")
PROGRESS = re.compile(r"^\[drills\] |^timing: |round \d+/\d+ done", re.M)  # a running cell's lines, not results
CUT = re.compile(r"\.\.\.'?$")  # a table cell ending in an ellipsis: text cut short


def source(name):
    return nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)


def tagged(nb, tag):
    found = [c for c in nb.cells if tag in cell_tags(c)]
    assert found, f"no cell tagged {tag!r}"
    return found[0]


def visible(cell) -> str:
    """The text a reader sees in a code cell's outputs (stream, Markdown or plain text; HTML as is)."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        else:
            data = output.get("data", {})
            parts.append(data.get("text/markdown") or data.get("text/html") or data.get("text/plain") or "")
    return "\n".join(parts)


def answered(nb, tag: str) -> str:
    """What a reader sees under the cell tagged `tag`: its outputs, then those of the conclusion cells right after it
    (their source folded, their sentence shown beneath the cell they conclude)."""
    index = next(i for i, c in enumerate(nb.cells) if tag in cell_tags(c))
    shown = [visible(nb.cells[index])]
    for cell in nb.cells[index + 1 :]:
        if record.CONCLUSION_TAG not in cell_tags(cell):
            break
        shown.append(visible(cell))
    return "".join(part if part.endswith("\n") else part + "\n" for part in shown if part)  # one line apart


def table(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in `text`, as cells, as a reader sees them (entities read)."""
    rows = [line.strip().strip("|").split("|") for line in text.splitlines() if line.lstrip().startswith("|")]
    return [[html.unescape(c.strip()) for c in row] for row in rows[2:]]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_shows_its_stages_jax_in_a_construct_cell(name):
    cells = [c for c in source(name).cells if c.cell_type == "code" and CONSTRUCT in cell_tags(c)]
    assert cells, f"{name} has no cell tagged {CONSTRUCT!r}"
    text = "\n".join(c.source for c in cells)
    missing = [word for word in SHOWN[name] if word not in text]
    assert not missing, f"{name}: no construct cell shows {missing}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_records_stay_in_the_closing_cell(name):
    nb = source(name)
    emitting = [i for i, c in enumerate(nb.cells) if "results.emit" in c.source and RECORD not in cell_tags(c)]
    assert not emitting, f"{name}: cells {emitting} record results in the lesson (move them to the {RECORD!r} cell)"
    assert not [i for i, c in enumerate(nb.cells) if BOOKKEEPING.search(c.source)], f"{name}: bookkeeping in a cell"


def test_the_bookkeeping_rule_finds_what_it_forbids():
    assert BOOKKEEPING.search("(checkpoint stored in results/stage3a_checkpoint.json)")
    assert BOOKKEEPING.search("... (17 items; full value in results/)") and BOOKKEEPING.search(
        "make check does not ask"
    )
    assert not BOOKKEEPING.search("observed: three all_reduce operations")


@pytest.mark.parametrize("name", ASKING)
def test_every_question_of_these_notebooks_names_its_cell(name):
    nb = source(name)
    for q in selfcheck.questions(name):
        assert q.cell and q.section, f"{name} question {q.number} names no cell"
        index = next((i for i, c in enumerate(nb.cells) if q.cell in cell_tags(c)), None)
        assert index is not None, f"{name}: no cell tagged {q.cell!r}"
        pointer = selfcheck.where(q)  # what the folded answer says: the heading a reader sees, never a tag
        assert f"\u201c{heading_before(nb, index)}\u201d" in pointer and "tagged" not in pointer, (q.number, pointer)


def heading_before(nb, index: int) -> str:
    """The last heading written above cell `index` (without its #s)."""
    for cell in reversed(nb.cells[:index]):
        if cell.cell_type == "markdown":
            found = [line.lstrip("#").strip() for line in cell.source.splitlines() if line.startswith("#")]
            if found:
                return found[-1]
    return ""


def check_pointers(load, names) -> list[str]:
    """Every way a pointer of `names` misses (`pointer_problems`); `load(name)` gives the executed notebook."""
    questions = [q for name in names for q in selfcheck.questions(name) if q.cell]
    books = {name: load(name) for name in {q.notebook for q in questions}}
    return [problem for q in questions for problem in pointer_problems(books[q.notebook], q)]


def pointer_problems(nb, q) -> list[str]:
    """How question `q`'s pointer misses in the executed notebook `nb`: no such cell, no visible output, another
    section, or (when the question says what answers it, `seen`) an output that does not state the answer."""
    index = next((i for i, c in enumerate(nb.cells) if q.cell in cell_tags(c)), None)
    if index is None:
        return [f"{q.notebook} {q.number}: no cell tagged {q.cell}"]
    shown = answered(nb, q.cell)
    if not shown.strip():
        return [f"{q.notebook} {q.number}: the cell tagged {q.cell} shows nothing"]
    if not heading_before(nb, index).startswith(q.section):
        return [f"{q.notebook} {q.number}: {q.cell} sits under {heading_before(nb, index)!r}"]
    if q.seen and not re.search(q.seen, shown):
        return [f"{q.notebook} {q.number}: the output of {q.cell} does not show the answer ({q.seen!r})"]
    return []


# the notebooks whose every question says what output answers it (`seen`), not only where it is
ANSWER_SEEN = ("stage1_batches", "stage2_update", "stage3a_checkpoint", "stage3b_resume")


@pytest.mark.parametrize("name", ANSWER_SEEN)
def test_every_question_of_these_notebooks_says_what_output_answers_it(name):
    for q in selfcheck.questions(name):
        assert q.seen, f"{name} question {q.number} does not say what output answers it"
        re.compile(q.seen)


def test_the_pointer_rule_finds_a_pointer_without_an_answer():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    q = selfcheck.Question(
        "nb", "1", "How many?", ("two", "three"), "b", "", "nb:count", "count", "Counting", "", r"\b3 rows"
    )
    heading = new_markdown_cell("## Counting")

    def book(text, tag="count"):
        cell = new_code_cell("print(n)", metadata={"tags": [tag]})
        cell.outputs = [new_output("stream", name="stdout", text=text)] if text else []
        return new_notebook(cells=[heading, cell])

    assert pointer_problems(book("observed: 3 rows\n"), q) == []
    assert "does not show the answer" in pointer_problems(book("observed: 13 rows, see below\n"), q)[0]
    assert "shows nothing" in pointer_problems(book(""), q)[0]
    assert "no cell tagged" in pointer_problems(book("3 rows", tag="other"), q)[0]
    assert "sits under" in pointer_problems(new_notebook(cells=[book("3 rows").cells[1]]), q)[0]


# (notebook, question): an output that shows only part of the answer, then one that shows all of it
PARTIAL_THEN_WHOLE = {
    ("stage1_batches", "3"): (
        "| cpu:3 | [6:8, :] | [2, 8] | [14, pad] | [1, 0] |\n",  # the mask, but not "whatever its numbers"
        "| cpu:3 | [6:8, :] | [2, 8] | [14, pad] | [1, 0] |\nobserved: the padded slot holds features [0.0, 0.0] "
        "and has mask 0; row 16, a real row set to the same zeros, has mask 1\n",
    ),
    ("stage3a_checkpoint", "4"): (
        "written in place: a reader halfway through found 'the first half, '; the finished name holds 'x'\n",
        "written in place: a reader halfway through found 'the first half, '; the finished name holds 'x'\n"
        "written aside, then os.link: a reader halfway through found no file; the finished name holds 'x'\n",
    ),
    ("stage3b_resume", "1"): (
        "largest difference in the sampler fields (key, order, cursor, step) over 12 steps: 0\n",  # not where drawn
        "new permutations were drawn in steps [9, 13, 17] (each as that step read its batch)\n",
    ),
    ("stage3b_resume", "4"): (
        "| weights | 0.0 | True | P() on 4 devices |\n",  # where it landed, not what the target carried
        "target weights: ShapeDtypeStruct, shape (8,), dtype float32, sharding P() on mesh {'data': 4}\n"
        "| weights | 0.0 | True | P() on 4 devices |\n",
    ),
}


@pytest.mark.parametrize(("name", "number"), list(PARTIAL_THEN_WHOLE))
def test_a_pointer_needs_the_whole_answer_not_part_of_it(name, number):
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    (q,) = [q for q in selfcheck.questions(name) if q.number == number]

    def book(text):
        cell = new_code_cell("", metadata={"tags": [q.cell]})
        cell.outputs = [new_output("stream", name="stdout", text=text)]
        return new_notebook(cells=[new_markdown_cell(f"## {q.section}"), cell])

    partial, whole = PARTIAL_THEN_WHOLE[name, number]
    assert "does not show the answer" in pointer_problems(book(partial), q)[0]
    assert pointer_problems(book(whole), q) == []
    if name == "stage3b_resume" and number == "1":  # no step named: no step where the key first shows
        assert pointer_problems(book(whole.replace("[9, 13, 17]", "[]")), q)


@pytest.mark.notebooks
def test_every_self_check_pointer_lands_on_an_answering_output(run_dir):
    names = sorted({q.notebook for q in selfcheck.QUESTIONS})
    assert not check_pointers(lambda name: executed(run_dir, name), names)


@pytest.mark.parametrize("name", LATE)
def test_every_question_of_the_later_stages_says_what_its_output_shows(name):
    vague = [q.number for q in selfcheck.questions(name) if not q.seen]
    assert not vague, f"{name}: questions {vague} name no `seen`, so nothing checks their output answers them"
    for q in selfcheck.questions(name):
        re.compile(q.seen)


def test_the_pointer_rule_finds_an_output_that_does_not_answer():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    (q,) = [q for q in selfcheck.questions("stage4a_profile") if q.cell == "durations"]
    cell = new_code_cell("show(rows)", metadata={"tags": [q.cell]})
    cell.outputs = [new_output("stream", name="stdout", text="| 1 | 2.65 | 0.90 |\n")]  # durations, no boundary
    heading = new_markdown_cell(f"## {q.section} under the profiler")
    others = [new_code_cell("", metadata={"tags": [o.cell]}) for o in selfcheck.questions("stage4a_profile")]
    nb = new_notebook(cells=[heading, cell, *others])
    found = check_pointers(lambda name: nb, ["stage4a_profile"])
    assert f"stage4a_profile {q.number}: the output of durations does not show the answer ({q.seen!r})" in found
    cell.outputs[0]["text"] += "Neither annotation is longer beyond the spread: the middle halves overlap\n"
    assert not [p for p in check_pointers(lambda name: nb, ["stage4a_profile"]) if f" {q.number}:" in p]


@pytest.mark.notebooks
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_output_of_these_notebooks_shows_bookkeeping(run_dir, name):
    nb = executed(run_dir, name)
    shown = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and BOOKKEEPING.search(visible(c))]
    assert not shown, f"{name}: cells {shown} show where results are stored"
    assert not visible(tagged(nb, RECORD)).strip(), f"{name}: the closing record cell shows something"
    progress = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and PROGRESS.search(visible(c))]
    assert not progress, f"{name}: cells {progress} keep progress lines"
    cut = [
        row for c in nb.cells if c.cell_type == "code" for row in table(visible(c)) if any(CUT.search(x) for x in row)
    ]
    assert not cut, f"{name}: table cells cut short: {cut}"


@pytest.mark.notebooks
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_what_nobody_reads_leaves_no_empty_output_area(run_dir, name):
    """An output a front end would draw as an empty box is in the hidden form, and the page leaves it out."""
    nb = executed(run_dir, name)
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        for output in cell.get("outputs", []):
            if output.get("output_type") in ("display_data", "execute_result") and not visible({"outputs": [output]}):
                drawn = [m for m in output.get("data", {}) if m.startswith(("text/", "image/"))]
                assert not drawn and record.HIDDEN_TAG in output.get("metadata", {}).get("tags", []), (i, output)
    assert not tagged(nb, RECORD).outputs, f"{name}: the record cell keeps outputs (its records belong in metadata)"
    assert tagged(nb, RECORD).metadata[record.METADATA]["records"], f"{name}: the record cell holds no records"
    page = (run_dir / f"{name}.html").read_text()
    (closing,) = [c for c in re.findall(r'<div [^>]*class="(jp-Cell jp-CodeCell[^"]*)"', page) if "celltag_record" in c]
    assert "jp-mod-noOutputs" in closing, f"{name}: the record cell's page shows an output area"


@pytest.mark.notebooks
def test_stage1_shows_where_each_row_of_the_first_batch_lives(run_dir):
    nb = executed(run_dir, "stage1_batches")
    rows = table(visible(tagged(nb, "placement")))
    first = oracle.idiom_epochs(17, 23, 1)[0]["order"][:7].tolist() + ["pad"]
    assert [r[0] for r in rows] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    assert [r[1] for r in rows] == ["[0:2, :]", "[2:4, :]", "[4:6, :]", "[6:8, :]"]
    assert [r[3] for r in rows] == [f"[{', '.join(str(i) for i in first[d : d + 2])}]" for d in range(0, 8, 2)]
    assert [r[4] for r in rows] == ["[1, 1]"] * 3 + ["[1, 0]"]
    owned = {r[0]: r[2] for r in table(visible(tagged(nb, "ownership")))}
    assert owned == {
        "weights": "P()",
        "momentum": "P()",
        "key": "host",
        "order": "host",
        "cursor": "host",
        "step": "host",
    }


@pytest.mark.notebooks
def test_stage2_labels_each_all_reduce_of_the_lowered_step(run_dir):
    found = results(run_dir, "stage2_update")
    ir = (run_dir / found["all_reduce"]["ir_file"]).read_text()
    shown_text = visible(tagged(executed(run_dir, "stage2_update"), "all-reduce-table"))
    rows = table(shown_text)
    assert len(rows) == len(re.findall(r'"stablehlo\.all_reduce"', ir)) == 3
    # one all_reduce whole as the IR writes it, beside the table: the op, its operand, its add region and its type
    one_op = r'(%\w+) = "stablehlo\.all_reduce"\((%\w+)\)(.*?)^\}\) : \((tensor<[^>]*>)\) -> (tensor<[^>]*>)'
    whole = re.search(one_op, shown_text, re.M | re.S)
    assert whole and "replica_groups = dense<" in whole[3] and "stablehlo.add" in whole[3], shown_text
    line = [whole[0], whole[1], whole[2], whole[4], whole[5]]  # the region left out
    assert line[2] == rows[0][0] and line[3] == line[4] == rows[0][1], shown_text
    in_ir = rf'^\s*{line[1]} = "stablehlo\.all_reduce"\({line[2]}\)(.*?)^\s*\}}\) : ([^\n]*)$'
    opened = re.search(in_ir, ir, re.M | re.S)
    assert opened and opened[2].strip() == f"({line[3]}) -> {line[4]}", line[0]
    devices = ",".join(str(d) for d in range(4))  # the mesh of stage 2 is the four logical devices
    for operand, kind, _, _, groups in rows:
        assert re.search(rf'= "stablehlo\.all_reduce"\({operand}\)', ir), operand
        assert re.search(rf"\s{operand} = .*{re.escape(kind)}\s*$", ir, re.M), (operand, kind)
        spans = re.search(rf'"stablehlo\.all_reduce"\({operand}\).*?replica_groups = dense<(\[\[[^>]*\]\])>', ir)
        assert spans and groups.replace(" ", "") == spans.group(1).replace(" ", "") == f"[[{devices}]]", groups
    sums = sorted((kind, what.split(",")[0]) for _, kind, _, what, _ in rows)
    assert sums == [("tensor<8xf32>", "the gradient numerator"), ("tensor<f32>", "the loss numerator"),
                    ("tensor<f32>", "the valid count N = sum of m")]  # fmt: skip
    demo, first = found["shard_map"], found["updates"]["steps"][0]["ids"]  # the first batch's rows
    assert demo["local_counts"] == [2.0, 2.0, 2.0, 1.0] and "replication" in demo["refused"]
    mean = float(np.mean(sl.teaching_fixture().targets[first].astype(np.float64)))  # the mean target, by NumPy
    assert abs(demo["mean"] - mean) <= 1e-5 * max(1.0, abs(mean)), (demo["mean"], mean)


@pytest.mark.notebooks
def test_stage3_shows_the_npz_members_and_the_restore_target(run_dir):
    saved = results(run_dir, "stage3a_checkpoint")
    with zipfile.ZipFile(run_dir / saved["checkpoint"]["file"]) as archive:
        on_disk = {info.filename: info.file_size for info in archive.infolist()}
        starts = {name: archive.read(name)[:12] for name in on_disk}  # magic, version, then the header's length
    shown = visible(tagged(executed(run_dir, "stage3a_checkpoint"), "npz-members"))
    rows = table(shown)
    assert {r[0]: int(r[3]) for r in rows} == on_disk
    # independently: each .npy header's size read from its own bytes (10 or 12 fixed bytes, then the length given)
    fixed = {name: (10, int.from_bytes(b[8:10], "little")) if b[6] == 1 else (12, int.from_bytes(b[8:12], "little"))
             for name, b in starts.items()}  # fmt: skip
    headers = sorted({sum(f) for f in fixed.values()})
    assert f"its .npy header ({' or '.join(map(str, headers))} bytes here)" in shown, shown
    assert {f"{f}.npy" for f in ("weights", "momentum", "key", "order", "cursor", "step")} <= set(on_disk)
    with np.load(run_dir / saved["checkpoint"]["file"], allow_pickle=False) as npz:
        assert {r[0]: r[1] for r in rows} == {f"{k}.npy": str(npz[k].dtype) for k in npz.files}
    target = {r[0]: r[4] for r in table(visible(tagged(executed(run_dir, "stage3c_orbax_lesson"), "restore-target")))}
    assert target["weights"] == target["momentum"] == "P()"
    assert {v for k, v in target.items() if k not in ("weights", "momentum")} == {"host (NumPy)"}


@pytest.mark.notebooks
def test_stage3_resume_shows_its_proof_as_a_table_of_steps(run_dir):
    from shardlab.verify import replay

    saved = results(run_dir, "stage3a_checkpoint")["checkpoint"]
    control = replay.load_record(run_dir / saved["control"])
    shown = visible(tagged(executed(run_dir, "stage3b_resume"), "recovery"))  # the first steps, then the rest folded
    rows = [r for r in table(shown) if r[0].isdigit()]  # every step's row, not the folded table's header
    assert [int(r[0]) for r in rows] == [int(s) for s in control["step"]]
    assert [r[1] for r in rows] == [str(np.asarray(ids).tolist()) for ids in control["ids"]]
    assert all(r[4] == "0.0" and r[5] == "True" for r in rows)
    with np.load(run_dir / saved["file"], allow_pickle=False) as npz:
        keys = [npz["key"].tolist()] + [np.asarray(k).tolist() for k in control["key"]]
    drawn = sum(a != b for a, b in zip(keys, keys[1:]))  # the control's own reshuffles after the saved key
    assert drawn == 3  # three epochs on from mid-epoch: three boundaries, whichever step a sampler draws at
    found = results(run_dir, "stage3b_resume")["permutations"]
    assert found["drawn"] == drawn
    assert len(found["after_steps"]) == drawn
    said = f"new permutations were drawn in steps {found['after_steps']}"
    assert said in answered(executed(run_dir, "stage3b_resume"), "recovery-checks")


# --- a conclusion shows its sentence, not the call that chose it ------------------------------------------------

# the notebooks whose conclusions print from folded cells tagged `conclusion`
CONCLUDING = ["stage1_batches", "stage2_update", "stage3a_checkpoint", "stage3b_resume", "stage3c_orbax_lesson"]
CONCLUDING += ["stage4a_profile", "stage4b_beyond", "stage5a_protocol", "stage5b_scaling"]
CHOOSING = re.compile(r"\b(sentences|claims)\.\w+\(")


def folded(cell) -> bool:
    return bool(cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"))


def choosing_problems(nb) -> list[str]:
    """Where a notebook shows the machinery that picks a sentence: a shown source calling it, a conclusion cell whose
    source is not folded, or one that does more than print what its values choose."""
    import ast

    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or RECORD in cell_tags(cell):
            continue
        concluding = record.CONCLUSION_TAG in cell_tags(cell)
        if CHOOSING.search(cell.source) and not concluding:
            problems.append(f"cell {i} chooses a sentence in a source the reader sees")
        if concluding and not folded(cell):
            problems.append(f"cell {i} is a conclusion with its source shown")
        if concluding:
            for statement in ast.parse(cell.source).body:
                call = statement.value if isinstance(statement, ast.Expr) else None
                shown = ("print", "display_text")  # printed, or shown as Markdown (folded until the learner's own)
                name = isinstance(call, ast.Call) and (getattr(call.func, "id", "") or getattr(call.func, "attr", ""))
                printing = name in shown and all(k.arg == "folded" for k in call.keywords if name != "print")
                if not (printing and all(CHOOSING.search(ast.unparse(a)) for a in call.args)):
                    problems.append(f"cell {i} hides more than a chosen sentence: {ast.unparse(statement)[:60]}")
    return problems


@pytest.mark.parametrize("name", CONCLUDING)
def test_a_conclusion_is_printed_from_a_folded_cell(name):
    assert not choosing_problems(source(name))


def test_the_conclusion_rule_finds_a_chooser_in_view():
    from nbformat.v4 import new_code_cell, new_notebook

    call = 'print(sentences.chosen(NOTEBOOK, "three_all_reduces", count=n))'
    hidden = {"tags": [record.CONCLUSION_TAG], "jupyter": {"source_hidden": True}}
    assert not choosing_problems(new_notebook(cells=[new_code_cell(call, metadata=hidden)]))
    assert "in a source the reader sees" in choosing_problems(new_notebook(cells=[new_code_cell(call)]))[0]
    shown = {"tags": [record.CONCLUSION_TAG]}
    assert "source shown" in choosing_problems(new_notebook(cells=[new_code_cell(call, metadata=shown)]))[0]
    more = new_code_cell("n = 3\n" + call, metadata=hidden)
    assert "hides more" in choosing_problems(new_notebook(cells=[more]))[0]
    fold = 'show.display_text([sentences.verdict(o, v)], folded="the verdict" if mine is None else None)'
    assert not choosing_problems(new_notebook(cells=[new_code_cell(fold, metadata=hidden)]))
    other = "show.display_text([sentences.verdict(o, v)], after=n)"
    assert "hides more" in choosing_problems(new_notebook(cells=[new_code_cell(other, metadata=hidden)]))[0]


@pytest.mark.notebooks
@pytest.mark.parametrize("name", CONCLUDING)
def test_every_conclusion_shows_its_sentence_and_the_page_leaves_the_call_out(run_dir, name):
    nb = executed(run_dir, name)
    quiet = [i for i, c in enumerate(nb.cells) if record.CONCLUSION_TAG in cell_tags(c) and not visible(c).strip()]
    assert not quiet, f"{name}: conclusion cells {quiet} show nothing"
    page = (run_dir / f"{name}.html").read_text()
    text = re.sub(r"<[^>]+>", "", page)  # the closing record cell files the chosen sentences: its call may show
    assert not re.search(r"\b(sentences|claims)\.(?!record\()\w+\(", text), f"{name}: the page shows a chooser"


# --- a prediction's answer is not in the source the learner runs before reading it ----------------------------


def _fixed_words(sentence: str) -> list[str]:
    """The literal stretches of a sentence template long enough to give its outcome away (values cut out)."""
    return [part.strip() for part in re.split(r"\{[^}]*\}|<\w+>", sentence) if len(part.strip()) >= 25]


@pytest.mark.parametrize("name", ["stage1_batches", "stage2_update", "stage3c_orbax_lesson"])
def test_no_code_cell_spells_out_a_sentence_chosen_by_value(name):
    """A reveal cell prints the sentence its values choose; neither candidate is readable in any cell's source."""
    from shardlab.course import sentences

    code = [
        c.source
        for c in nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4).cells
        if c.cell_type == "code"
    ]
    assert not any("claims.choose(" in source for source in code), "choose a sentence through sentences.chosen"
    fragments = [f for row in sentences.CHOSEN[name].values() for s in row[1:] for f in _fixed_words(s)]
    assert fragments, name  # the table holds this notebook's sentences
    leaked = [f for f in fragments if any(f in source for source in code)]
    assert not leaked, leaked


@pytest.mark.parametrize("name", ["stage4a_profile", "stage4b_beyond", "stage5a_protocol", "stage5b_scaling"])
def test_the_later_stages_choose_sentences_in_the_lesson_and_file_them_in_the_closing_cell(name):
    """A lesson cell picks a sentence by its values alone: no output folder, no results key, no sentence spelled out;
    the closing cell files every one with the values it rests on."""
    from shardlab.course import sentences

    cells = [c for c in source(name).cells if c.cell_type == "code"]
    lesson = [c.source for c in cells if RECORD not in cell_tags(c)]
    filing = re.compile(r"sentences\.(state|first)\(|sentences import state|claims\.(say|choose|record)\(")
    assert not [src for src in lesson if filing.search(src)], f"{name}: a lesson cell files a claim itself"
    assert not [src for src in lesson if re.search(r"sentences\.\w+\(\s*out_dir", src)], name
    keys = {key for row in sentences.SENTENCES[name].values() for key in row.keys.values()}
    assert not [k for k in keys if any(f'"{k}"' in src for src in lesson)], f"{name}: a results key in a lesson cell"
    fragments = [
        f for row in sentences.SENTENCES[name].values() for t in (row.true, row.false) for f in _fixed_words(t)
    ]
    leaked = [f for f in fragments if any(f in src for src in lesson)]
    assert not leaked, leaked
    assert "sentences.record(out_dir, NB)" in tagged(source(name), RECORD).source


SHOWING = {"print", "display", "display_table", "sentence"}  # calls that put an answer on the page


def answers_in_source(code: str) -> list[str]:
    """Asserts that state a literal expected value before the cell shows anything (subscript keys do not count)."""
    import ast

    found = []
    for statement in ast.parse(code).body:
        calls = [n for n in ast.walk(statement) if isinstance(n, ast.Call)]
        names = {getattr(c.func, "id", None) or getattr(c.func, "attr", None) for c in calls}
        if names & SHOWING:
            return found
        is_assert = isinstance(statement, ast.Assert) or "assert_equal" in names or "assert_array_equal" in names
        if not is_assert:
            continue
        # what is compared: an assert's test, an assert_equal's positional arguments (not messages)
        compared = [statement.test] if isinstance(statement, ast.Assert) else [a for c in calls for a in c.args]
        inside = [n for part in compared for n in ast.walk(part)]
        keys = {id(n.slice) for n in inside if isinstance(n, ast.Subscript)}
        literals = [n for n in inside if isinstance(n, ast.Constant) and id(n) not in keys]
        if any(not isinstance(n.value, bool) and n.value is not None for n in literals):  # "passed is True" aside
            found.append(ast.get_source_segment(code, statement))
    return found


@pytest.mark.parametrize("name", ["stage4a_profile", "stage4b_beyond", "stage5a_protocol"])
def test_no_answer_cell_states_its_expected_value_before_showing_it(name):
    nb, problems, after_predict = source(name), [], False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            after_predict = "predict" in cell_tags(cell)
            continue
        if after_predict:
            problems += answers_in_source(cell.source)
    assert not problems, f"{name}: answers asserted before they are shown: {problems}"


def test_the_answer_rule_finds_a_literal_asserted_before_the_print():
    old = 'np.testing.assert_equal((p["cause"], p["steps_lost"]), ("preempted at step 8", 0))\nprint(p["cause"])'
    assert answers_in_source(old)
    assert answers_in_source('np.testing.assert_equal(k["resumed_from"] < 6, True)\nprint(k)')
    assert not answers_in_source('print(k)\nnp.testing.assert_equal(k["resumed_from"] < 6, True)')
    assert not answers_in_source('for f in s["failures"]:\n    assert all(f["checks"].values()), f["checks"]')


def test_the_drill_steps_the_predictions_and_the_self_check_name_are_the_ones_the_drill_ran(run_dir):
    """Stage 5a's prompts name the steps of its supervised drill: process 0's kill and process 1's SIGTERM; the
    self-check moves the SIGTERM to another step, and marks right the resume the drill's rule gives there."""
    found = results(run_dir, "stage5a_protocol")
    text = " ".join((REPO / "notebooks" / "stage5a_protocol.md").read_text().split())
    kill = found["p0_kill"]
    last = kill["resumed_from"] + kill["steps_lost"]  # by hand: the completed steps past the resume, counted on
    assert f"SIGKILLed after step {last}, inside step {last + 1}" in text
    step = int(found["preemption"]["cause"].removeprefix("preempted at step "))  # saved once the signal's step ended
    assert f"SIGTERM during step {step}, after that step's agreement (in its update)" in text
    (question,) = [q for q in selfcheck.questions("stage5a_protocol") if q.cell == "reveal-preempt"]
    phase = r"during step (\d+), after that step's agreement \(in its update\);"
    during = int(re.search(phase, question.prompt).group(1))  # the phase given, as in the drill's prompt
    assert during != step, question.prompt  # a transfer: the signal at another step
    right = question.options[selfcheck.LETTERS.index(question.answer)]
    assert right.startswith(f"step {during}:"), right  # as in the drill: the step the signal came in is saved


@pytest.mark.notebooks
def test_stage4b_shows_the_samples_each_loop_took_and_its_parameter_is_a_floor(run_dir):
    """The samples column: each loop's count, by block, as recorded; none took fewer than `fused_samples`."""
    text = (REPO / "notebooks" / "stage4b_beyond.md").read_text()
    least = int(re.search(r"^fused_samples = (\d+)  # timing samples per loop, at least", text, re.M).group(1))
    timing = results(run_dir, "stage4b_beyond")["fused_timing"]
    rows = table(visible(tagged(executed(run_dir, "stage4b_beyond"), "fused_timing")))
    cells = {row[0]: re.fullmatch(r"(\d+) \((\d+(?: \+ \d+)*)\)", row[1]).groups() for row in rows}  # "N (a + b)"
    shown = {name: int(total) for name, (total, _) in cells.items()}
    assert shown == {name: len(samples) for name, samples in timing["per_step_ms"].items()}, shown
    by_block = {name: [int(n) for n in blocks.split(" + ")] for name, (_, blocks) in cells.items()}
    assert by_block == timing["blocks"], by_block
    assert all(sum(blocks) == shown[name] for name, blocks in by_block.items()), by_block
    assert min(shown.values()) >= least, (shown, least)
