"""Run configuration: the hyper-parameters a checkpoint contract pins down."""

from dataclasses import asdict, dataclass

from shardlab.core.errors import ConfigError

LEARNING_RATE = 0.03
DECAY = 0.8
NUM_DEVICES = 4
SEED = 17  # the course's default experiment: every command and signature reads these two
BATCH_SIZE = 7
# The course's two fixed fixtures on the 23-row data: stage 3 resumes both in a fresh kernel and faults both.
FIXTURES = {"seed17_batch7": (17, 7), "seed29_batch10": (29, 10)}


@dataclass(frozen=True)
class Config:
    """Seed, batch size, optimiser constants and device count of one experiment."""

    seed: int = SEED
    batch_size: int = BATCH_SIZE
    learning_rate: float = LEARNING_RATE
    decay: float = DECAY
    num_devices: int = NUM_DEVICES

    def __post_init__(self):
        check_batch_size(self.batch_size)
        check_seed(self.seed)
        if not (isinstance(self.num_devices, int) and self.num_devices >= 1):
            raise ConfigError(f"num_devices must be a positive integer, got {self.num_devices!r}")
        if not 0 < float(self.learning_rate) < 10:
            raise ConfigError(f"learning_rate must be in (0, 10), got {self.learning_rate!r}")
        if not 0 <= float(self.decay) < 1:
            raise ConfigError(f"decay (momentum) must be in [0, 1), got {self.decay!r}")

    def as_dict(self) -> dict:
        """Plain-literal view, for contracts and receipts."""
        return asdict(self)


def check_batch_size(batch_size) -> int:
    """Return `batch_size` if it is a positive integer, else raise ConfigError."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}; a batch needs at least one row")
    return batch_size


def check_seed(seed) -> int:
    """Return `seed` if it is an integer in [0, 2**32), else raise ConfigError."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ConfigError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    return seed
