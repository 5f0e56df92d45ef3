"""kvclaims.statemachine: the claim lifecycle as executable semantics.

- `lifecycle`, `requests`: the one pure transition function per claim / per request;
- `graph`: the lifecycle's transition graph (networkx), reachability and diagrams;
- `pool`, `runtime`, `arbiter`, `policies`, `checkpoint`: the MicroRuntime, a block-level KV
  pool with resident claims, an active/resident arbiter and two-key checkpoints;
- `tracing`, `replay`: where its trace v1 events go, and the lifecycle replay that checks them;
- `scenarios`, `scenario_file`, `workload`: seed scenarios, user scenario files, a long
  generated workload;
- `testing`: Hypothesis state machines for fuzzing a runtime (import it explicitly: it loads
  Hypothesis).
"""
