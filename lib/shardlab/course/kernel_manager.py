"""The kernel manager `python -m shardlab run` gives papermill: no interrupt sent to a kernel being shut down.

jupyter_client's `shutdown_kernel` first interrupts the kernel (SIGINT to its process group) and only
then asks it to shut down. After a notebook has run to the end the interrupt has nothing to stop; if it
lands while the kernel is still handling a message (flushing the last cell's output, say), ipykernel
catches it and prints "KeyboardInterrupt caught in kernel" into the run's output, a line that says
nothing about the run. This manager skips the interrupt while shutting down and keeps it otherwise: a
cell that exceeds its timeout is still interrupted first.
"""

from jupyter_client.manager import AsyncKernelManager


class FinishedKernelManager(AsyncKernelManager):
    """AsyncKernelManager whose shutdown does not interrupt the kernel first."""

    async def _async_interrupt_kernel(self) -> None:
        if self.shutting_down:
            return
        await super()._async_interrupt_kernel()
