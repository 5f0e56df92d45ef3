"""Protection ending or shrinking (DESIGN 4 rules 7 `duration` and 10 `no_silent_harm`): a claim's
promised term is judged on every clock it carries (engine steps and wall-clock ms) whenever its
responsibility ends; a loss report agrees with the prefix its blocks show.

Events: resident_claim_demoted, resident_claim_expired, resident_claim_released,
resident_claim_harmed, resident_claim_lost (engine_step, t_ns, leading_blocks, required_blocks),
request_reused (refresh-on-hit restarts the clocks).
"""

from __future__ import annotations

from typing import Any

from kvclaims.spec.vocabulary import (
    TraceWitness,
)
from kvclaims.statemachine.lifecycle import (
    Event,
    Phase,
)
from kvclaims.statemachine.system.declarations import CLOCKS, Rule
from kvclaims.statemachine.system.records import (
    _NS_PER_MS,
    RESPONSIBLE,
    ClaimRecord,
    R,
    Undecided,
)

_EXPIRIES: frozenset[Event] = frozenset({Event.expire, Event.fail_restoration_expiry})
"""The lifecycle events that end a claim by its clock (an expiry, or a restore failing as one)."""
_PROMISE_BINDS: frozenset[Phase] = RESPONSIBLE | {
    Phase.checkpoint_mismatch,
    Phase.checkpoint_mismatch_in_place,
}
"""Phases in which the promised duration still binds (a restore that saw a different state key
is still the runtime's responsibility until its failure outcome)."""


class ProtectionModel:
    """The rules on protection ending, as `SystemState` methods."""

    def _end_protection(self, claim: ClaimRecord, ev: Any, ending: Event) -> None:
        """The one path by which a claim's protection ends or shrinks (a demotion, expiry,
        release, harm, or a restoration failure of any outcome, offloaded or in place): an
        expiry while the promise binds is judged on every clock the claim carries, then the
        lifecycle moves. Demotion, release and harm end responsibility explicitly (DESIGN binds
        the duration to expiry alone), so no clock judges them."""
        if ending in _EXPIRIES and claim.phase in _PROMISE_BINDS:
            self._check_duration(claim, ev)
        self._advance(claim, ending)

    def _demoted(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._end_protection(claim, ev, Event.demote)
        claim.settled_at = self._at

    def _expired(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._end_protection(claim, ev, Event.expire)
        claim.settled_at = self._at

    def _released(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._end_protection(claim, ev, Event.release)

    def _harmed(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        if claim.phase in RESPONSIBLE or claim.phase is Phase.breached:
            self._check_harm_numbers(claim, ev)
        was_breached = claim.phase is Phase.breached
        self._end_protection(claim, ev, Event.harm)
        if was_breached:
            self._witness(TraceWitness.harm_reported, (claim.accepted_at, self._at), claim.claim_id)

    def _check_harm_numbers(self, claim: ClaimRecord, ev: Any) -> None:
        if ev.leading_blocks >= ev.required_blocks:
            self._claim_fail(
                claim,
                R.no_silent_harm,
                f"harm reported with {ev.leading_blocks} leading blocks of {ev.required_blocks} "
                "required: by its own numbers the predicate still holds",
            )
        if claim.required is not None and ev.required_blocks != claim.required:
            self._claim_fail(
                claim,
                R.no_silent_harm,
                f"harm reports required_blocks {ev.required_blocks}, but the claim's predicate "
                f"needs {claim.required}",
            )
        self._agree_with_blocks(claim, ev.leading_blocks, "harm")

    def _agree_with_blocks(self, claim: ClaimRecord, reported: int, what: str) -> None:
        """A loss report (harm or lost) must agree with the device-tier prefix the trace's
        blocks showed, when they showed one: the predicate fell, to exactly that many blocks."""
        if claim.present is None or claim.required is None or claim.phase is Phase.offloaded:
            return
        if claim.leading >= claim.required:
            self._claim_fail(
                claim,
                R.no_silent_harm,
                f"{what} reported while the claim's blocks still hold {claim.leading} contiguous "
                f"leading blocks of {claim.required} required: the predicate still holds",
            )
        if reported != claim.leading:
            self._claim_fail(
                claim,
                R.no_silent_harm,
                f"{what} reports {reported} leading blocks, but its blocks show {claim.leading}",
            )

    def _lost(self, ev: Any) -> None:
        claim = self._claim(ev.claim_id)
        self._agree_with_blocks(claim, ev.leading_blocks, "loss")  # demoted or expired too (class 7)
        self._advance(claim, Event.lose)
        claim.reported_leading = min(claim.reported_leading, ev.leading_blocks)
        if claim.required is not None and ev.leading_blocks >= claim.required:
            self._claim_fail(
                claim,
                R.lifecycle,
                f"loss reported with {ev.leading_blocks} leading blocks of {claim.required} required: "
                "the predicate still holds",
            )
        self._settled_loss(claim)

    def _settled_loss(self, claim: ClaimRecord) -> None:
        if claim.phase is Phase.demoted:
            self._witness(TraceWitness.demoted_before_loss, (claim.settled_at, self._at), claim.claim_id)
        elif claim.phase is Phase.expired:
            self._witness(TraceWitness.expired_before_loss, (claim.settled_at, self._at), claim.claim_id)

    def _check_duration(self, claim: ClaimRecord, ev: Any) -> None:
        """A claim's promised duration is honoured: it may not expire before `duration_steps`
        engine steps / `duration_ms` milliseconds from acceptance (or its last satisfied reuse,
        with `refresh_on_hit`). A duration the trace gives no clock for is undecidable."""
        for duration, start, now, unit, scale in (
            (claim.duration_steps, claim.clock_step, ev.engine_step, "engine steps", 1),
            (claim.duration_ms, claim.clock_ns, ev.t_ns, "ms", _NS_PER_MS),
        ):
            if duration is None:
                continue
            if start is None or now is None:
                self.undecided.append(
                    Undecided(
                        f"{claim.claim_id}: expired with a duration of {duration} {unit}, but the "
                        f"trace gives no {'engine_step' if scale == 1 else 't_ns'} on its acceptance "
                        "and expiry, so the duration could not be checked",
                        self._at,
                    )
                )
            elif now - start < duration * scale:
                self._claim_fail(
                    claim,
                    R.duration,
                    f"expired {(now - start) / scale:g} {unit} after its clock started; it promised "
                    f"{duration} {unit}",
                )

    def _refresh(self, claim: ClaimRecord, ev: Any) -> None:
        """A satisfied reuse restarts a refresh-on-hit claim's clocks, never backwards: a hit
        stamped before the clock's start cannot shorten the promise. A hit with no clock value
        leaves that clock unknown (a later expiry is then undecidable)."""
        if claim.refresh_on_hit:
            claim.clock_step = _later(claim.clock_step, ev.engine_step)
            claim.clock_ns = _later(claim.clock_ns, ev.t_ns)


def _later(clock: int | None, stamp: int | None) -> int | None:
    """The restarted clock: the hit's stamp, or the old start if that is later."""
    return None if stamp is None else stamp if clock is None else max(clock, stamp)


RULES: tuple[Rule, ...] = (
    Rule(
        "duration.judged_on_every_clock_when_protection_ends",
        R.duration,
        "DESIGN 4 rule 7, DESIGN 6.1",
        "ProtectionModel._end_protection",
        {
            "resident_claim_submitted": ("duration_steps", "duration_ms", "refresh_on_hit", *CLOCKS),
            "resident_claim_accepted": ("duration_steps", "duration_ms", "refresh_on_hit", *CLOCKS),
            "resident_claim_conditionally_accepted": ("duration_steps", "duration_ms", *CLOCKS),
            "resident_claim_expired": CLOCKS,
            "resident_claim_demoted": CLOCKS,
            "resident_claim_released": CLOCKS,
            "resident_claim_harmed": CLOCKS,
            "resident_claim_restoration_failed": ("outcome", *CLOCKS),
            "request_reused": ("predicate_satisfied", *CLOCKS),
        },
        ("duration.no_expiry_before_promised_duration",),
    ),
    Rule(
        "harm.reports_agree_with_the_blocks",
        R.no_silent_harm,
        "DESIGN 4 rule 10",
        "ProtectionModel._agree_with_blocks",
        {
            "resident_claim_harmed": ("leading_blocks", "required_blocks"),
            "resident_claim_lost": ("leading_blocks",),
        },
        ("lifecycle.harm_only_for_accepted_unreleased_claims", "lifecycle.no_harm_after_demotion_or_expiry"),
    ),
)
