"""Protection ending or shrinking (DESIGN 4 rules 7 `duration` and 10 `no_silent_harm`): a claim's
promised term is judged on every clock it carries (engine steps and wall-clock ms) whenever its
responsibility ends; a loss report agrees with the prefix its blocks show.

Events: resident_claim_demoted, resident_claim_expired, resident_claim_released,
resident_claim_harmed, resident_claim_lost (engine_step, t_ns, leading_blocks, required_blocks),
request_reused (refresh-on-hit restarts the clocks), resident_claim_extended (extend-only deadlines,
within the claim's cap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvclaims.spec.vocabulary import (
    NS_PER_MS,
    TraceWitness,
)
from kvclaims.statemachine.lifecycle import (
    Event,
    Phase,
)
from kvclaims.statemachine.system.declarations import CLOCKS, Rule
from kvclaims.statemachine.system.records import (
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
        """A claim's promised term is honoured: it may not expire before the end `_promised_end`
        gives on each clock it carries. A term the trace gives no clock for is undecidable."""
        for clock in _clocks_of(claim, ev):
            end, exact = _promised_end(claim, clock)
            if clock.now is not None and end is not None and clock.now < end:
                self._claim_fail(
                    claim,
                    R.duration,
                    f"expired {(clock.now - clock.start) / clock.scale:g} {clock.unit} after its "
                    f"clock started; it promised {(end - clock.start) / clock.scale:g} {clock.unit}"
                    if clock.start is not None
                    else f"expired at {clock.now / clock.scale:g} {clock.unit}, before the "
                    f"{end / clock.scale:g} its extension promised",
                )
            elif clock.now is None or not exact:
                self._undecided_clock(claim, clock, "its expiry")

    def _extended(self, ev: Any) -> None:
        """An extension (extend-only deadlines): the claim's term on each clock the event gives
        now ends no earlier than the event's stamp plus its duration. It may not add a clock the
        terms lack, end before the end already promised, or end past the claim's cap."""
        claim = self._claim(ev.claim_id)
        self._advance(claim, Event.extend)
        for clock in _clocks_of(claim, ev, ev.duration_steps, ev.duration_ms):
            if clock.granted is None:
                continue
            if clock.duration is None:
                self._claim_fail(
                    claim,
                    R.duration,
                    f"extended by duration_{clock.field} {clock.granted}, but its terms carry no "
                    f"duration_{clock.field}: adding a clock is a change of terms",
                )
            if clock.now is None:
                self._undecided_clock(claim, clock, "its extension")
                continue
            granted = clock.now + clock.granted * clock.scale
            cap_end = _cap_end(claim, clock)
            if cap_end is not None and granted > cap_end:
                self._claim_fail(
                    claim,
                    R.duration,
                    f"extended to {(granted - clock.decided) / clock.scale:g} {clock.unit} after its "
                    f"decision, past its max_duration_{clock.field} {clock.cap}",
                )
            end, exact = _promised_end(claim, clock)
            if end is not None and granted < end:
                self._claim_fail(
                    claim,
                    R.duration,
                    f"an extension ending at {granted / clock.scale:g} {clock.unit} would end before "
                    f"the term it already had ({end / clock.scale:g} {clock.unit}): deadlines only extend",
                )
            elif not exact:
                self._undecided_clock(claim, clock, "its extension")
            _set_extended(claim, clock, granted)

    def _undecided_clock(self, claim: ClaimRecord, clock: _Clock, what: str) -> None:
        self.undecided.append(
            Undecided(
                f"{claim.claim_id}: a term of {clock.duration} {clock.unit}, but the trace gives "
                f"no {clock.stamp} on the events its clock runs from and {what}, so the term "
                "could not be checked",
                self._at,
            )
        )

    def _refresh(self, claim: ClaimRecord, ev: Any) -> None:
        """A satisfied reuse restarts a refresh-on-hit claim's clocks, never backwards: a hit
        stamped before the clock's start cannot shorten the promise. A hit with no clock value
        leaves that clock unknown (a later expiry is then undecidable)."""
        if claim.refresh_on_hit:
            claim.clock_step = _later(claim.clock_step, ev.engine_step)
            claim.clock_ns = _later(claim.clock_ns, ev.t_ns)


@dataclass(frozen=True)
class _Clock:
    """One duration clock of a claim at an event: the claim's term on it and the event's stamp."""

    field: str
    """The clock's name in the fields `duration_<field>` / `max_duration_<field>`."""
    unit: str
    stamp: str
    scale: int
    duration: int | None
    cap: int | None
    start: int | None
    decided: int | None
    extended: int | None
    now: int | None
    granted: int | None
    """The duration an extension event gives on this clock (None for other events)."""


def _clocks_of(
    claim: ClaimRecord, ev: Any, granted_steps: int | None = None, granted_ms: int | None = None
) -> tuple[_Clock, ...]:
    """The claim's clocks at `ev` that carry a term or that an extension grants one on."""
    clocks = (
        _Clock(
            "steps", "engine steps", "engine_step", 1,
            claim.duration_steps, claim.max_duration_steps, claim.clock_step, claim.decided_step,
            claim.extended_step, ev.engine_step, granted_steps,
        ),
        _Clock(
            "ms", "ms", "t_ns", NS_PER_MS,
            claim.duration_ms, claim.max_duration_ms, claim.clock_ns, claim.decided_ns,
            claim.extended_ns, ev.t_ns, granted_ms,
        ),
    )  # fmt: skip
    return tuple(c for c in clocks if c.duration is not None or c.granted is not None)


def _cap_end(claim: ClaimRecord, clock: _Clock) -> int | None:
    """Where the claim's cap ends its protected life on `clock` (None: no cap, or no stamp)."""
    if clock.cap is None or clock.decided is None:
        return None
    return clock.decided + clock.cap * clock.scale


def _promised_end(claim: ClaimRecord, clock: _Clock) -> tuple[int | None, bool]:
    """The earliest stamp at which the claim may expire on `clock`, and whether it is exact.

    The term runs `duration` from its start (the decision or the last refreshing hit), or to the
    latest extension if that is later, and never past the cap from the decision. Without a start
    stamp the extension is a lower bound (inexact); without the cap's stamp nothing is known (a
    bound could be past the true, capped end)."""
    if clock.cap is not None and clock.decided is None:
        return None, False
    ends = [e for e in (_plus(clock.start, clock.duration, clock.scale), clock.extended) if e is not None]
    if not ends:
        return None, False
    end = max(ends)
    cap_end = _cap_end(claim, clock)
    return (end if cap_end is None else min(end, cap_end)), clock.start is not None


def _plus(start: int | None, duration: int | None, scale: int) -> int | None:
    return None if start is None or duration is None else start + duration * scale


def _set_extended(claim: ClaimRecord, clock: _Clock, granted: int) -> None:
    latest = granted if clock.extended is None else max(clock.extended, granted)
    setattr(claim, f"extended_{'step' if clock.field == 'steps' else 'ns'}", latest)


def _later(clock: int | None, stamp: int | None) -> int | None:
    """The restarted clock: the hit's stamp, or the old start if that is later."""
    return None if stamp is None else stamp if clock is None else max(clock, stamp)


_TERM_FIELDS = ("duration_steps", "duration_ms", "refresh_on_hit", "max_duration_steps", "max_duration_ms")

RULES: tuple[Rule, ...] = (
    Rule(
        "duration.judged_on_every_clock_when_protection_ends",
        R.duration,
        "DESIGN 4 rule 7, DESIGN 6.1",
        "ProtectionModel._end_protection",
        {
            "resident_claim_submitted": (*_TERM_FIELDS, *CLOCKS),
            "resident_claim_accepted": (*_TERM_FIELDS, *CLOCKS),
            "resident_claim_conditionally_accepted": (*_TERM_FIELDS, *CLOCKS),
            "resident_claim_extended": ("duration_steps", "duration_ms", *CLOCKS),
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
        "duration.extensions_only_lengthen_within_the_cap",
        R.duration,
        "DESIGN 4 rule 7 (soft terms)",
        "ProtectionModel._extended",
        {
            "resident_claim_submitted": (*_TERM_FIELDS, *CLOCKS),
            "resident_claim_accepted": (*_TERM_FIELDS, *CLOCKS),
            "resident_claim_conditionally_accepted": (*_TERM_FIELDS, *CLOCKS),
            "resident_claim_extended": ("duration_steps", "duration_ms", *CLOCKS),
            "request_reused": ("predicate_satisfied", *CLOCKS),
        },
        ("duration.extensions_only_lengthen_within_the_cap",),
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
