"""One output-folder policy: every command writes only inside OUT and replaces only the files it wrote."""

import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from rig.torture.edges import COMMAND_ARGV, run_command
from shardlab import outdir
from shardlab.course import catalog
from shardlab.course import execute as runner
from shardlab.errors import ConfigError, OutputFolderError
from shardlab.verify import replay


def tree(folder):
    """{relative path: bytes} of every file under `folder` (folders as None)."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            found[os.path.relpath(os.path.join(root, name), folder)] = None
        for name in files:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = open(path, "rb").read()
    return found


def publish(folder, command, files: dict, replace=True):
    with outdir.writing(folder, command, replace) as staging:
        for rel, text in files.items():
            os.makedirs(os.path.dirname(staging / rel), exist_ok=True)
            (staging / rel).write_text(text)


def test_notebook_names_are_names_never_paths(tmp_path):
    before = tree(catalog.NOTEBOOK_DIR)
    for name in ("../../../../../tmp/notebooks/stage1_batches", "/etc/passwd", "stage1_batches.ipynb", ".."):
        with pytest.raises(ConfigError, match="names, not paths"):
            runner.run(tmp_path / "out", seed=17, batch_size=7, notebooks=[name], html=False)
    assert tree(catalog.NOTEBOOK_DIR) == before and not (tmp_path / "out").exists()


def test_a_rerun_keeps_a_persons_notes_by_refusing_the_folder(tmp_path):
    out = tmp_path / "out"
    publish(out, "run", {"a.ipynb": "1", "results/a.json": "{}"})
    (out / "MY_NOTES.md").write_text("notes\n")
    before = tree(out)
    with pytest.raises(OutputFolderError, match=r"MY_NOTES\.md; move them away or choose another output folder"):
        publish(out, "run", {"a.ipynb": "2"})
    assert tree(out) == before


def test_an_edited_output_is_not_ours_any_more(tmp_path):
    out = tmp_path / "out"
    publish(out, "run", {"a.ipynb": "1"})
    (out / "a.ipynb").write_text("a person's edit")
    with pytest.raises(OutputFolderError, match=r"or changed since\): a\.ipynb"):
        publish(out, "run", {"a.ipynb": "2"})
    assert (out / "a.ipynb").read_text() == "a person's edit"


def test_a_rerun_replaces_exactly_its_own_files_and_leaves_other_commands_alone(tmp_path):
    out = tmp_path / "out"
    publish(out, "run", {"a.ipynb": "1", "old/only.txt": "x"})
    publish(out, "torture", {"torture.json": "{}"})
    publish(out, "run", {"a.ipynb": "2", "new.txt": "n"})
    assert (out / "a.ipynb").read_text() == "2" and (out / "new.txt").read_text() == "n"
    assert not (out / "old").exists() and (out / "torture.json").read_text() == "{}"
    assert set(outdir.read_manifest(out)) == {"run", "torture"}
    with pytest.raises(OutputFolderError, match="another shardlab command"):
        publish(out, "run", {"torture.json": "mine now"})
    with pytest.raises(OutputFolderError, match="--replace"):
        publish(out, "run", {"a.ipynb": "3"}, replace=False)
    assert (out / "torture.json").read_text() == "{}" and (out / "a.ipynb").read_text() == "2"


def test_a_failed_run_leaves_the_earlier_files_and_no_staging(tmp_path):
    out = tmp_path / "out"
    publish(out, "run", {"a.ipynb": "1"})
    before = tree(out)
    with pytest.raises(RuntimeError, match="deliberate"):
        with outdir.writing(out, "run") as staging:
            (staging / "a.ipynb").write_text("half")
            raise RuntimeError("deliberate")
    assert tree(out) == before
    with pytest.raises(RuntimeError):
        with outdir.writing(tmp_path / "new", "run"):
            raise RuntimeError("deliberate")
    assert not (tmp_path / "new").exists()


def test_outputs_are_world_readable_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        publish(tmp_path / "out", "run", {"a.txt": "1", "sub/b.txt": "2"})
    finally:
        os.umask(old)
    for rel, mode in (("", 0o755), ("sub", 0o755), ("a.txt", 0o644), ("sub/b.txt", 0o644), (outdir.MANIFEST, 0o644)):
        assert stat.S_IMODE(os.stat(tmp_path / "out" / rel).st_mode) == mode, rel


def test_unusable_folders_are_one_line_errors_naming_the_folder(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for bad, words in ((a_file, "is not a folder"), (a_file / "out", "cannot write to"), ("/proc/self/out", "/proc")):
        with pytest.raises(OutputFolderError) as caught:
            publish(bad, "run", {"a.txt": "1"})
        message = str(caught.value)
        assert "\n" not in message and words in message and "staging" not in message, message


def test_a_symlinked_out_is_refused_and_not_followed(tmp_path):
    real = tmp_path / "real"
    publish(real, "run", {"a.txt": "1"})
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OutputFolderError, match="not a folder"):
        publish(tmp_path / "link", "run", {"a.txt": "2"})
    assert (real / "a.txt").read_text() == "1"


CHILD = """
import sys, time
from shardlab import outdir
with outdir.writing(sys.argv[1], "run") as staging:
    (staging / "partial.txt").write_text("x")
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_staging_is_removed_on_sigterm_and_sigint(tmp_path, sig):
    out = tmp_path / "out"
    publish(out, "run", {"a.txt": "1"})
    before = tree(out)
    # Ctrl-C as a terminal delivers it: a pytest started as a background job (nohup ... &) passes SIGINT on
    # ignored, and Python then installs no handler for it, so the child gets the default disposition back.
    default = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out)], stdout=subprocess.PIPE, text=True, preexec_fn=default
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(sig)
        child.wait(timeout=30)
    finally:
        child.kill()
        child.wait()
    assert child.returncode != 0 and tree(out) == before


def test_a_killed_runs_staging_is_cleared_by_the_next_run(tmp_path):
    out = tmp_path / "out"
    publish(out, "run", {"a.txt": "1"})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = out / f"{outdir.STAGING}{dead.pid}-abc"
    stale.mkdir()
    (stale / "half.txt").write_text("x")
    publish(out, "run", {"a.txt": "2"})
    assert not stale.exists() and (out / "a.txt").read_text() == "2"


def test_two_runs_into_one_folder_do_not_mix(tmp_path):
    out = tmp_path / "out"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(OutputFolderError, match=f"process {child.pid}"):
            publish(out, "run", {"a.txt": "2"})
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("argv", list(COMMAND_ARGV.values()), ids=list(COMMAND_ARGV))
def test_every_command_refuses_a_folder_holding_foreign_files(tmp_path, argv, capsys):
    out = tmp_path / "out"
    (out / "trace" / "plugins" / "profile" / "other").mkdir(parents=True)
    (out / "trace" / "plugins" / "profile" / "other" / "x.xplane.pb").write_text("someone else's trace")
    for name in ("bench.json", "torture.json", "drills.json", "check_report.json", "ledger.json"):
        (out / name).write_text("a file of the same name, not ours")
    before = tree(out)
    started = time.perf_counter()
    assert run_command([*argv, str(out)]) != 0
    assert tree(out) == before
    assert "move them away" in capsys.readouterr().err
    assert time.perf_counter() - started < 60  # refused before any measurement starts


def test_stage3_folder_replaces_only_what_its_own_runs_wrote(tmp_path):
    folder = replay.fresh_folder(tmp_path / "stage3")
    open(os.path.join(folder, "checkpoint.npz"), "w").write("1")
    os.makedirs(os.path.join(folder, "bad"))
    open(os.path.join(folder, "bad", "x.npz"), "w").write("2")
    open(os.path.join(folder, ".tmp-999999-abc.npz"), "w").write("a killed save's temporary")
    folder = replay.fresh_folder(folder)  # not sealed (the run stopped early): its own names are replaced
    assert sorted(os.listdir(folder)) == [outdir.MANIFEST]
    open(os.path.join(folder, "checkpoint.npz"), "w").write("1")
    open(os.path.join(folder, "MY_NOTES.md"), "w").write("notes")
    with pytest.raises(OutputFolderError, match="MY_NOTES.md"):
        replay.fresh_folder(folder)  # a name the notebook never writes: refused, and nothing removed
    assert sorted(os.listdir(folder)) == sorted([outdir.MANIFEST, "checkpoint.npz", "MY_NOTES.md"])
    os.unlink(os.path.join(folder, "MY_NOTES.md"))
    replay.seal(folder)
    open(os.path.join(folder, "checkpoint.npz"), "w").write("edited after the run")
    with pytest.raises(OutputFolderError, match="checkpoint.npz"):
        replay.fresh_folder(folder)  # sealed files are replaced only while they hold the recorded bytes
    open(os.path.join(folder, "checkpoint.npz"), "w").write("1")
    folder = replay.fresh_folder(folder)
    assert sorted(os.listdir(folder)) == [outdir.MANIFEST]


def test_a_folder_without_a_manifest_is_refused_with_what_to_do(tmp_path):
    out = tmp_path / "receipts"
    out.mkdir()
    (out / ".shardlab-receipts").write_text("written by `python -m shardlab run`")
    (out / "stage1_batches.ipynb").write_text("{}")
    with pytest.raises(OutputFolderError, match=r"no shardlab command wrote.*\.shardlab-receipts.*move them away"):
        publish(out, "run", {"a.ipynb": "1"})
    assert sorted(os.listdir(out)) == [".shardlab-receipts", "stage1_batches.ipynb"]


def test_a_manifest_is_read_with_a_bound_and_one_past_it_is_refused(tmp_path, monkeypatch):
    with outdir.writing(tmp_path / "out", "run") as staging:
        (staging / "a.txt").write_text("a")
    manifest = tmp_path / "out" / outdir.MANIFEST
    size = manifest.stat().st_size
    monkeypatch.setattr(outdir, "MANIFEST_BYTES", size)  # exactly the bound: read as before
    assert set(outdir.read_manifest(tmp_path / "out")) == {"run"}
    monkeypatch.setattr(outdir, "MANIFEST_BYTES", size - 1)
    with pytest.raises(OutputFolderError, match="not a shardlab manifest .BoundedReadError."):
        outdir.read_manifest(tmp_path / "out")
