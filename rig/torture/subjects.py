"""The checkpoints under torture: states from a real training run and the contract they belong to."""

import shardlab as sl
from shardlab.core.config import BATCH_SIZE, SEED


def experiment(seed: int = SEED, batch_size: int = BATCH_SIZE) -> tuple:
    """(data, config, contract) of the teaching experiment every category checkpoints."""
    data = sl.teaching_fixture()
    config = sl.Config(seed=seed, batch_size=batch_size)
    return data, config, sl.contract(data, config)


def trajectory(count: int, mesh, seed: int = SEED, batch_size: int = BATCH_SIZE) -> list[dict]:
    """Host copies of the states after 1..count real transitions (weights differ at every step)."""
    data, config, _ = experiment(seed, batch_size)
    step = sl.make_step(mesh, config.learning_rate, config.decay)
    state = sl.initial(seed, data, mesh)
    states = []
    for _ in range(count):
        state, _, _ = sl.transition(state, data, batch_size, step, mesh)
        states.append(sl.host_copy(state))
    return states
