"""kvclaims.vllm_binding: resident claims for stock vLLM 0.32 through its extension points.

Start vLLM with the binding (docs/vllm-binding.md):

    kvclaims serve MODEL --trace trace.ndjson   (vLLM's OpenAI server with the binding)
    vllm.LLM(MODEL, **BindingConfig(trace_path="trace.ndjson").engine_kwargs())

Offloadable claims add the claim connector (`connector`, with `offload_spec` and
`cache_policy`): `BindingConfig(offload=OffloadSettings(cpu_bytes=...)).engine_kwargs()`.
This package holds only what runs inside vLLM; the lanes that drive it (vLLM's scheduler with
fabricated model outputs, `vllm.LLM` end to end on a tiny local model) are in `kvclaims.lab`.

This package imports without vLLM; the vLLM-facing classes (`ClaimScheduler`,
`ClaimAsyncScheduler`, `ClaimArbiter`) are imported on first use and raise
`UnsupportedVllmError` with an install hint when vLLM is missing or unsupported. Depends on
`kvclaims.spec` only.
"""

from __future__ import annotations

from typing import Any

from kvclaims.vllm_binding.config import SCHEDULER_CLS, BindingConfig, ConflictAction, OffloadSettings
from kvclaims.vllm_binding.plugin import (
    SUPPORTED_VLLM_VERSIONS,
    UnsupportedVllmError,
    require_supported_vllm,
)

_LAZY = {
    "ClaimScheduler": "kvclaims.vllm_binding.scheduler",
    "ClaimAsyncScheduler": "kvclaims.vllm_binding.scheduler",
    "ClaimSchedulerMixin": "kvclaims.vllm_binding.scheduler",
    "ClaimArbiter": "kvclaims.vllm_binding.arbiter",
}

__all__ = [
    "SCHEDULER_CLS",
    "SUPPORTED_VLLM_VERSIONS",
    "BindingConfig",
    "ClaimArbiter",
    "ClaimAsyncScheduler",
    "ClaimScheduler",
    "ClaimSchedulerMixin",
    "ConflictAction",
    "OffloadSettings",
    "UnsupportedVllmError",
    "require_supported_vllm",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_supported_vllm()
    import importlib

    return getattr(importlib.import_module(module), name)
