"""The stage checker: judges a learner's implementation (or the reference) stage by stage.

One module per stage of checks (stage1 .. stage4), `common` for what they share,
`sampler_diagnosis` and `formulas` for reading causes from observed ids and numbers, `interrupt`
for saves stopped mid-way, `cli` to run them and report, `here` to run the same check
from a notebook cell, `compile_cache` for the compiled programs kept between runs and `reuse` for
the passed verdicts kept while nothing they depend on changes. Every expected value comes from
NumPy formulas, coverage arithmetic, the course's PRNG recipe or a replay of the same
implementation; the reference implementation is never the oracle.
"""


def check_here(implementation: str = "reference", stage=1, only: bool = True) -> dict:
    """See shardlab.checker.here.check_here (imported lazily: importing the checker must not start JAX)."""
    from shardlab.checker.here import check_here as run

    return run(implementation, stage, only)
