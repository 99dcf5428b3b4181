"""Stage 5: several controller processes, one global mesh, Orbax checkpoints, failures on purpose.

One module per concern: `runtime` (start a controller, explicitly or through JAX's cluster
detection), `wait_guard` (a controller's waits: each bounded, each ending in a named error), `shards` (addressable-shard
placement and the transition), `manifest` (the completion manifest), `retention` (which
complete steps to keep), `migration` (the world-size migration contract), `store` (Orbax
CheckpointManager, synchronous or asynchronous), `cache` (the compilation cache a series of groups
shares), `program` (what every controller runs), `launcher` (starts a group on loopback),
`group_supervisor` (owns a group: detects, tears down, relaunches) and `supervise` (its command
line), `ledger` (the stitched path and the goodput ledger), `control` (the uninterrupted
single-process control), `scenarios` and `drills` (the drills against that control, one `rows`
shape per drills.json row), the `runbook` the drills prove, `phases` (each controller's step
phases as spreads) and `figure`. Nothing here starts JAX on import.
"""
