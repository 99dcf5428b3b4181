"""Stage 5: several controller processes, one global mesh, Orbax checkpoints, failures on purpose.

One module per concern: `runtime` (start a controller, explicitly or through JAX's cluster
detection), `wait_guard` (a controller's waits: each bounded, each ending in a named error), `shards` (addressable-shard
placement and the transition), `manifest` (the completion manifest), `retention` (which
complete steps to keep), `migration` (the world-size migration contract), `store` (Orbax
CheckpointManager, synchronous or asynchronous), `program` (what every controller runs),
`launcher` (starts a group on loopback), `group_supervisor` (owns a group: detects, tears
down, relaunches), `ledger` (the stitched path and the goodput ledger), `scenarios` and `drills`
(the drills against a single-process control) and `figure`. Nothing here starts JAX on import.
"""
