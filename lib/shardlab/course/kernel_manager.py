"""The kernel manager `python -m shardlab run` gives papermill: its own environment, and no interrupt at shutdown.

jupyter_client's `shutdown_kernel` first interrupts the kernel (SIGINT to its process group) and only
then asks it to shut down. After a notebook has run to the end the interrupt has nothing to stop; if it
lands while the kernel is still handling a message (flushing the last cell's output, say), ipykernel
catches it and prints "KeyboardInterrupt caught in kernel" into the run's output, a line that says
nothing about the run. This manager skips the interrupt while shutting down and keeps it otherwise: a
cell that exceeds its timeout is still interrupted first.

`environment` and `folder` (set through papermill's traitlets config) are the kernel's whole
environment and its working folder, so two kernels started at once from two threads of one runner
can each have their own without touching the runner's `os.environ` or working folder (papermill's
own `cwd=` changes the working folder of the whole runner process while a notebook runs).

Over the `ipc` transport each kernel's sockets get a name of their own in Jupyter's runtime folder:
jupyter_client's default names them `kernel-ipc-N` in the runner's working folder, the first N free,
which two kernels starting at once could both pick.
"""

import os
import uuid

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.paths import jupyter_runtime_dir
from traitlets import Dict, Unicode, default


class FinishedKernelManager(AsyncKernelManager):
    """AsyncKernelManager whose shutdown does not interrupt the kernel first and whose environment is given."""

    environment = Dict(default_value=None, allow_none=True, help="the kernel's environment (None: the runner's)")
    environment.tag(config=True)
    folder = Unicode(default_value=None, allow_none=True, help="the kernel's working folder (None: the runner's)")
    folder.tag(config=True)

    @default("ip")
    def _unique_ip(self) -> str:
        if self.transport != "ipc":
            return super()._ip_default()
        os.makedirs(jupyter_runtime_dir(), exist_ok=True)
        return os.path.join(jupyter_runtime_dir(), f"shardlab-{uuid.uuid4().hex[:16]}-ipc")

    async def _async_pre_start_kernel(self, **kw):
        if self.environment is not None:
            kw.setdefault("env", dict(self.environment))
        if self.folder is not None:
            kw.setdefault("cwd", self.folder)
        return await super()._async_pre_start_kernel(**kw)

    async def _async_interrupt_kernel(self) -> None:
        if self.shutting_down:
            return
        await super()._async_interrupt_kernel()
