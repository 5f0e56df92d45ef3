"""kvclaims: resident KV claims as a checkable contract.

Subpackages, in dependency order: `spec` (the contract as types and the lowering judgment),
`statemachine` (executable semantics), `solver` (Z3 model and proofs), `refinement` (trace
checking), `vllm_binding` (stock vLLM 0.32 through its extension points). `cli` sits on top.
"""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`kvclaims.check_trace(path) -> TraceVerdict`, imported on first use so that importing
    kvclaims stays light."""
    if name == "check_trace":
        from kvclaims.refinement.api import check_trace

        return check_trace
    raise AttributeError(f"module 'kvclaims' has no attribute {name!r}")
