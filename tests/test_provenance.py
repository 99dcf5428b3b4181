"""A file whose functions are the course's own code is named as such, from its source, and graded as such."""

from shardlab.checker.provenance import course_functions
from shardlab.handin import bounded, grade, platforms

FILES = {
    "star": (
        "from shardlab.learner.reference import *\n\ndef initial(seed, data, mesh):\n    return 1\n",
        {
            name: f"shardlab.learner.reference.{name}"
            for name in ("next_batch", "make_step", "transition", "contract", "save", "restore")
        },
    ),
    "names": (
        "from shardlab import initial, next_batch as nb\nimport shardlab.learner.reference as ref\n"
        "next_batch = nb\nmake_step = ref.make_step\ntransition = contract = save = restore = None\n",
        {
            "initial": "shardlab.initial",
            "next_batch": "shardlab.next_batch",
            "make_step": "shardlab.learner.reference.make_step",
        },
    ),
    "wrappers": (
        "import shardlab.core.state\nfrom shardlab.core import checkpoint as ck\n\n"
        "def initial(seed, data, mesh):\n    '''mine'''\n    return shardlab.core.state.initial(seed, data, mesh)\n\n"
        "def save(path, state, contract):\n    return ck.save(path, state, contract)\n\n"
        "def restore(path, contract, mesh):\n    state = ck.restore(path, contract, mesh)\n    return state\n",
        {"initial": "shardlab.core.state.initial", "save": "shardlab.core.checkpoint.save"},
    ),
    "own": (
        "import numpy as np\nfrom shardlab.core.batch import Batch\nfrom shardlab import errors\n\n"
        "def initial(seed, data, mesh):\n    return np.zeros(3)\n",
        {},
    ),
    "star_beside_own_import": ("from shardlab.errors import *\nfrom mine import initial, next_batch\n", {}),
}


def test_the_course_s_own_functions_are_named_from_the_source(tmp_path):
    for name, (text, expected) in FILES.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        assert course_functions(str(path)) == expected, name
    (tmp_path / "broken.py").write_text("def initial(:\n")
    assert course_functions(str(tmp_path / "broken.py")) == {}


def test_a_stage_of_course_code_gets_no_points():
    checks = [{"name": f"c{s}", "stage": s, "passed": True} for s in (1, 2, 3, 4)]
    course = {"initial": "shardlab.learner.reference.initial"}
    outcome = bounded.Outcome(0, "", {"checks": checks, "environment": {"course_functions": course}}, None, 1.0)
    rows = grade.stage_rows(outcome, 60.0)
    assert [r["verdict"] for r in rows] == ["course code", "pass", "pass", "pass"]
    failing = bounded.Outcome(
        0,
        "",
        {"checks": [{**checks[0], "passed": False}] + checks[1:], "environment": {"course_functions": course}},
        None,
        1.0,
    )
    assert grade.stage_rows(failing, 60.0)[0]["verdict"] == "fail"  # a failure is never hidden behind it
    assert rows[0]["passed"] == 0 and "initial is shardlab.learner.reference.initial" in rows[0]["diagnosis"]
    assert platforms.stage_points(rows[0]) == 0 and platforms.stage_points(rows[1]) > 0
