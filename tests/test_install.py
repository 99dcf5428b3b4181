"""`pip install .` without the Makefile: the wheel holds every module, the notebooks, the templates and the kernel.

The wheel is built from a copy of pyproject.toml, notebooks/ and lib/ (whose course/notebooks links
to notebooks/) in a temporary folder (building in the checkout would leave build/ and *.egg-info
behind), offline, with the venv's pinned setuptools.
"""

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow
KERNEL_JSON = "shardlab-0.1.0.data/data/share/jupyter/kernels/shardlab/kernel.json"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    source = tmp_path_factory.mktemp("source")
    shutil.copy(REPO / "pyproject.toml", source)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(REPO / "lib", source / "lib", symlinks=True, ignore=ignore)  # keeps the notebooks link
    shutil.copytree(REPO / "notebooks", source / "notebooks")
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    result = subprocess.run([*command, "-w", str(out), str(source)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    (built,) = out.glob("shardlab-*.whl")
    return built


def test_the_wheel_holds_every_module_notebook_template_and_the_kernel(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    package = REPO / "lib" / "shardlab"
    wanted = {
        "shardlab/" + p.relative_to(package).as_posix()
        for p in package.rglob("*")
        if p.is_file() and p.suffix in (".py", ".md", ".json") and "__pycache__" not in p.parts
    }
    wanted |= {f"shardlab/course/notebooks/{p.name}" for p in (REPO / "notebooks").iterdir() if p.is_file()}
    assert any(n.endswith(".ipynb") for n in wanted) and any("templates/" in n for n in wanted)
    assert sorted(wanted - names) == []
    assert KERNEL_JSON in names


def test_the_wheel_declares_runtime_dependencies_and_a_test_extra(wheel):
    archive = zipfile.ZipFile(wheel)
    (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    metadata = Parser().parsestr(archive.read(meta).decode())
    requires = metadata.get_all("Requires-Dist")
    runtime = {r.split(">")[0].split("<")[0].split("=")[0].strip() for r in requires if "extra ==" not in r}
    assert {"jax", "jaxlib", "numpy", "orbax-checkpoint", "papermill", "nbconvert", "ipykernel"} <= runtime
    assert "test" in metadata.get_all("Provides-Extra")
    assert any(r.startswith("pytest") and 'extra == "test"' in r for r in requires)
    assert metadata["Requires-Python"] == "<3.12,>=3.11"
