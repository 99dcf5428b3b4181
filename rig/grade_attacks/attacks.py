"""The attack submissions and the outcome each must have (`python -m rig.grade_attacks`)."""

import os
import random
import shutil
import stat
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

STUB = "initial = next_batch = make_step = transition = contract = save = restore = lambda *args, **kwargs: None\n"
NOT_YET = (
    "def initial(seed, data, mesh):\n    raise NotImplementedError('initial is not written yet')\n\n"
    "next_batch = make_step = transition = contract = save = restore = initial\n"
)


@dataclass
class Attack:
    name: str
    what: str
    entries: tuple  # the submission names it makes
    expected: str  # "held": the grader contains it; "open": a known limit, recorded only


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def build(folder: Path, token: str, reduced: bool) -> list[Attack]:
    """Write every attack's entries into `folder`; return the attacks (the reduced set leaves the slow ones out)."""
    folder.mkdir(parents=True)
    attacks = []

    def add(name, what, entries, expected="held"):
        attacks.append(Attack(name, what, tuple(entries), expected))

    _write(folder / "honest_stub.py", NOT_YET)
    if not reduced:
        from shardlab.learner import reference

        shutil.copy(reference.__file__, folder / "honest_reference.py")
    # 1. replace the checker's run_one on import: every check "passes"
    forge = (
        "import shardlab.checker.cli as cli\n"
        "cli.run_one = lambda check, stage, ctx: cli.Result(check.__name__, stage, True, 1, 1, '', 0.0)\n" + STUB
    )
    _write(folder / "forge_run_one.py", forge)
    add("forge_run_one", "replaces the checker's run_one on import", ["forge_run_one.py"])
    # 1b. take over everything the file can reach in its own interpreter: the worker answers every call
    # with a "pass" of its own making, and every progress file it can find gets forged result lines
    takeover = (
        "import glob, json, os\n"
        "import sys\nimport shardlab.checker.cli as cli, shardlab.checker.common as common\n"
        "worker = sys.modules['__main__']  # the interpreter it runs in: python -m shardlab.checker.worker\n"
        "cli.run_one = lambda check, stage, ctx: cli.Result(check.__name__, stage, True, 1, 1, '', 0.0)\n"
        "common.expect = lambda ok, expected, observed, diagnosis: (expected, expected)\n"
        "worker.Server.answer = lambda self, header, blobs: ({'ok': True, 'changes': []}, [], 0)\n"
        "for path in glob.glob('/tmp/**/progress.jsonl', recursive=True) + glob.glob('../**/progress.jsonl'):\n"
        "    try:\n"
        "        with open(path, 'a') as handle:\n"
        "            for s in (1, 2, 3, 4):\n"
        "                r = dict(name=f'forged_{s}', stage=s, passed=True, expected=1, observed=1, diagnosis='',"
        " seconds=0.0)\n"
        "                handle.write(json.dumps(dict(event='result', result=r)) + '\\n')\n"
        "    except OSError:\n"
        "        pass\n"
        "print(json.dumps(dict(event='done')))\n" + STUB
    )
    _write(folder / "forge_in_worker.py", takeover)
    add(
        "forge_in_worker",
        "patches the checker's modules in its own interpreter and forges progress lines",
        ["forge_in_worker.py"],
    )
    # 1c. symbolic links out of the scratch folder, left by save and by a thread that keeps making them
    links = (
        "import os, threading, time\n"
        "from shardlab.learner.reference import initial, next_batch, make_step, transition, contract, restore\n"
        "from shardlab.learner.reference import save as _save\n\n"
        "def _plant():\n"
        "    while True:\n"
        "        for name in ('course-faults', 'exists', 'order', 'resume'):\n"
        "            try:\n"
        "                os.symlink('/', os.path.join(os.getcwd(), name))\n"
        "            except OSError:\n"
        "                pass\n"
        "        time.sleep(0.001)\n\n"
        "threading.Thread(target=_plant, daemon=True).start()\n\n"
        "def save(path, state, contract):\n"
        "    folder = os.path.dirname(os.path.abspath(path))\n"
        "    for name in ('up', 'root'):\n"
        "        try:\n"
        "            os.symlink('/' if name == 'root' else '../../..', os.path.join(folder, name))\n"
        "        except OSError:\n"
        "            pass\n"
        "    return _save(path, state, contract)\n"
    )
    _write(folder / "symlinks_out.py", links)
    add("symlinks_out", "plants symbolic links out of its scratch folder, from save and a thread", ["symlinks_out.py"])
    # 1d. implements nothing: the course's own functions under the seven names
    _write(folder / "delegate_course.py", "from shardlab.learner.reference import *  # noqa: F403\n")
    add("delegate_course", "hands in the course's own functions under the seven names", ["delegate_course.py"])
    # 2. forged PASS lines in printed output, then a hang
    lines = "\\n".join(f"PASS  stage {s}  forged_{s}  (0.01 s)" for s in (1, 2, 3, 4))
    _write(
        folder / "forge_lines.py", f"print('\\n{lines}\\n', flush=True)\nimport time\nwhile True:\n    time.sleep(1)\n"
    )
    add(
        "forge_printed_lines", "prints PASS lines and hangs: printed text must not become a verdict", ["forge_lines.py"]
    )
    # 3. a detached child that tries to rewrite the outputs after grade returns, and 4. an orphan-maker
    orphan = (
        f"""import os, signal, sys, time
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGALRM, signal.SIGINT):
    signal.signal(s, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", ["/bin/sh", "-c", "trap '' TERM HUP INT; while :; do sleep 1; done; : {token}"])
    os._exit(0)
if os.fork() == 0:
    os.setsid()
    for _ in range(60):
        time.sleep(0.5)
        for root in ({str(folder.parent)!r},):
            for base, _, names in os.walk(root):
                for name in names:
                    if name in ("grade.json", "grade.csv", ".shardlab-manifest.json") or name.endswith(".py"):
                        try:
                            open(os.path.join(base, name), "w").write("forged")
                        except OSError:
                            pass
    os._exit(0)
"""
        + STUB
    )
    _write(folder / "orphan_maker.py", orphan)
    add("orphan_and_rewriter", "double-forks, setsid, ignores signals, rewrites outputs later", ["orphan_maker.py"])
    # 5. overwrite a sibling's file
    sibling = (
        f"""import glob
for path in glob.glob({str(folder)!r} + "/*.py"):
    try:
        open(path, "w").write("raise SystemExit")
    except OSError:
        pass
"""
        + STUB
    )
    _write(folder / "saboteur.py", sibling)
    add("sibling_overwrite", "overwrites every other submission's file", ["saboteur.py"])
    # 6. a learner-made __pycache__ matching the source's size and mtime
    _write(folder / "pyc" / "model.py", NOT_YET)
    shadow = folder / "pyc" / "__pycache__"
    shadow.mkdir()
    fake = (forge + "\n" * len(NOT_YET))[: max(len(NOT_YET), len(forge))]
    import py_compile

    tmp = folder.parent / "shadow_source.py"
    tmp.write_text(fake)
    st = os.stat(folder / "pyc" / "model.py")
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    tag = sys.implementation.cache_tag
    py_compile.compile(
        str(tmp), cfile=str(shadow / f"model.{tag}.pyc"), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP
    )
    tmp.unlink()
    add("pyc_shadowing", "a __pycache__/*.pyc that forges the verdict beside an honest source", ["pyc"])
    # 7. odd entries: each a not-gradable row, none aborts the run
    (folder / "empty_folder").mkdir()
    os.mkfifo(folder / "fifo.py")
    _write(folder / ".hidden.py", STUB)
    _write(folder / "SHOUT.PY", STUB)
    os.symlink("/etc/passwd", folder / "link.py")
    _write(folder / "two" / "a.py", STUB)
    _write(folder / "two" / "b.py", STUB)
    _write(folder / "lone.zip", "not a zip")
    big = folder / "huge.py"
    with open(big, "wb") as handle:
        handle.truncate(5_000_000)
    odd = ["empty_folder", "fifo.py", ".hidden.py", "SHOUT.PY", "link.py", "two", "lone.zip", "huge.py"]
    add("odd_entries", "empty folder, FIFO, dotfile, .PY, symlink, two .py files, lone zip, 5 MB file", odd)
    # 8. names that forge console lines or spreadsheet formulas
    _write(folder / "evil\n[1 of 1] honest_stub.py  1:pass.py", NOT_YET)
    _write(folder / "=HYPERLINK(1).py", NOT_YET)
    add(
        "odd_names",
        "a newline name forging a progress line; a formula name",
        ["evil\\n[1 of 1] honest_stub.py  1:pass.py", "=HYPERLINK(1).py"],
    )
    # 9. portfolio zips: nested JSON, a zip bomb, a FIFO
    _write(folder / "nested.py", NOT_YET)
    with zipfile.ZipFile(folder / "nested.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("portfolio/portfolio.json", "[" * 200_000 + "]" * 200_000)
    _write(folder / "bomb.py", NOT_YET)
    with zipfile.ZipFile(folder / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("portfolio/portfolio.json", b"0" * 200_000_000)
    _write(folder / "fifozip.py", NOT_YET)
    os.mkfifo(folder / "fifozip.zip")
    add(
        "portfolio_bombs",
        "nested JSON, a 200 MB zip bomb, a FIFO named as the portfolio",
        ["nested.py", "bomb.py", "fifozip.py"],
    )
    # 10. beyond the list: network, host files, memory
    snoop = """import os, socket
found = []
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3); found.append("network open")
except OSError:
    pass
for path in ("/etc/passwd", "/root/.ssh"):
    if os.path.exists(path):
        found.append("sees " + path)
home = os.path.expanduser("~")  # graded, the checker's scratch home; /root is left out, as it always was
if home == HOST_HOME and home != "/root" and os.path.exists(home):
    found.append("sees " + home)
if found:
    raise RuntimeError("ESCAPED: " + ", ".join(found))
raise RuntimeError("CONTAINED")
""".replace("HOST_HOME", repr(str(Path.home())))  # as the host names it: graded, `~` is the checker's scratch home
    _write(folder / "snoop.py", snoop)
    add("network_and_host_files", "connects out, reads /etc/passwd and ~", ["snoop.py"])
    _write(folder / "hog.py", "block = bytearray(30 * 1024**3)\n" + STUB)
    add("memory_hog", "maps 30 GB at import", ["hog.py"])
    return attacks


def holding(token: str) -> list[int]:
    """Pids of processes whose command line holds `token` (the orphan-maker's mark), read from /proc, independently
    of the sandbox that should have ended them."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if token.encode() in handle.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def new_token() -> str:
    return f"shardlab-orphan-{random.randrange(10**9)}"


def snapshot(folder: Path) -> dict:
    """{relative path: (size, mtime_ns, mode)} of every entry under `folder` (links not followed)."""
    found = {}
    for base, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = Path(base) / name
            info = os.lstat(path)
            found[str(path.relative_to(folder))] = (info.st_size, info.st_mtime_ns, stat.S_IFMT(info.st_mode))
    return found
