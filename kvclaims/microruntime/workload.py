"""A long, generated, reproducible MicroRuntime workload (for benchmarks and long-trace checks).

The workload is a list of operations drawn once from a seeded `random.Random` and then applied
to a runtime, so generation never counts in a timing. Its shape: many active requests over a
skewed set of prefix objects (popular prefixes are hit, cold ones evicted), a stream of claims
of every mode (accepted under a protected budget, some demoted, released or left to expire),
occasional large chunked requests that conflict with pinned claims, offloads and reuses of
offloadable claims, and a clock tick every few operations.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kvclaims.microruntime.inputs import ClaimSpec, RequestKind, RequestSpec
from kvclaims.microruntime.runtime import MicroRuntime
from kvclaims.spec.vocabulary import ProtectionMode
from kvclaims.statemachine.lifecycle import Event, Phase

Operation = tuple[str, Any]
"""(kind, argument): `request` RequestSpec, `claim` ClaimSpec, `demote` / `release` /
`offload` / `reuse` a claim id, `tick` a step count."""

_CLAIM_MODES = (
    ProtectionMode.hard_protected,
    ProtectionMode.soft_priority,
    ProtectionMode.best_effort,
    ProtectionMode.demotable,
    ProtectionMode.expiring,
    ProtectionMode.offloadable,
)


@dataclass(frozen=True)
class WorkloadShape:
    """The knobs of a generated workload."""

    operations: int = 20_000
    objects: int = 400
    max_prefix_blocks: int = 48
    usable_blocks: int = 2048
    claim_every: int = 25
    tick_every: int = 10
    big_request_every: int = 200
    seed: int = 2026


def generate(shape: WorkloadShape) -> list[Operation]:
    """The operation list for `shape` (same shape, same list)."""
    rng = random.Random(shape.seed)
    lengths = [rng.randint(2, shape.max_prefix_blocks) for _ in range(shape.objects)]
    weights = [1.0 / (rank + 1) for rank in range(shape.objects)]
    claims: list[str] = []
    ops: list[Operation] = []
    for index in range(shape.operations):
        if index % shape.tick_every == 0:
            ops.append(("tick", 1))
        if index % shape.claim_every == 0:
            obj = rng.choices(range(shape.objects), weights)[0]
            mode = rng.choice(_CLAIM_MODES)
            footprint = lengths[obj]
            claim_id = f"claim-{index}"
            ops.append(
                (
                    "claim",
                    ClaimSpec(
                        claim_id,
                        f"obj-{obj}",
                        mode,
                        footprint,
                        rng.randint(1, footprint),
                        owner_scope=f"tenant-{obj % 7}",
                        duration_steps=rng.randint(5, 50) if mode is ProtectionMode.expiring else None,
                    ),
                )
            )
            claims.append(claim_id)
        elif claims and index % shape.claim_every == shape.claim_every // 2:
            ops.append(
                (rng.choice(("demote", "release", "offload", "reuse", "reuse")), rng.choice(claims[-40:]))
            )
        elif index % shape.big_request_every == shape.big_request_every - 1:
            blocks = rng.randint(shape.usable_blocks // 2, shape.usable_blocks)
            chunk = max(1, blocks // 4)
            chunks = (chunk, chunk, chunk, blocks - 3 * chunk)
            ops.append(("request", RequestSpec(f"big-{index}", f"big-{index}", blocks, chunks=chunks)))
        else:
            obj = rng.choices(range(shape.objects), weights)[0]
            blocks = rng.randint(1, lengths[obj])
            kind = RequestKind.resident if rng.random() < 0.3 else RequestKind.active
            ops.append(("request", RequestSpec(f"r-{index}", f"obj-{obj}", blocks, kind=kind)))
    return ops


_CLAIM_OPERATIONS = {"demote": Event.demote, "release": Event.release, "offload": Event.offload}


def apply(runtime: MicroRuntime, operations: list[Operation]) -> None:
    """Drive `runtime` through `operations`. Operations the claim's current phase does not
    allow are skipped (the workload was drawn without knowing the outcomes), and a request
    that waits or is deferred is retried by the runtime's clock."""
    reuse_ids = _numbered("reuse-")
    for kind, argument in operations:
        if kind == "request":
            runtime.run_request(argument)
        elif kind == "claim":
            runtime.submit_claim(argument)
        elif kind == "tick":
            runtime.tick(argument)
            _finish_admitted(runtime)
        elif kind == "reuse":
            claim = runtime.claims[argument]
            if claim.phase not in (Phase.rejected, Phase.released, Phase.submitted):
                spec = claim.spec
                runtime.run_request(
                    RequestSpec(next(reuse_ids), spec.object_id, spec.footprint_blocks, reuse_claim=argument)
                )
        elif runtime.allows(argument, _CLAIM_OPERATIONS[kind]):
            getattr(runtime, kind)(argument)


def _finish_admitted(runtime: MicroRuntime) -> None:
    """Requests admitted by a retry during a tick run to completion, like everything else."""
    for request_id in runtime.newly_admitted():
        runtime.finish_request(request_id)


def _numbered(prefix: str) -> Iterator[str]:
    number = 0
    while True:
        number += 1
        yield f"{prefix}{number}"
