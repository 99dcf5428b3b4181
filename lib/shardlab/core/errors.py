"""The course's exception types: each says what was expected, what was found and what to do.

Errors of the extensions (stage 5, the evidence, the checker, output folders) live in
`shardlab.errors`, which also re-exports these: import from there outside the core.
"""


class ShardlabError(Exception):
    """Base class for every error the course raises on purpose."""


class DeviceSetupError(ShardlabError, RuntimeError):
    """JAX is already running with another device count; only a kernel restart fixes it."""


class DataError(ShardlabError, ValueError):
    """The dataset is unusable: wrong shapes, lengths, dtypes or non-finite values."""


class ConfigError(ShardlabError, ValueError):
    """A run parameter (batch size, device count, learning rate, ...) is invalid."""


class EmptyBatchError(ShardlabError, ValueError):
    """A batch holds no valid observation, so the global mean is undefined."""


class CheckpointError(ShardlabError):
    """Base class for checkpoint refusals; nothing on disk is modified when raised."""


class CheckpointExistsError(CheckpointError, FileExistsError):
    """The checkpoint path is taken; checkpoints are never overwritten."""


class CheckpointWriteError(CheckpointError, OSError):
    """The checkpoint could not be written (folder missing, not a folder, read-only or full); nothing was published."""


class CorruptCheckpointError(CheckpointError, ValueError):
    """The file is not a well-formed shardlab checkpoint (truncated, wrong arrays, bad values)."""


class ContractMismatchError(CheckpointError, ValueError):
    """The checkpoint belongs to another experiment (data or configuration differ)."""


class BoundedReadError(ShardlabError, ValueError):
    """A file was not read: it is not a regular file, or it holds more bytes (`size`) than its reader allows."""

    def __init__(self, message: str, size: int | None = None):
        super().__init__(message)
        self.size = size
