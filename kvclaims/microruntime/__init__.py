"""kvclaims.microruntime: the MicroRuntime, a block-level KV pool that keeps resident claims.

- `pool`: blocks, reference counts, prefix hashes, the LRU free queue (vLLM's order), a host tier;
- `runtime`, `arbiter`, `policies`: claims on that pool, the active/resident arbiter and the
  eviction/conflict policies;
- `inputs`, `workload`: the claim and request specifications it runs, a long generated workload;
- `tracing`, `replay`: where its trace v1 events go, and the lifecycle replay that checks them;
- `testing`: Hypothesis state machines for fuzzing a runtime (import it explicitly: it loads
  Hypothesis).

Its seed scenarios live in `kvclaims.lab`.
"""
