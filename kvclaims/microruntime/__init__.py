"""kvclaims.microruntime: the MicroRuntime, a block-level KV pool that keeps resident claims.

- `pool`: blocks, reference counts, prefix hashes, the LRU free queue (vLLM's order), a host tier;
- `runtime`, `arbiter`, `policies`: claims on that pool, the active/resident arbiter and the
  eviction/conflict policies;
- `inputs`, `workload`: the claim and request specifications it runs, a long generated workload;
- `tracing`: where its trace v1 events go.

It imports only `spec` and `statemachine`. What checks its traces lives in `kvclaims.lab`,
which may import the refinement checker: the seed scenarios (`lab.micro_scenarios`) and the
Hypothesis state machines that fuzz it (`lab.micro_fuzzing`, exported by `kvclaims.testing`).
"""
