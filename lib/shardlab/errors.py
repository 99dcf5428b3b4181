"""Every shardlab exception type: the course's own (from the core) and those of the extensions."""

from shardlab.core.errors import (  # noqa: F401 (re-exported: one place to import any shardlab error)
    BoundedReadError,
    CheckpointError,
    CheckpointExistsError,
    CheckpointWriteError,
    ConfigError,
    ContractMismatchError,
    CorruptCheckpointError,
    DataError,
    DeviceSetupError,
    EmptyBatchError,
    ShardlabError,
)


class VariantMismatchError(ShardlabError, AssertionError):
    """A timed update variant disagrees with the NumPy update, so nothing is timed."""


class TraceError(ShardlabError, ValueError):
    """A profiler trace lacks an expected annotation, or its XPlane and Perfetto readings disagree."""


class LostProcessError(ShardlabError, RuntimeError):
    """A controller of a multi-controller run stopped responding (killed, crashed or unreachable)."""


class HangError(ShardlabError, RuntimeError):
    """A bounded wait expired while every controller was alive: the group is out of step."""


class SamplerMismatchError(ShardlabError, RuntimeError):
    """Controllers disagree on the host sampler state or the batch of a step."""


class IncompleteCheckpointError(CheckpointError):
    """No checkpoint step carries a valid completion manifest, so none may be restored."""


class LaunchError(ShardlabError, RuntimeError):
    """The launcher could not start, supervise or collect a group of controller processes."""


class RestartBudgetError(ShardlabError, RuntimeError):
    """A supervised group failed more often than its restart budget allows: a crash loop, not bad luck."""


class AsyncSaveError(CheckpointError, RuntimeError):
    """A background checkpoint save failed; reported at the next save or wait, never swallowed."""


class OutputFolderError(ConfigError):
    """An output folder cannot be used: not a folder, not writable, or holding files no command of ours wrote."""


class UsageError(ConfigError):
    """A command line is refused: an unknown option, a missing argument, or a value of the wrong type or range."""


class PageError(ShardlabError, ValueError):
    """An HTML receipt cannot be written completely (a formula the offline renderer cannot draw)."""


class ImplementationError(ShardlabError, ImportError):
    """A learner's implementation file is missing, is not a .py file, or fails to import (file and line named)."""


class PortfolioError(ShardlabError, ValueError):
    """A portfolio cannot be assembled: the run is missing or unfinished, or it ran another implementation."""


class CompatibilityError(ShardlabError, RuntimeError):
    """A private API of a pinned package that shardlab relies on is missing or the installed version differs."""


class CourseCodeError(ShardlabError, PermissionError):
    """A graded file reached the course's own implementation of one of its seven functions (checker/seal.py)."""
