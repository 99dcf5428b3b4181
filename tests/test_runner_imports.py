"""The runner's own interpreter imports nbformat without jsonschema's IRI grammars, and validates as before."""

import json
import subprocess
import sys

from shardlab.course import catalog

CHILD = """
import json, sys
from shardlab.course import execute
if sys.argv[1] == "runner":
    execute._without_iri_grammars()
import nbformat
from nbformat import ValidationError

nb = nbformat.read(sys.argv[2], as_version=4)
nbformat.validate(nb)  # the course's notebook is valid
broken = nbformat.from_dict(json.loads(nbformat.writes(nb)))
broken.cells[0].pop("source")
try:
    nbformat.validate(broken)
    refused = False
except ValidationError:
    refused = True
print(json.dumps({"loaded": sys.modules.get(execute.UNUSED_AT_IMPORT) is not None, "refused": refused}))
"""


def _child(mode: str) -> dict:
    notebook = str(catalog.NOTEBOOK_DIR / "stage1_batches.ipynb")
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, notebook], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_runner_leaves_out_the_iri_grammars_and_nbformat_still_refuses_a_broken_notebook():
    plain, runner = _child("plain"), _child("runner")
    assert plain == {"loaded": True, "refused": True}  # installed, and loaded by jsonschema when left alone
    assert runner == {"loaded": False, "refused": True}  # left out, and validation is what it was
