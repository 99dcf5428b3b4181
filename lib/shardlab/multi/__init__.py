"""Stage 5: several controller processes, one global mesh, Orbax checkpoints and crash drills.

One module per concern: `runtime` (start a controller), `guard` (bounded waits that end in
named errors), `shards` (addressable-shard placement and the transition), `manifest`
(the completion manifest), `migration` (the world-size migration contract), `store`
(Orbax CheckpointManager), `program` (what every controller runs), `launcher` (starts a
group on loopback) and `drills` (the four crash drills against a single-process control).
Nothing here starts JAX on import.
"""
