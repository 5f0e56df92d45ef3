"""kvclaims.statemachine: the contract as executable semantics, and nothing else.

- `lifecycle`, `requests`: the one pure transition function per claim / per request;
- `ledger`: the claim-keeping a runtime embeds (claims moved only by `lifecycle.step`,
  positions and leading prefix, loss -> harm/lost, deadlines, protection, `ConflictAction`);
- `checkpoint`: the two-key (KV prefix + non-KV state) identity of seed 002;
- `graph`: the lifecycle's transition graph (networkx), reachability and diagrams.

It imports only `kvclaims.spec`; the runtimes (`kvclaims.microruntime`, `kvclaims.vllm_binding`),
the checker (`kvclaims.refinement`) and the solver consume it.
"""
