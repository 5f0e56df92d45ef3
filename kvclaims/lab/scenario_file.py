"""User-written scenarios (`kvclaims scenario --file SPEC.yaml`): a pool, a policy, and steps.

Format `scenario: 1` (YAML or JSON):

```yaml
scenario: 1
name: my-case
usable_blocks: 80
policy: hard_protected            # a name from kvclaims.microruntime.policies.POLICIES
steps:
  - claims: [{claim_id: c1, object_id: doc, mode: hard_protected, footprint_blocks: 60}]
  - prefill: {request_id: p1, object_id: doc, blocks: 60}
  - request: {request_id: a1, object_id: bulky, blocks: 70, chunks: [20, 20, 20, 10]}
  - tick: 1
  - demote: c1                     # also: release, offload, finish (a request id)
  - extend: {claim_id: c1, duration_steps: 5}   # extend-only; clipped at max_duration_steps
  - fault: {kind: restore_failure, claim_id: c1}
```

Every way the file can be wrong (unknown fields, a zero or negative pool, a footprint larger
than the pool, duplicate claim or request ids, an operation the claim's phase does not allow)
is an `InputError` naming the file and the field; nothing runs half-way on bad input.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, ValidationError, model_validator

from kvclaims.lab.micro_scenarios import ScenarioResult, ScenarioRun
from kvclaims.microruntime.inputs import ClaimSpec, RequestKind, RequestSpec, validate_inputs
from kvclaims.microruntime.policies import POLICIES
from kvclaims.microruntime.runtime import FaultKind, MicroRuntime
from kvclaims.microruntime.tracing import TraceBuffer
from kvclaims.spec._types import Identifier, PositiveInt
from kvclaims.spec.errors import InputError, Problem
from kvclaims.spec.trace import RestorationOutcome
from kvclaims.spec.vocabulary import ProtectionMode

MAX_SCENARIO_BYTES = 1024 * 1024


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClaimEntry(_Entry):
    claim_id: Identifier
    object_id: Identifier
    mode: ProtectionMode
    footprint_blocks: StrictInt
    required_blocks: StrictInt | None = None
    owner_scope: Identifier = "tenant-0"
    duration_steps: StrictInt | None = None
    max_duration_steps: StrictInt | None = None
    """A cap on the claim's protected life from acceptance (DESIGN 6.3)."""
    refresh_on_hit: StrictBool = False
    two_key: StrictBool = False
    value: float = 0.0

    def spec(self) -> ClaimSpec:
        required = self.footprint_blocks if self.required_blocks is None else self.required_blocks
        return ClaimSpec(
            self.claim_id,
            self.object_id,
            self.mode,
            self.footprint_blocks,
            required,
            owner_scope=self.owner_scope,
            duration_steps=self.duration_steps,
            max_duration_steps=self.max_duration_steps,
            refresh_on_hit=self.refresh_on_hit,
            two_key=self.two_key,
            value=self.value,
        )


class RequestEntry(_Entry):
    request_id: Identifier
    object_id: Identifier
    blocks: StrictInt
    chunks: list[StrictInt] | None = None
    reuse_claim: Identifier | None = None
    finish: StrictBool = True
    """Finish at once if admitted (False: keep it running until a `finish` step)."""

    def spec(self, kind: RequestKind) -> RequestSpec:
        return RequestSpec(
            self.request_id,
            self.object_id,
            self.blocks,
            kind=kind,
            chunks=tuple(self.chunks) if self.chunks is not None else None,
            reuse_claim=self.reuse_claim,
        )


class FaultEntry(_Entry):
    kind: FaultKind
    claim_id: Identifier
    position: StrictInt | None = None
    outcome: RestorationOutcome | None = None


class ExtendEntry(_Entry):
    """A request to lengthen a claim's term by `duration_steps` from now (extend-only)."""

    claim_id: Identifier
    duration_steps: PositiveInt


class StepEntry(_Entry):
    """Exactly one operation."""

    claims: list[ClaimEntry] | None = None
    prefill: RequestEntry | None = None
    request: RequestEntry | None = None
    finish: Identifier | None = None
    tick: PositiveInt | None = None
    demote: Identifier | None = None
    release: Identifier | None = None
    offload: Identifier | None = None
    extend: ExtendEntry | None = None
    fault: FaultEntry | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> StepEntry:
        given = [name for name in type(self).model_fields if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"a step is exactly one operation, got {given or 'none'}")
        return self


class ScenarioFile(_Entry):
    scenario: Literal[1]
    name: Identifier
    usable_blocks: StrictInt
    block_size: PositiveInt = 16
    policy: str
    objects: dict[str, PositiveInt] = {}
    steps: list[StepEntry]

    @model_validator(mode="after")
    def _known_policy(self) -> ScenarioFile:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; known: {', '.join(POLICIES)}")
        return self


def load_scenario_file(path: Path) -> ScenarioFile:
    """Read and validate a scenario file, or raise an `InputError` naming what is wrong."""
    file = str(path)
    if not path.is_file():
        raise InputError([Problem(file, "no such file")])
    if path.stat().st_size > MAX_SCENARIO_BYTES:
        raise InputError([Problem(file, f"larger than {MAX_SCENARIO_BYTES} bytes")])
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        mark = getattr(error, "problem_mark", None)
        raise InputError(
            [Problem(file, f"not YAML or JSON: {type(error).__name__}", line=mark.line + 1 if mark else None)]
        ) from None
    if not isinstance(document, dict):
        raise InputError([Problem(file, "a scenario file is a mapping with `scenario: 1`")])
    try:
        scenario = ScenarioFile.model_validate(document)
    except ValidationError as error:
        raise InputError(
            [
                Problem(file, str(detail["msg"]), field=".".join(str(p) for p in detail["loc"]) or None)
                for detail in error.errors(include_url=False)
            ]
        ) from None
    claims = [claim.spec() for step in scenario.steps for claim in step.claims or ()]
    requests = [
        entry.spec(RequestKind.active)
        for step in scenario.steps
        for entry in (step.prefill, step.request)
        if entry
    ]
    validate_inputs(scenario.usable_blocks, claims, requests, source=file)
    return scenario


def run_scenario_file(path: Path) -> ScenarioResult:
    """Run a scenario file on a MicroRuntime; the summary reports what happened."""
    scenario = load_scenario_file(path)
    buffer = TraceBuffer()
    runtime = MicroRuntime(
        scenario.usable_blocks,
        block_size=scenario.block_size,
        policy=POLICIES[scenario.policy],
        sink=buffer.append,
        source=f"kvclaims-microruntime/{scenario.name}",
    )
    for object_id, blocks in scenario.objects.items():
        runtime.register_object(object_id, blocks)
    extensions: list[dict[str, Any]] = []
    for index, step in enumerate(scenario.steps):
        try:
            _apply(runtime, step, extensions)
        except InputError as error:
            raise InputError(
                [Problem(str(path), problem.message, field=f"steps.{index}") for problem in error.problems]
            ) from None
    runtime.close()
    result = ScenarioResult(scenario.name, f"scenario file {path.name}", scenario.name.startswith("control-"))
    result.runs.append(ScenarioRun(scenario.name, runtime.header, buffer.events))
    result.summary = _summary(runtime, buffer) | ({"extensions": extensions} if extensions else {})
    return result


def _apply(runtime: MicroRuntime, step: StepEntry, extensions: list[dict[str, Any]]) -> None:
    if step.claims is not None:
        runtime.submit_claims([claim.spec() for claim in step.claims])
    elif step.prefill is not None or step.request is not None:
        entry = step.prefill or step.request
        assert entry is not None
        kind = RequestKind.resident if step.prefill is not None else RequestKind.active
        if entry.finish:
            runtime.run_request(entry.spec(kind))
        else:
            runtime.submit_request(entry.spec(kind))
    elif step.finish is not None:
        runtime.finish_request(step.finish)
    elif step.tick is not None:
        runtime.tick(step.tick)
    elif step.demote is not None:
        runtime.demote(step.demote)
    elif step.release is not None:
        runtime.release(step.release)
    elif step.offload is not None:
        runtime.offload(step.offload)
    elif step.extend is not None:
        done = runtime.extend_claim(step.extend.claim_id, duration_steps=step.extend.duration_steps)
        extensions.append(
            {"claim_id": done.claim_id, "outcome": done.outcome.value, "granted_steps": done.duration_steps}
            | ({"why": done.why} if done.why else {})
        )
    elif step.fault is not None:
        fault = step.fault
        runtime.inject_fault(fault.kind, fault.claim_id, position=fault.position, outcome=fault.outcome)


def _summary(runtime: MicroRuntime, buffer: TraceBuffer) -> dict[str, Any]:
    census = runtime.pool.census()
    return {
        "usable_blocks": runtime.pool.usable,
        "policy": runtime.policy.name,
        "events": dict(Counter(e["event"] for e in buffer.events)),
        "claims": {cid: c.phase.value for cid, c in runtime.claims.items()},
        "requests": {rid: r.phase.value for rid, r in runtime.requests.items()},
        "pool": {
            "free": census.free,
            "resident": census.resident,
            "active": census.active,
            "pinned": census.pinned,
        },
        "evicted_blocks": runtime.stats.evicted_blocks,
        "arbiter": runtime.arbiter_log,
    }
