"""The set-up contract: exact pins that agree, a clean tree, devices set before JAX starts."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pins(lines):
    found = {}
    for line in lines:
        line = line.strip().lstrip("-").strip()
        if not line or line.startswith("#") or line.startswith("-e") or "==" not in line:
            continue
        name, version = line.split("==")
        found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


def test_requirements_are_exact_pins_mirrored_by_environment_yml():
    req_lines = (REPO / "requirements-cpu.txt").read_text().splitlines()
    loose = [ln for ln in req_lines if ln.strip() and not ln.startswith("#") and "==" not in ln]
    assert not loose, f"requirements-cpu.txt lines without an exact pin: {loose}"
    env_lines = (REPO / "environment.yml").read_text().splitlines()
    pip_section = env_lines[env_lines.index("  - pip:") + 1 :]
    req, env = pins(req_lines), pins(pip_section)
    assert "jax" in req and "jaxlib" in req and "orbax-checkpoint" in req
    assert req == env, f"pins differ: {set(req.items()) ^ set(env.items())}"
    assert "  - python=3.11" in env_lines


def test_installed_versions_are_the_pinned_ones():
    from importlib.metadata import version

    req = pins((REPO / "requirements-cpu.txt").read_text().splitlines())
    for name in ("jax", "jaxlib", "numpy", "papermill", "nbclient", "orbax-checkpoint", "jupyterlab"):
        assert version(name) == req[name], (
            f"{name}: installed {version(name)}, pinned {req[name]}; run `make clean run`"
        )


def test_code_is_ruff_clean():
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run([str(ruff), "check", "lib", "tests"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_tracked_tree_has_no_build_noise():
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.fail("tests run from a git checkout (a clean clone); `git ls-files` failed: " + listed.stderr)
    noise = [
        p
        for p in listed.stdout.splitlines()
        if re.search(r"(__pycache__|\.pyc$|\.egg-info|\.ipynb_checkpoints|^\.venv/)", p)
    ]
    assert not noise, f"build noise is tracked: {noise}"


def test_no_sys_path_edits_in_notebooks_or_tests():
    for path in (
        list((REPO / "notebooks").glob("*.ipynb"))
        + list((REPO / "notebooks").glob("*.md"))
        + list((REPO / "tests").rglob("*.py"))
    ):
        if path.name == "test_setup.py":
            continue
        text = path.read_text()
        assert not re.search(r"sys\.path\.(insert|append)", text), f"{path.name} edits sys.path"


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # child interpreters importing JAX: make test's, not the inner loop's
def test_device_count_set_before_jax_starts_and_refused_after():
    code = (
        "import shardlab as sl\n"
        "assert len(sl.setup_devices(4)) == 4\n"
        "assert len(sl.setup_devices(4)) == 4  # same count again: harmless\n"
        "try:\n"
        "    sl.setup_devices(2)\n"
        "except sl.errors.DeviceSetupError as e:\n"
        "    print('REFUSED', e)\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "REFUSED" in result.stdout and "restart" in result.stdout


def test_cli_lists_its_commands():
    result = subprocess.run([sys.executable, "-m", "shardlab", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "run" in result.stdout
