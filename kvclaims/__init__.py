"""kvclaims: resident KV claims as a checkable contract.

Subpackages, in dependency order (DESIGN 1, checked by `tests/test_dependencies.py`): `spec`
(the contract as types and the lowering judgment), `statemachine` (executable semantics),
`microruntime` (a block-level runtime that keeps claims), `solver` (Z3 model and proofs),
`refinement` (trace checking), `vllm_binding` (stock vLLM 0.32 through its extension points),
`lab` (seed cases, lanes, scenarios, fuzzing). `report` and `cli` sit on top.

The API for runtime authors is re-exported here, each name imported on first use so that
`import kvclaims` loads neither pydantic nor Z3, Hypothesis or vLLM:

    import kvclaims
    verdict = kvclaims.check_trace("run.ndjson")          # -> kvclaims.TraceVerdict
    descriptor = kvclaims.load_descriptor("runtime.yaml")
    label = kvclaims.lower(descriptor, kvclaims.ProtectionMode.offloadable, kvclaims.AdapterDepth.none)

`kvclaims.testing` (imports Hypothesis) holds the state machines, strategies, `TraceBuilder` and
`assert_refines`; the pytest plugin (`kvclaims.refinement.pytest_plugin`) offers `assert_refines`
as a fixture.
"""

import importlib

__version__ = "0.1.0"


_EXPORTS: dict[str, str] = {
    "check_trace": "kvclaims.refinement.api",
    "check_bytes": "kvclaims.refinement.api",
    "assert_refines": "kvclaims.refinement.assertions",
    "render_verdict": "kvclaims.refinement.rendering",
    "FORMATS": "kvclaims.refinement.sources",
    "Budget": "kvclaims.refinement.checker",
    "TraceVerdict": "kvclaims.refinement.verdict",
    "Outcome": "kvclaims.refinement.verdict",
    "ErrorClass": "kvclaims.refinement.verdict",
    "Counterexample": "kvclaims.refinement.verdict",
    "PrefixEvent": "kvclaims.refinement.verdict",
    "Finding": "kvclaims.refinement.verdict",
    "Witness": "kvclaims.refinement.verdict",
    "lower": "kvclaims.spec.lowering",
    "Verdict": "kvclaims.spec.verdict",
    "load_descriptor": "kvclaims.spec.descriptor",
    "load_descriptors": "kvclaims.spec.descriptor",
    "Descriptor": "kvclaims.spec.descriptor",
    "ProtectionMode": "kvclaims.spec.vocabulary",
    "AdapterDepth": "kvclaims.spec.vocabulary",
    "Label": "kvclaims.spec.vocabulary",
    "Obligation": "kvclaims.spec.vocabulary",
    "InputError": "kvclaims.spec.errors",
}
"""Each public name and the module that defines it (imported on first use)."""

__all__ = ["__version__", *_EXPORTS]

_SUBMODULES = ("testing",)
"""Submodules reachable as attributes without an import statement (not in `__all__`: a star
import must not pull in Hypothesis)."""


def __getattr__(name: str) -> object:
    """The public names of `_EXPORTS` and the `testing` submodule, imported on first use so
    that importing kvclaims stays light."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"kvclaims.{name}")
    raise AttributeError(f"module 'kvclaims' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})
