"""The course's notebooks: their names in running order and where the package keeps them."""

from importlib import resources
from pathlib import Path

NOTEBOOK_DIR = Path(str(resources.files("shardlab.course") / "notebooks"))  # package data, also when not editable
NOTEBOOKS = [
    "stage1_batches",
    "stage2_update",
    "stage3a_checkpoint",
    "stage3b_resume",
    "stage3c_orbax_lesson",
    "stage4a_profile",
    "stage4b_beyond",  # optional: after the course's four stages
    "stage5a_protocol",
    "stage5b_scaling",  # reads the drills.json stage5a_protocol wrote into the same folder
]
OPTIONAL = ("stage4b_beyond",)  # a learner may leave these out: the portfolio asks for nothing of them
# Saved in one kernel, continued in another: `make run` runs this pair again for every fixture of
# core.config.FIXTURES other than the run's own, into FIXTURE_DIR/<fixture>/ (same implementation).
FRESH_KERNEL_PAIR = ("stage3a_checkpoint", "stage3b_resume")
FIXTURE_DIR = "fixtures"
# The notebooks that time nothing: `make run` runs them beside the other fixtures' resume pair (two kernels at
# once on two cores); every later notebook waits for that pair to finish, so its timings see a quiet machine.
BESIDE_FIXTURES = ("stage1_batches", "stage2_update", "stage3a_checkpoint", "stage3b_resume", "stage3c_orbax_lesson")
# Of those, the ones `make run` executes in the second lane itself, before the other fixtures' pair, so the two
# lanes take about as long (stage 2 reads no other notebook's files; the rest stay in the course's order).
SECOND_LANE = ("stage2_update",)
KERNEL = "shardlab"  # the Jupyter kernel `make venv` installs into .venv
