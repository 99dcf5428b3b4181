"""The course's source pasted into a learner file is named as the course's code; honest files are not."""

import ast
import inspect
import re
import textwrap

import pytest
from conftest import REPO

from shardlab.checker.provenance import course_functions, pasted
from shardlab.core import batch, sampler
from shardlab.handin import bounded, grade

# the functions the course's next_batch runs, pasted as they are written in the course
PATH = (sampler.draw, sampler.advance, batch.padded_length, batch.pad, batch.put_whole, batch.place)
HEAD = (
    "import jax\nimport numpy as np\nfrom jax.sharding import Mesh, NamedSharding\n"
    "from jax.sharding import PartitionSpec as P\n"
    "from shardlab.core.batch import Batch\nfrom shardlab.core.config import check_batch_size\n"
    "AXIS = 'data'\n\n"
)
OWN = (
    "\n\ndef initial(seed, data, mesh):\n    raise NotImplementedError\n"
    "\n\ndef make_step(mesh, learning_rate, decay, jit=True):\n    raise NotImplementedError\n"
)


def _source(function) -> str:
    return textwrap.dedent(inspect.getsource(function))


def _next_batch(advance: str, pad: str, place: str) -> str:
    return (
        "\n\ndef next_batch(state, data, batch_size, mesh):\n"
        f"    state, ids = {advance}(state, batch_size)\n"
        f"    features, targets, mask = {pad}(data, ids, mesh.size)\n"
        f"    return state, Batch(*{place}(features, targets, mask, mesh), ids)\n"
    )


def _without_docstrings(text: str) -> str:
    return re.sub(r'\n    """.*?"""\n', "\n", text, flags=re.S)


def test_the_course_s_source_pasted_is_named_as_course_code(tmp_path):
    verbatim = tmp_path / "verbatim.py"
    verbatim.write_text(HEAD + "\n\n".join(map(_source, PATH)) + _next_batch("advance", "pad", "place") + OWN)
    # the same source with its docstrings cut, its helpers and one variable renamed, everything reformatted
    text = _without_docstrings("\n\n".join(map(_source, PATH)))
    for old, new in (("advance", "_take"), ("pad", "_fill"), ("place", "_put"), ("ids", "taken")):
        text = re.sub(rf"\b{old}\b", new, text)
    disguised = tmp_path / "disguised.py"
    disguised.write_text(HEAD + ast.unparse(ast.parse(text)) + _next_batch("_take", "_fill", "_put") + OWN)
    for path in (verbatim, disguised):
        found = course_functions(str(path))
        assert set(found) == {"next_batch"}, (path.name, found)
        assert "shardlab.core.sampler.advance" in found["next_batch"], found
        assert "shardlab.core.batch.pad" in found["next_batch"], found
    # graded, the stage that judges next_batch is the course's code and scores nothing
    checks = [{"name": f"c{s}", "stage": s, "passed": True} for s in (1, 2, 3, 4)]
    report = {"checks": checks, "environment": {"course_functions": course_functions(str(disguised))}}
    rows = grade.stage_rows(bounded.Outcome(0, "", report, None, 1.0), 60.0)
    assert rows[0]["verdict"] == "course code" and rows[0]["passed"] == 0


def test_a_copy_changed_in_what_it_computes_is_not_the_course_s(tmp_path):
    """One operator changed in every copied helper: the learner's own (if wrong) code, never named."""
    text = "\n\n".join(map(_source, PATH)).replace("cursor + len(ids)", "cursor + batch_size")
    text = text.replace("mask[:rows] = 1.0", "mask[:rows] = 1")
    text = text.replace("dtype=np.int32)\n", "dtype=np.int64)\n")
    changed = tmp_path / "changed.py"
    changed.write_text(HEAD + text + _next_batch("advance", "pad", "place") + OWN)
    held = pasted(ast.parse(changed.read_text()))
    assert held == {}, held


@pytest.mark.slow  # every held-out file compared with the course's source: make test's, not the inner loop's
def test_honest_files_are_not_named(heldout):
    """Every held-out file (written from scratch by testers who never saw the course's code) and the starter."""
    files = sorted(heldout.rglob("*.py")) + sorted((REPO / "tests" / "heldout").glob("base*.py"))
    files.append(REPO / "lib" / "shardlab" / "learner" / "templates" / "starter.py")
    assert len(files) > 40
    for path in files:
        assert pasted(ast.parse(path.read_text())) == {}, path.name
