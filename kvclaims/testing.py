"""Everything a runtime author's test suite needs from kvclaims, in one namespace.

    from kvclaims.testing import MicroRuntimeMachine, TraceBuilder, assert_refines, claim_specs

- Assertions: `assert_refines(trace)` passes an accepted trace and fails with the rendered
  counterexample otherwise (also a pytest fixture of the same name, see
  `kvclaims.refinement.pytest_plugin`); `render_verdict` is the text it fails with.
- Traces: `TraceBuilder` writes trace v1 by hand; `generate_valid_trace` writes long valid ones.
- State machines (Hypothesis `RuleBasedStateMachine`s): `MicroRuntimeMachine` fuzzes a
  MicroRuntime against the contract's invariants (subclass it with your `runtime_class` or
  `policy`; `fresh_machine`, `run_machine`, `fuzz` run it, `Coverage` is what it reached,
  `InvariantBroken` what it raises); `SchedulerFuzz` drives vLLM's real scheduler with the
  binding (needs vLLM; imported on first use).
- Strategies: `claim_specs`, `request_specs` (inputs a MicroRuntime accepts) and
  `valid_traces` (trace v1 bytes the checker accepts).

Importing this module imports Hypothesis; `import kvclaims` does not import this module.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

from hypothesis import strategies as st

from kvclaims.lab.micro_fuzzing import (
    OBJECTS,
    Coverage,
    FuzzReport,
    InvariantBroken,
    MicroRuntimeMachine,
    fresh_machine,
    fuzz,
    run_machine,
)
from kvclaims.microruntime.inputs import ClaimSpec, RequestKind, RequestSpec
from kvclaims.refinement.assertions import assert_refines
from kvclaims.refinement.rendering import render_verdict
from kvclaims.refinement.testing import TraceBuilder, generate_valid_trace
from kvclaims.spec.vocabulary import ProtectionMode

__all__ = [
    "OBJECTS",
    "ClaimSpec",
    "Coverage",
    "FuzzReport",
    "InvariantBroken",
    "MicroRuntimeMachine",
    "RequestSpec",
    "TraceBuilder",
    "assert_refines",
    "claim_specs",
    "fresh_machine",
    "fuzz",
    "generate_valid_trace",
    "render_verdict",
    "request_specs",
    "run_machine",
    "valid_traces",
]

MAX_DURATION_STEPS = 5
"""Expiring claims drawn by `claim_specs` live 1 to this many ticks (as in the machine)."""


def claim_specs(
    *, objects: Mapping[str, int] = OBJECTS, modes: tuple[ProtectionMode, ...] = tuple(ProtectionMode)
) -> st.SearchStrategy[ClaimSpec]:
    """Claims on one of `objects` (object id -> prefix length in blocks) that `validate_inputs`
    accepts in any pool of at least `max(objects.values())` blocks: 1 <= required <= footprint
    <= the object's length, a duration exactly when the mode is `expiring`. Ids are
    `claim-<n>`; draw lists with `st.lists(claim_specs(), unique_by=lambda c: c.claim_id)`."""
    if not objects or min(objects.values()) < 1:
        raise ValueError("objects must name at least one prefix of at least one block")

    @st.composite
    def draw(data: st.DrawFn) -> ClaimSpec:
        object_id = data(st.sampled_from(sorted(objects)))
        footprint = data(st.integers(1, objects[object_id]))
        mode = data(st.sampled_from(modes))
        expiring = mode is ProtectionMode.expiring
        return ClaimSpec(
            claim_id=f"claim-{data(st.integers(0, 10**6))}",
            object_id=object_id,
            mode=mode,
            footprint_blocks=footprint,
            required_blocks=data(st.integers(1, footprint)),
            owner_scope=data(st.sampled_from(("tenant-0", "tenant-1", "tenant-2"))),
            duration_steps=data(st.integers(1, MAX_DURATION_STEPS)) if expiring else None,
            two_key=data(st.booleans()),
        )

    return draw()


def request_specs(
    *, objects: Mapping[str, int] = OBJECTS, max_blocks: int = 48
) -> st.SearchStrategy[RequestSpec]:
    """Requests that `validate_inputs` accepts in a pool of at least `max_blocks` blocks: a
    resident prefill of (part of) one of `objects`, or active work of 1..`max_blocks` blocks
    on its own object, optionally in chunks that sum to its blocks. Ids are `request-<n>`."""
    if max_blocks < 1:
        raise ValueError("max_blocks must be positive")

    @st.composite
    def draw(data: st.DrawFn) -> RequestSpec:
        request_id = f"request-{data(st.integers(0, 10**6))}"
        if objects and data(st.booleans()):
            object_id = data(st.sampled_from(sorted(objects)))
            blocks = data(st.integers(1, min(objects[object_id], max_blocks)))
            return RequestSpec(request_id, object_id, blocks, kind=RequestKind.resident)
        blocks = data(st.integers(1, max_blocks))
        pieces = data(st.integers(1, min(4, blocks)))
        base = blocks // pieces
        chunks = (*([base] * (pieces - 1)), blocks - base * (pieces - 1)) if pieces > 1 else None
        return RequestSpec(request_id, f"bulk-{request_id}", blocks, chunks=chunks)

    return draw()


def valid_traces(*, min_events: int = 20, max_events: int = 400) -> st.SearchStrategy[bytes]:
    """Trace v1 bytes from `generate_valid_trace` (claims, requests, offload cycles, failures,
    conflicts, demotions, reported harm) of at least `min_events` events; `check_bytes`
    accepts every one. Shrinking moves towards shorter traces and seed 0."""
    if not 1 <= min_events <= max_events:
        raise ValueError("need 1 <= min_events <= max_events")

    def write(events: int, seed: int) -> bytes:
        out = io.BytesIO()
        generate_valid_trace(out, events, seed=seed, usable_blocks=512, live_claims=16)
        return out.getvalue()

    return st.builds(write, st.integers(min_events, max_events), st.integers(0, 2**32 - 1))


def __getattr__(name: str) -> object:
    """`SchedulerFuzz`, the vLLM scheduler machine, imported on first use (it needs vLLM to run)."""
    if name == "SchedulerFuzz":
        from kvclaims.lab.scheduler_fuzzing import SchedulerFuzz

        return SchedulerFuzz
    raise AttributeError(f"module 'kvclaims.testing' has no attribute {name!r}")
