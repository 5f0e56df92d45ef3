"""Continuum compatibility: seed 003's `job_id` / `is_last_step` request keys kept as claims.

Continuum (vllm-continuum, seed 003) pins a finished agent turn's KV blocks for a TTL so the
job's next turn hits them: it skips `free()` on a non-last turn, unpins when the TTL lapses (not
while a request of the job waits), unpins a job's old pin when its next request finishes, frees
everything on the last step, and steals from pins under preemption. Nothing of that is visible
to the caller, and pins may fill the pool until everything stalls (seed 003 8.6).

With `BindingConfig.continuum` set, the binding reads the same keys from a request's
`extra_args` (offline `SamplingParams.extra_args`, over HTTP `vllm_xargs`) and keeps the same
behaviour with claims, so every step has an outcome in the trace and in the caller's
`stop_reason`:

- a non-last turn that finishes normally submits a claim over its prompt's full blocks
  (`continuum-pin:<job>:<turn>`, owner `continuum-job:<job>`, `duration_ms` = `pin_ms`), which
  pins them while the request still holds them; over the protected budget it is rejected with
  the budget named (the blocks go back to vLLM's LRU cache, as with no pin);
- a later request of the job is attached to the pin (its prefix hit is a claim reuse);
- the pin's duration is a minimum: it expires at the first engine step after `pin_ms` with no
  request of its job waiting;
- when a request of the job finishes, the job's previous pin is released; on the last step no
  new pin is made;
- a conflict (a waiting request that does not fit next to the pins) demotes pins (mode
  `demotable`, Continuum's steal-from-pinned, reported before any block is lost) or defers the
  request until they expire (mode `expiring`), never a silent stall.

This module only parses the keys and keeps per-job state; the arbiter does the claim work.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvclaims.spec.tables import MAX_IDENTIFIER_LENGTH
from kvclaims.vllm_binding.metadata import ClaimOp, ClaimRequest, shown, usable_identifier

JOB_KEY = "job_id"
LAST_STEP_KEY = "is_last_step"


@dataclass(frozen=True)
class JobTurn:
    """A request's place in an agent job."""

    job_id: str
    last_step: bool


@dataclass(frozen=True)
class JobKeyProblem:
    """Why a request's job keys were not usable (bounded; never echoes unbounded input)."""

    reason: str


def parse_job_keys(extra_args: object) -> JobTurn | JobKeyProblem | None:
    """The job turn a request declares; None when it names no job (no `job_id`, or null: seed
    003's fork crashes on a null job id, here such a request is an ordinary one)."""
    if not isinstance(extra_args, Mapping):
        return None
    job_id = extra_args.get(JOB_KEY)
    if job_id is None:
        return None
    if usable_identifier(job_id) is None:
        return JobKeyProblem(
            f"job_id must be a string of 1..{MAX_IDENTIFIER_LENGTH} characters, got {shown(job_id)}"
        )
    last = extra_args.get(LAST_STEP_KEY, False)
    # vLLM's request model turns a JSON boolean in vllm_xargs into 1/0.
    if type(last) is not bool and not (type(last) is int and last in (0, 1)):
        return JobKeyProblem(f"is_last_step must be a boolean, got {shown(last)}")
    return JobTurn(job_id, bool(last))


def _bounded(prefix: str, text: str) -> str:
    name = f"{prefix}{text}"
    if len(name) <= MAX_IDENTIFIER_LENGTH:
        return name
    return f"{prefix}sha256-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


class ContinuumJobs:
    """Per-job state of the compatibility mode: each job's live pin and turn count."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self._pin: dict[str, str] = {}
        """job -> claim id of its live pin."""
        self._job_of_pin: dict[str, str] = {}
        self._pins_made = 0
        """Pins submitted so far: numbers claim ids, which are single-use even when a job id
        comes back."""

    def pin_of(self, job_id: str, live: Mapping[str, Any]) -> str | None:
        """The claim id of the job's pin if it is still in `live` (the registry's claims);
        a pin that ended is forgotten here."""
        claim_id = self._pin.get(job_id)
        if claim_id is not None and claim_id not in live:
            self.forget_pin(claim_id)
            return None
        return claim_id

    def job_of(self, record: Any) -> str | None:
        """The job a claim pins for, or None for an ordinary claim (changes nothing)."""
        return self._job_of_pin.get(record.claim_id)

    def pin_request(self, turn: JobTurn, footprint_blocks: int) -> ClaimRequest:
        """The claim a finished non-last turn submits: its job's next pin."""
        self._pins_made += 1
        return ClaimRequest(
            op=ClaimOp.submit,
            claim_id=_bounded("continuum-pin:", f"{turn.job_id}:{self._pins_made}"),
            owner=self.owner(turn.job_id),
            mode=self.settings.mode,
            footprint_blocks=footprint_blocks,
            duration_ms=self.settings.pin_ms,
            refresh_on_hit=self.settings.refresh_on_hit,
            object_id=_bounded("continuum-job:", turn.job_id),
        )

    @staticmethod
    def owner(job_id: str) -> str:
        """The owner scope of a job's pins (the per-owner budget bounds one job)."""
        return _bounded("continuum-job:", job_id)

    def pinned(self, job_id: str, claim_id: str) -> None:
        """The job's new pin was accepted."""
        self._pin[job_id] = claim_id
        self._job_of_pin[claim_id] = job_id

    def forget_pin(self, claim_id: str) -> None:
        """The pin ended (released, harmed): the job holds no pin through it any more."""
        job = self._job_of_pin.pop(claim_id, None)
        if job is not None and self._pin.get(job) == claim_id:
            del self._pin[job]
