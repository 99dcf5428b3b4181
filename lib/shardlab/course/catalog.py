"""The course's notebooks: their names in running order and where the package keeps them."""

from importlib import resources
from pathlib import Path

NOTEBOOK_DIR = Path(str(resources.files("shardlab.course") / "notebooks"))  # package data, also when not editable
NOTEBOOKS = [
    "stage1_batches",
    "stage2_update",
    "stage3_checkpoint",
    "stage3_resume",
    "stage4_profile",
    "stage4_beyond",  # optional: after the course's four stages
    "stage5_multicontroller",
]
KERNEL = "shardlab"  # the Jupyter kernel `make venv` installs into .venv
