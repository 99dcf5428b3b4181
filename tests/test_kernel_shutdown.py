"""The runner's kernels shut down without an interrupt: no stray "KeyboardInterrupt caught in kernel" line."""

import signal

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from shardlab.course import execute
from shardlab.course.catalog import KERNEL
from shardlab.course.kernel_manager import FinishedKernelManager


@pytest.mark.parametrize("shutting_down, sent", [(True, 0), (False, 1)])
def test_the_interrupt_is_skipped_only_while_shutting_down(monkeypatch, shutting_down, sent):
    calls = []

    async def interrupt(self):
        calls.append(self)

    monkeypatch.setattr(KernelManager, "_async_interrupt_kernel", interrupt)
    manager = FinishedKernelManager()
    manager.shutting_down = shutting_down
    import asyncio

    asyncio.run(manager._async_interrupt_kernel())
    assert len(calls) == sent  # a cell timeout (not shutting down) still interrupts the kernel


@pytest.mark.notebooks  # starts a kernel
@pytest.mark.parametrize("runner_config", [True, False])
def test_a_papermill_run_sends_the_kernel_no_sigint(monkeypatch, tmp_path, runner_config):
    """A real kernel through the runner's papermill configuration: started, run, shut down, never SIGINT.

    The control (papermill's default manager) shows the interrupt the runner's manager leaves out.
    """
    import papermill
    from traitlets.config import Config

    signals, managers = [], []
    original = LocalProvisioner.send_signal

    async def record(self, signum):
        signals.append(signum)
        return await original(self, signum)

    monkeypatch.setattr(LocalProvisioner, "send_signal", record)
    started = FinishedKernelManager._async_pre_start_kernel

    async def spy(self, **kw):
        managers.append(type(self))
        return await started(self, **kw)

    monkeypatch.setattr(FinishedKernelManager, "_async_pre_start_kernel", spy)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1 + 1\nprint(x)")])
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python (shardlab)", "language": "python"}
    nbformat.write(nb, tmp_path / "tiny.ipynb")
    papermill.execute_notebook(
        str(tmp_path / "tiny.ipynb"),
        str(tmp_path / "out.ipynb"),
        kernel_name=KERNEL,
        cwd=str(tmp_path),
        progress_bar=False,
        config=Config(execute.LOCAL_KERNEL if runner_config else {}),
    )
    if runner_config:
        assert managers == [FinishedKernelManager], "papermill did not use the runner's kernel manager"
        assert signal.SIGINT not in signals
    else:
        assert signal.SIGINT in signals  # jupyter_client's shutdown interrupts first
    assert nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[0].outputs[0]["text"].strip() == "2"
