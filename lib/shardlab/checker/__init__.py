"""The stage checker: judges a learner's implementation (or the reference) stage by stage.

One module per stage of checks (stage1 .. stage4), `common` for what they share and
`runner` to run them and report. Every expected value comes from NumPy formulas,
coverage arithmetic, the course's PRNG recipe or a replay of the same implementation;
the reference implementation is never the oracle.
"""
