"""Occupancy and capacity (DESIGN 4 rules 4 `capacity_arithmetic` and 5 `capacity_state`): a capacity
proof's numbers add up, agree with the pool the model holds (each device block counted once however
many claims hold it), and the pool is never overcommitted.

Events: active_request_admitted (active_live_blocks, claim_shared_blocks), active_request_deferred
and active_request_refused (the five capacity proof numbers), every claim transition into a resident
phase (via the kernel's `_advance`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvclaims.spec.capacity import capacity_problem
from kvclaims.spec.tables import CAPACITY_PROOF_FIELDS
from kvclaims.spec.vocabulary import (
    ConflictReason,
)
from kvclaims.statemachine.system.declarations import PROOF_NUMBERS, Rule
from kvclaims.statemachine.system.records import (
    _PROTECTING,
    ASSUMED,
    RESERVING,
    RESIDENT,
    ClaimRecord,
    R,
)


class OccupancyModel:
    """The capacity rules, as `SystemState` methods."""

    def _check_occupancy(self, what: str, live: int = 0, joining: ClaimRecord | None = None) -> None:
        """Seed 001 3.4: the pool is never overcommitted. The blocks of materialized preserving
        claims fit in the usable pool, and so does each admitted request's live KV. (Trace v1
        does not say which live blocks an admitted request shares with a claim's prefix, so
        protected + active is judged by the capacity proofs, not summed here.)

        Claims share blocks (several claims on one prefix object, or objects with a common
        prefix), so the footprint sum `resident_blocks` is only the cheap bound: past the pool,
        the blocks are counted once each (`_resident_held`) before the pool counts as
        overcommitted."""
        usable = self.usable_blocks
        if usable is None:
            return
        held = self.resident_blocks
        if held > usable:
            held = self._resident_held(joining)
        if held > usable or live > usable:
            self._fail(
                R.capacity_state,
                f"{what} overcommits the pool: {held} blocks held by materialized "
                f"preserving claims{f' and {live} live blocks' if live else ''} in {usable} usable blocks",
                subject="pool",
                state=f"pool: {held} held by claims of {usable} usable",
                allowed=("a refusal, or a demotion / expiry / release / offload first",),
                ids=(),
            )

    def _check_admission_fits(self, request_id: str, live: int, shared: int) -> None:
        """Seed 001 3.4 at an admission that says how many of its live blocks are claim-held
        (`claim_shared_blocks`): the protected blocks (of the leading positions the predicates
        of materialized preserving claims need, each block once) plus the request's other live
        blocks fit in the usable pool."""
        self._count_scan(len(self.claims))
        held = self._blocks_held_by(
            [c for c in self.claims.values() if c.profile.preserving and c.phase in _PROTECTING],
            predicate_only=True,
        )
        usable = self.usable_blocks
        if shared > live or shared > held:
            bound = f"its {live} live blocks" if shared > live else f"the {held} blocks the claims hold"
            problem = f"says claim_shared_blocks = {shared}, more than {bound}"
        elif usable is not None and held + live - shared > usable:
            problem = (
                f"overcommits the pool: {held} blocks held by materialized preserving claims and "
                f"{live - shared} further live blocks in {usable} usable blocks"
            )
        else:
            return
        self._request_fail(
            R.capacity_state,
            request_id,
            f"admitting request {request_id} {problem}",
            self._request_state(request_id, "admission"),
            ("a deferral, or a demotion / expiry / release / offload first",),
        )

    def _resident_held(self, joining: ClaimRecord | None) -> int:
        """Distinct device blocks of the materialized preserving claims (and `joining`, which is
        becoming one), each counted once (`_distinct_blocks`); a claim without tracked blocks by
        its footprint."""
        self._count_scan(len(self.claims))
        tops = {
            claim: claim.footprint
            for claim in self.claims.values()
            if claim.profile.preserving and (claim is joining or claim.phase in RESIDENT)
        }
        return self._distinct_blocks(tops, lambda claim, top: top)

    def _distinct_blocks(
        self, tops: dict[ClaimRecord, int], untracked: Callable[[ClaimRecord, int], int]
    ) -> int:
        """Distinct device blocks holding the claims' positions below their `tops`: each tracked
        block once, however many claims share it; a position on the device in no named block (a
        report's, `restored_blocks`'s) once per content it was stored with, beside the named
        blocks' contents (claims sharing a prefix restore one set of blocks), or alone when it
        was never stored; a claim without tracked blocks by `untracked(claim, top)`. The one
        count behind the pool, the admission and the protected term."""
        blocks: set[int] = set()
        contents: set[str] = set()
        unnamed = 0
        for claim, top in tops.items():
            self._count_scan(len(claim.blocks) + len(claim.also_held) + top)
            blocks.update(key for key, position in claim.blocks.items() if position < top)
            blocks.update(key for key, position in claim.also_held if position < top)
            present = claim.present
            if present is None:
                unnamed += untracked(claim, top)
                continue
            assumed = present[:top].count(ASSUMED)
            if assumed:
                self._count_scan(len(claim.contents))
                known = [c for p, c in claim.contents.items() if p < top and present[p] == ASSUMED]
                contents.update(known)
                unnamed += assumed - len(known)
        if contents:
            self._count_scan(len(blocks))
            contents -= {self.block_hash[key] for key in blocks}
        return len(blocks) + len(contents) + unnamed

    def _check_capacity(self, ev: Any) -> None:
        numbers = tuple(getattr(ev, name) for name in CAPACITY_PROOF_FIELDS)
        if None in numbers:
            if ev.reason is ConflictReason.capacity:
                missing = [
                    name for name, value in zip(CAPACITY_PROOF_FIELDS, numbers, strict=True) if value is None
                ]
                self._request_fail(
                    R.capacity_arithmetic,
                    ev.request_id,
                    f"a capacity {self._event.removeprefix('active_request_')} without its capacity "
                    f"proof (missing {', '.join(missing)})",
                    self._request_state(ev.request_id, "capacity proof"),
                    ("all five capacity proof numbers",),
                )
            return  # a restoration conflict may omit its proof; a given one is checked below
        problem = capacity_problem(
            *numbers, capacity_reason=ev.reason is ConflictReason.capacity, header_usable=self.usable_blocks
        )
        if problem is not None:
            self._request_fail(
                R.capacity_arithmetic,
                ev.request_id,
                problem.message,
                self._request_state(ev.request_id, "capacity proof"),
                (problem.required,),
            )
        if self.usable_blocks is None:
            self.usable_blocks = ev.usable_blocks  # the pool every later proof must quote

    def _check_protected_term(self, ev: Any, blocking: list[str]) -> None:
        """The protected term is what the responsible preserving claims actually reserve: no
        more than their footprints together, and at least the device blocks the blocking claims
        hold, each block once (a claim whose blocks are not in the protected term did not cause
        the conflict)."""
        protected = ev.protected_resident_blocks
        if protected > self.reserved_blocks:
            self._request_fail(
                R.capacity_state,
                ev.request_id,
                f"protected_resident_blocks is {protected}, but the responsible preserving claims "
                f"reserve only {self.reserved_blocks} blocks",
                f"pool: {self.reserved_blocks} reserved",
                (f"protected_resident_blocks <= {self.reserved_blocks}",),
                *blocking,
            )
        claims = [self.claims[claim_id] for claim_id in blocking]
        self._count_scan(sum(len(claim.present or b"") for claim in claims))
        if sum(_holdings_bound(claim) for claim in claims) > protected:
            holds = self._blocks_held_by(claims)
            if holds > protected:
                self._request_fail(
                    R.capacity_state,
                    ev.request_id,
                    f"the blocking claims {', '.join(blocking)} hold {holds} device blocks, but "
                    f"protected_resident_blocks = {protected} leaves some of them out",
                    f"blocking claims hold {holds}",
                    (f"protected_resident_blocks >= {holds}",),
                    *blocking,
                )
        for claim_id, claim in zip(blocking, claims, strict=True):
            if claim.phase not in RESERVING:
                self._request_fail(
                    R.capacity_state,
                    ev.request_id,
                    f"{claim_id} is blamed for a capacity conflict but reserves no device blocks "
                    f"(it is {claim.phase})",
                    f"claim {claim_id} {claim.phase}",
                    ("blocking claims that reserve device blocks",),
                    claim_id,
                )

    def _blocks_held_by(self, claims: list[ClaimRecord], predicate_only: bool = False) -> int:
        """Distinct device blocks the claims hold (`_distinct_blocks`; a claim without tracked
        blocks by its reported leading run). With `predicate_only`, only the blocks of the
        leading positions their predicates need (what victim exclusion protects: a block past
        the predicate may be evicted without harm)."""
        tops = {
            claim: claim.required if predicate_only and claim.required is not None else claim.footprint
            for claim in claims
        }
        return self._distinct_blocks(tops, lambda claim, top: min(claim.reported_leading, top))


def _holdings_bound(claim: ClaimRecord) -> int:
    """At least the device blocks `claim` holds (exactly, unless blocks are shared): one per
    block holding one of its positions, one per position assumed from its materialized report."""
    present = claim.present
    if present is None:
        return claim.reported_leading
    return sum(present) - (ASSUMED - 1) * present.count(ASSUMED)


RULES: tuple[Rule, ...] = (
    Rule(
        "capacity.proof_arithmetic",
        R.capacity_arithmetic,
        "DESIGN 4 rule 4",
        "OccupancyModel._check_capacity",
        {
            "active_request_deferred": (*PROOF_NUMBERS, "reason"),
            "active_request_refused": (*PROOF_NUMBERS, "reason"),
        },
        ("capacity.refusal_only_when_over_capacity", "capacity.anchor_live_trace_numbers_rejected"),
    ),
    Rule(
        "capacity.state_each_block_counted_once",
        R.capacity_state,
        "DESIGN 4 rule 5",
        "OccupancyModel._distinct_blocks",
        {
            "active_request_admitted": ("active_live_blocks", "claim_shared_blocks"),
            "active_request_deferred": ("protected_resident_blocks", "blocking_claim_ids"),
            "active_request_refused": ("protected_resident_blocks", "blocking_claim_ids"),
            "resident_claim_materialized": ("leading_blocks",),
            "resident_claim_restored": ("restored_blocks",),
            "block_stored": ("claim_id", "position"),  # the blocks that confirm a restore or a report
        },
        ("capacity.refusal_justified_by_reserved_blocks",),
    ),
)
