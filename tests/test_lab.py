"""JupyterLab is tested, not assumed: the venv's server serves /lab, offers the shardlab kernel
and runs stage 1's parameters and set-up cells through a kernel websocket, seeing four devices."""

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import nbformat
import psutil
import pytest
import websocket

from shardlab.course import catalog, workspace

pytestmark = pytest.mark.long  # a JupyterLab server and its kernel, run whole: make test-long's

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = "stage1_batches.ipynb"
START_TIMEOUT = 60  # seconds for the server to answer at all (a loaded 2-core machine is slow)
CELL_TIMEOUT = 120  # seconds for one cell to finish through the kernel
STOP_TIMEOUT = 15  # seconds for a graceful shutdown before SIGKILL


def padding_line(devices: int = 4) -> str:
    """Stage 1's printed line on padding, from arithmetic: a batch of 7 rows and one of 1 row, each padded to
    the smallest multiple of the device count and cut into equal blocks filled in slot order."""

    def cut(rows):
        slots = -(-rows // devices) * devices
        block = slots // devices
        return slots, [min(block, max(0, rows - d * block)) for d in range(devices)]

    (seven_slots, seven), (one_slots, one) = cut(7), cut(1)
    return f"7 rows -> {seven_slots} slots, valid rows per device {seven}; 1 row -> {one_slots} slots, {one}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Lab:
    """A running `jupyter lab` and a token-authenticated way to call its REST API."""

    def __init__(self, port: int, token: str):
        self.base, self.token = f"http://127.0.0.1:{port}", token

    def request(self, method: str, path: str, payload=None) -> tuple[int, bytes]:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"token {self.token}")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def json(self, method: str, path: str, payload=None):
        status, body = self.request(method, path, payload)
        assert status in (200, 201), f"{method} {path} -> {status}: {body[:300]!r}"
        return json.loads(body)


def log_tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


def wait_until_up(lab: Lab, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"jupyter lab exited with {proc.returncode}:\n{log_tail(log)}")
        try:
            if lab.request("GET", "/api/status")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"jupyter lab did not answer within {START_TIMEOUT} s:\n{log_tail(log)}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server (it shuts its kernels down), then SIGKILL it and any child still alive."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
    _, alive = psutil.wait_procs(children, timeout=STOP_TIMEOUT)
    for child in alive:
        child.kill()


@pytest.fixture
def lab(tmp_path):
    workspace_dir = tmp_path / "workspace"  # as `make lab` does: the learner's copy, never the course sources
    assert set(workspace.prepare(workspace_dir).values()) == {"copied"}
    port, token = free_port(), secrets.token_hex(24)
    jupyter = Path(sys.executable).parent / "jupyter"
    # as `make lab` starts it: no MPLBACKEND, and no JAX_PLATFORMS (conftest's setup_devices set it here)
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "JAX_PLATFORMS")}
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")  # connection files stay in the test's folder
    command = [
        str(jupyter),
        "lab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--notebook-dir={workspace_dir}",
    ]
    if os.getuid() == 0:
        command.append("--allow-root")
    log = tmp_path / "lab.log"
    with open(log, "w") as handle:
        proc = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        server = Lab(port, token)
        wait_until_up(server, proc, log)
        yield server
    finally:
        stop(proc)


def shell_message(msg_type: str, content: dict, session: str) -> dict:
    header = {
        "msg_id": uuid.uuid4().hex,
        "msg_type": msg_type,
        "session": session,
        "username": "test",
        "version": "5.3",
    }
    return {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}


def run_code(ws, code: str, session: str) -> dict:
    """Execute `code`; return its reply status, text output and execute_result, or fail on error/timeout."""
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False}
    msg = shell_message("execute_request", content, session)
    ws.send(json.dumps(msg))
    found = {"reply": None, "idle": False, "stdout": "", "result": None, "error": None}
    deadline = time.monotonic() + CELL_TIMEOUT
    while not (found["reply"] and found["idle"]):
        if time.monotonic() > deadline:
            pytest.fail(f"no reply within {CELL_TIMEOUT} s for:\n{code}")
        reply = json.loads(ws.recv())
        if reply.get("parent_header", {}).get("msg_id") != msg["header"]["msg_id"]:
            continue
        kind, body = reply["msg_type"], reply["content"]
        if kind == "execute_reply":
            found["reply"] = body["status"]
        elif kind == "status" and body.get("execution_state") == "idle":
            found["idle"] = True
        elif kind == "stream":
            found["stdout"] += body.get("text", "")
        elif kind == "execute_result":
            found["result"] = body["data"].get("text/plain")
        elif kind == "error":
            found["error"] = f"{body['ename']}: {body['evalue']}"
    assert found["reply"] == "ok" and found["error"] is None, f"{found}\nfor code:\n{code}"
    return found


def test_lab_serves_and_its_kernel_sees_four_devices(lab):
    status, _ = lab.request("GET", "/lab")
    assert status == 200
    specs = lab.json("GET", "/api/kernelspecs")["kernelspecs"]
    assert "shardlab" in specs and specs["shardlab"]["spec"]["display_name"] == "Python (shardlab)"

    payload = {"path": NOTEBOOK, "name": NOTEBOOK, "type": "notebook", "kernel": {"name": "shardlab"}}
    session = lab.json("POST", "/api/sessions", payload)
    kernel = session["kernel"]
    assert kernel["name"] == "shardlab"
    nb = nbformat.read(catalog.NOTEBOOK_DIR / NOTEBOOK, as_version=4)
    cells = {tag: [c.source for c in nb.cells if tag in c.metadata.get("tags", [])] for tag in ("parameters", "setup")}
    assert len(cells["parameters"]) == 1 and len(cells["setup"]) == 1

    url = f"ws://127.0.0.1:{lab.base.rsplit(':', 1)[1]}/api/kernels/{kernel['id']}/channels"
    client = uuid.uuid4().hex
    ws = websocket.create_connection(
        f"{url}?session_id={client}", header=[f"Authorization: token {lab.token}"], timeout=CELL_TIMEOUT
    )
    try:
        run_code(ws, cells["parameters"][0], client)
        run_code(ws, cells["setup"][0], client)
        found = run_code(ws, "import jax\nlen(jax.devices())", client)
        assert found["result"] == "4"
        found = run_code(ws, "print(impl.__name__, dict(mesh.shape))", client)
        assert "shardlab.learner.reference" in found["stdout"] and "'data': 4" in found["stdout"]
    finally:
        ws.close()
        lab.request("DELETE", f"/api/sessions/{session['id']}")


def test_saving_in_lab_changes_the_workspace_copy_not_the_course(lab):
    course = {p.name: p.read_bytes() for p in catalog.NOTEBOOK_DIR.iterdir() if p.is_file()}
    model = lab.json("GET", f"/api/contents/{NOTEBOOK}?content=1")
    first = next(c for c in model["content"]["cells"] if c["cell_type"] == "code")
    first["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "a learner's output\n"}]
    first["execution_count"] = 1
    lab.json("PUT", f"/api/contents/{NOTEBOOK}", {"type": "notebook", "format": "json", "content": model["content"]})
    saved = lab.json("GET", f"/api/contents/{NOTEBOOK}?content=1")
    assert any(c.get("outputs") for c in saved["content"]["cells"]), "the save reached the workspace copy"
    assert {p.name: p.read_bytes() for p in catalog.NOTEBOOK_DIR.iterdir() if p.is_file()} == course
