"""Claim terms (DESIGN 4 rules 1 `identity` and 2 `terms`): a claim's owner, object, mode, predicate,
footprint, durations and refresh-on-hit are fixed at its decision; an acceptance after a submission
repeats them, a change needs a conditional acceptance.

Events: resident_claim_submitted, resident_claim_accepted, resident_claim_conditionally_accepted,
resident_claim_rejected (fields owner_scope, object_id, mode, predicate, footprint_blocks,
duration_steps, duration_ms, refresh_on_hit, max_duration_steps, max_duration_ms, engine_step,
t_ns).
"""

from __future__ import annotations

from typing import Any

from kvclaims.spec.vocabulary import (
    TraceWitness,
)
from kvclaims.statemachine.lifecycle import (
    INITIAL,
    Event,
    Phase,
)
from kvclaims.statemachine.system.declarations import CLAIM_EVENTS, TERMS_FIELDS, Rule
from kvclaims.statemachine.system.records import (
    _PROFILE_OF,
    ClaimRecord,
    R,
    Undecided,
)

_PREDICATE = 3
"""The predicate's index in `ClaimRecord.terms()`."""


def _unit_unknown(submitted: tuple[Any, ...], submitted_unit: int | None, claim: ClaimRecord) -> bool:
    """The terms differ only in a predicate one side of which has no unit of blocks (tokens
    without a header block_size): the comparison is undecidable, not a change of terms."""
    if submitted_unit is not None and claim.required is not None:
        return False
    accepted = claim.terms()
    return (
        accepted[:_PREDICATE] + accepted[_PREDICATE + 1 :]
        == submitted[:_PREDICATE] + submitted[_PREDICATE + 1 :]
    )


class TermsModel:
    """The terms rules, as `SystemState` methods."""

    def _submitted(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        if claim.phase is INITIAL:
            self._take_terms(claim, ev)
        self._advance(claim, Event.submit)

    def _accepted(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        if claim.phase is Phase.submitted:
            self._check_same_object(claim, ev)
            submitted, submitted_unit = claim.terms(), claim.required
            self._take_terms(claim, ev)
            if claim.terms() != submitted and _unit_unknown(submitted, submitted_unit, claim):
                self.undecided.append(
                    Undecided(
                        f"{claim.claim_id}: accepted with predicate {claim.predicate}, submitted with "
                        f"{submitted[_PREDICATE]}; one counts tokens and the header gives no "
                        "block_size, so whether the terms changed could not be decided",
                        self._at,
                    )
                )
            elif claim.terms() != submitted:
                self._claim_fail(
                    claim,
                    R.terms,
                    f"accepted on terms {_show_terms(claim.terms())}, but it was submitted with "
                    f"{_show_terms(submitted)}: a change of terms must be "
                    "resident_claim_conditionally_accepted",
                )
        elif claim.phase is INITIAL:
            self._take_terms(claim, ev)
        self._decide(claim)

    def _conditionally_accepted(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        if claim.phase is INITIAL:
            self._claim_fail(
                claim,
                R.terms,
                "conditionally accepted, but it was never submitted: a conditional acceptance "
                "changes submitted terms",
            )
        if claim.phase is Phase.submitted:
            self._check_same_object(claim, ev)
            self._take_terms(claim, ev)
        self._decide(claim)

    def _check_same_object(self, claim: ClaimRecord, ev: Any) -> None:
        if (claim.owner_scope, claim.object_id) != (ev.owner_scope, ev.object_id):
            self._claim_fail(
                claim,
                R.identity,
                f"accepted for owner {ev.owner_scope} / object {ev.object_id}, but it was submitted "
                f"for owner {claim.owner_scope} / object {claim.object_id}",
            )

    def _decide(self, claim: ClaimRecord) -> None:
        self._advance(claim, Event.accept)
        claim.accepted_at = self._at
        if TraceWitness.claim_accepted not in self._complete:
            self._witness(TraceWitness.claim_accepted, (self._at,), claim.claim_id)

    def _take_terms(self, claim: ClaimRecord, ev: Any) -> None:
        predicate = ev.predicate
        two_key = type(predicate).__name__ == "HybridTwoKey"
        claim.profile, claim.table, claim.rank = _PROFILE_OF[(ev.mode, two_key)]
        claim.mode = ev.mode
        claim.owner_scope = ev.owner_scope
        claim.object_id = ev.object_id
        claim.predicate = predicate
        claim.footprint = ev.footprint_blocks
        claim.duration_steps = ev.duration_steps
        claim.duration_ms = ev.duration_ms
        claim.refresh_on_hit = ev.refresh_on_hit
        claim.max_duration_steps = ev.max_duration_steps
        claim.max_duration_ms = ev.max_duration_ms
        claim.clock_step = claim.decided_step = ev.engine_step
        claim.clock_ns = claim.decided_ns = ev.t_ns
        claim.extended_step = claim.extended_ns = None
        if two_key:
            claim.required = predicate.boundary_blocks
        elif predicate.blocks is not None:
            claim.required = predicate.blocks
        elif self.block_size is not None:
            claim.required = -(-predicate.tokens // self.block_size)
        else:
            claim.required = None
            self.undecided.append(
                Undecided(
                    f"{claim.claim_id}: its predicate counts tokens and the header gives no "
                    "block_size, so its leading-prefix checks could not be decided",
                    self._at,
                )
            )
        if claim.required is not None and claim.required > claim.footprint:
            self._claim_fail(
                claim,
                R.identity,
                f"its predicate needs {claim.required} leading blocks but footprint_blocks is "
                f"{claim.footprint}: the claim could never materialize",
            )

    def _rejected(self, ev: Any) -> None:
        self._advance(self._claim(ev.claim_id), Event.reject)


def _show_terms(terms: tuple[Any, ...]) -> str:
    owner, obj, mode, predicate, footprint, steps, ms, refresh, cap_steps, cap_ms = terms
    shown = f"owner {owner}, object {obj}, mode {mode}, predicate {predicate}, footprint {footprint}"
    if steps is not None or ms is not None or refresh:
        shown += f", duration {steps} steps / {ms} ms, refresh_on_hit {refresh}"
    if cap_steps is not None or cap_ms is not None:
        shown += f", capped at {cap_steps} steps / {cap_ms} ms"
    return shown


RULES: tuple[Rule, ...] = (
    Rule(
        "terms.acceptance_repeats_submitted_terms",
        R.terms,
        "DESIGN 4 rule 2",
        "TermsModel._accepted",
        {
            "resident_claim_submitted": TERMS_FIELDS,
            "resident_claim_accepted": TERMS_FIELDS,
            "resident_claim_conditionally_accepted": (*TERMS_FIELDS, "reason"),
        },
        ("terms.plain_acceptance_cannot_launder_harm",),
    ),
    Rule(
        "identity.events_name_decided_claims",
        R.identity,
        "DESIGN 4 rule 1",
        "SystemState._advance (the lifecycle from absent) and BlockModel._block_claim",
        {
            **{event: ("claim_id",) for event in CLAIM_EVENTS},
            "request_reused": ("claim_id",),
            "block_stored": ("claim_id", "position"),
            "block_removed": ("claim_id", "position"),
        },
        ("lifecycle.every_transition_fires", "lifecycle.every_phase_reachable"),
    ),
)
