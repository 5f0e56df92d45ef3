"""The oracle's abstract state of one trace (claims, blocks, requests, the pool), its cloning
and abstract key for the exhaustive search, and the helpers every handler judges with (the
choices C1-C17 are in kvclaims.oracle.interpreter's docstring)."""

from __future__ import annotations

from typing import Any, Self

from kvclaims.oracle.format import _is_int
from kvclaims.oracle.state import (
    ATTRIBUTION,
    CAPACITY,
    DURATION,
    IDENTITY,
    LIFECYCLE,
    NO_SILENT_HARM,
    PRESERVING,
    TWO_KEY,
    Block,
    Claim,
    Request,
    Violation,
)


class OracleCore:
    """The abstract state of one trace and `step(event)`; `finish()` says what is owed at the end."""

    def __init__(self, usable: int | None, block_size: int | None) -> None:
        self.pool = usable  # the pool the proofs refer to (C2)
        self.header_pool = usable
        self.block_size = block_size
        self.claims: dict[str, Claim] = {}
        self.blocks: dict[int, Block] = {}
        self.requests: dict[str, Request] = {}
        self.undecided: str | None = None  # why the trace cannot be accepted (inconclusive)
        self.steps = 0  # events that are model steps (everything but fault_injected)

    # -- cloning and the abstract state (for the exhaustive search) --

    def clone(self) -> Self:
        other = type(self).__new__(type(self))
        other.pool, other.header_pool, other.block_size = self.pool, self.header_pool, self.block_size
        other.claims = {k: c.copy() for k, c in self.claims.items()}
        other.blocks = {k: Block(b.block_hash, set(b.holders)) for k, b in self.blocks.items()}
        other.requests = {k: r.copy() for k, r in self.requests.items()}
        other.undecided, other.steps = self.undecided, self.steps
        return other

    def key(self) -> tuple[Any, ...]:
        return (
            self.pool,
            tuple(c.key() for _, c in sorted(self.claims.items())),
            tuple((k, b.block_hash, tuple(sorted(b.holders))) for k, b in sorted(self.blocks.items())),
            tuple((k, r.key()) for k, r in sorted(self.requests.items())),
            self.undecided,
            self.steps > 0,
        )

    # -- helpers --

    def _undecidable(self, why: str) -> None:
        if self.undecided is None:
            self.undecided = why

    def _accepted_claim(self, claim_id: str) -> Claim:
        """Rule 1: every claim event names a claim accepted earlier in the trace."""
        claim = self.claims.get(claim_id)
        if claim is None or claim.phase in ("submitted", "rejected"):
            state = "never submitted" if claim is None else claim.phase
            raise Violation(IDENTITY, f"{claim_id} was never accepted ({state})")
        return claim

    def _subject(self, event: dict[str, Any]) -> Claim:
        """The accepted claim a claim event is about, owing nothing that must come first."""
        claim = self._accepted_claim(event["claim_id"])
        self._named(claim, event["event"])
        return claim

    def _named(self, claim: Claim, event: str) -> None:
        """C5/C6: a claim that owes harm (or a two-key failure) must report it before anything
        else names it (DESIGN rule 6, seed 002)."""
        self._confirmed(claim)
        if claim.owes_harm and event != "resident_claim_harmed":
            raise Violation(
                NO_SILENT_HARM, f"{claim.claim_id} fell below its predicate; harm must come first"
            )
        if claim.mismatch and event not in ("resident_claim_restoration_failed", "resident_claim_harmed"):
            raise Violation(
                TWO_KEY, f"{claim.claim_id}: checkpoint mismatch must end in a restoration failure"
            )

    @staticmethod
    def _confirmed(claim: Claim) -> None:
        """C5: a materialized report its blocks had not shown must be confirmed by now."""
        if claim.unconfirmed:
            raise Violation(LIFECYCLE, f"{claim.claim_id}: materialized report never confirmed by its blocks")

    def _request(self, request_id: str) -> Request | None:
        return self.requests.get(request_id)

    def _reserving(self) -> list[Claim]:
        return [c for c in self.claims.values() if c.mode in PRESERVING and c.on_device()]

    def _held(self, claims: list[Claim], predicate_only: bool = False) -> int:
        """C1: distinct device blocks the claims hold (a block shared by two claims once; an
        assumed position, in a block the trace never named, once per content it was stored
        with beside the named blocks' contents, or as its own block if never stored); with
        `predicate_only`, only the blocks of the leading positions their predicates need (what
        victim exclusion protects: a block past the predicate may be evicted without harm)."""
        block_ids: set[int] = set()
        contents: set[str] = set()
        assumed = 0
        for claim in claims:
            upto = claim.required if predicate_only and claim.required is not None else claim.footprint
            for position, held in claim.positions.items():
                if position < upto:
                    block_ids.update(held)
            top = min(claim.assumed, upto)
            hidden = sum(1 for p in claim.gone if p < top) + sum(1 for p in claim.positions if p < top)
            unnamed = {p for p in claim.contents if p < top} - claim.gone - claim.positions.keys()
            known = [claim.contents[p] for p in unnamed]
            contents.update(known)
            assumed += top - hidden - len(known)
        contents -= {self.blocks[b].block_hash for b in block_ids if b in self.blocks}
        return len(block_ids) + len(contents) + assumed

    def _check_pool(self) -> None:
        """C1b (seed 001 s. 3.4): whenever a preserving claim comes to hold its predicate on the
        device (a materialized report, its own blocks, a confirmed restore), the distinct device
        blocks of the claims that hold theirs there fit in the pool."""
        if self.pool is None:
            return
        held = self._held([c for c in self._reserving() if c.held])
        if held > self.pool:
            raise Violation(CAPACITY, f"pool overcommitted: claims hold {held} blocks > {self.pool}")

    def _end_responsibility(self, claim: Claim, phase: str) -> None:
        """Demotion, expiry, release, harm: later loss is not harm; pending restores are
        cancelled so their requests may finish (C11, class 12)."""
        claim.phase = phase
        claim.pending.clear()
        claim.kv_back = claim.value_back = claim.in_place = False
        claim.owes_harm = False
        claim.mismatch = False

    def _after_blocks_changed(self, claim: Claim, before: bool) -> None:
        """C5: the predicate shown to hold by blocks, or fallen below it."""
        now = claim.holds()
        if claim.unconfirmed and claim.leading() >= claim.unconfirmed:
            claim.unconfirmed = 0
            if claim.mode in PRESERVING and claim.on_device():
                self._check_pool()  # C1b: a restore or report confirmed by later blocks
        if claim.on_device() and now and not claim.held:
            claim.held = True
            self._check_pool()
        if before and not now and claim.mode in PRESERVING and claim.on_device() and claim.held:
            claim.owes_harm = True  # seed 001 table 4: loss of an accepted preserving claim is harm

    def _take_position(self, claim_id: str, position: int, block_id: int) -> None:
        claim = self.claims.get(claim_id)
        if claim is None or block_id not in claim.positions.get(position, ()):
            return
        claim.positions[position].discard(block_id)
        if not claim.positions[position]:  # C4: a position stays while any block holds it
            self._lose_position(claim, position)

    def _lose_position(self, claim: Claim, position: int) -> None:
        before = claim.holds()
        claim.positions.pop(position, None)
        if position < claim.assumed:
            claim.gone.add(position)
        self._after_blocks_changed(claim, before)

    def _expiry_clock(self, claim: Claim, event: dict[str, Any]) -> None:
        """C3/C17: an expiry earlier than the promised end on any clock the claim carries is a
        violation (class 2); one the trace cannot place against that end is undecidable."""
        for clock, stamp, per_unit in CLOCKS:
            duration = claim.term(clock)[0]
            if duration is None:
                continue
            now = event.get(stamp)
            end, exact = _promised_end(claim, clock, per_unit)
            if _is_int(now) and end is not None and now < end:
                raise Violation(
                    DURATION,
                    f"{claim.claim_id} expired at {stamp} {now}, before {end}, the end of its "
                    f"{duration} {clock} term{'' if exact else ' (a lower bound: an extension)'}",
                )
            if not _is_int(now) or not exact:
                self._undecidable(
                    f"{claim.claim_id}: expiry of a {duration} {clock} claim, its end on {stamp} unknown"
                )

    def _extension(self, claim: Claim, event: dict[str, Any]) -> None:
        """C17: each clock the extension names gets the end `stamp + duration`: only a clock the
        terms carry, never past the cap, never before the end already promised; then the latest
        extension end is the later of the two."""
        for clock, stamp, per_unit in CLOCKS:
            given = event.get(f"duration_{clock}")
            if given is None:
                continue
            duration, cap, _, decided, extended = claim.term(clock)
            if duration is None:
                raise Violation(
                    DURATION, f"{claim.claim_id} extended on {clock}, a clock its terms do not carry"
                )
            now = event.get(stamp)
            if not _is_int(now):
                self._undecidable(f"{claim.claim_id}: an extension on {clock} without {stamp}")
                continue
            granted = now + given * per_unit
            if cap is not None and decided is not None and granted > decided + cap * per_unit:
                raise Violation(
                    DURATION,
                    f"{claim.claim_id} extended to {granted} on {stamp}, past its cap "
                    f"{decided + cap * per_unit} (max_duration_{clock} {cap})",
                )
            end, exact = _promised_end(claim, clock, per_unit)
            if end is not None and granted < end:
                raise Violation(
                    DURATION,
                    f"{claim.claim_id} extended to {granted} on {stamp}, before the end {end} it "
                    "already had: deadlines only extend",
                )
            if not exact:
                self._undecidable(f"{claim.claim_id}: an extension on {clock}, the end it had unknown")
            latest = granted if extended is None else max(extended, granted)
            if clock == "steps":
                claim.extended_step = latest
            else:
                claim.extended_ns = latest

    @staticmethod
    def _hit_restarts_clocks(claim: Claim, event: dict[str, Any]) -> None:
        """C3: refresh on hit moves each clock's start to the hit, never backwards."""
        if not claim.refresh_on_hit:
            return
        claim.accepted_step = _restarted(claim.accepted_step, event.get("engine_step"))
        claim.accepted_ns = _restarted(claim.accepted_ns, event.get("t_ns"))

    # -- the step function --

    def step(self, event: dict[str, Any]) -> None:
        name = event["event"]
        if name not in ("fault_injected", "trace_closed"):
            self.steps += 1
        getattr(self, "_" + name)(event)

    def finish(self) -> None:
        """What the trace still owes when it ends."""
        for claim in self.claims.values():
            self._confirmed(claim)
            if claim.owes_harm:  # rule 6
                raise Violation(
                    NO_SILENT_HARM, f"{claim.claim_id} fell below its predicate; no harm reported"
                )
            if claim.mismatch:  # rule 7
                raise Violation(TWO_KEY, f"{claim.claim_id}: checkpoint mismatch never ended in a failure")
        for request_id, request in self.requests.items():
            if request.owes_refusal is not None:  # rule 4 / seed 000 path B
                raise Violation(ATTRIBUTION, f"{request_id} owes a refusal naming {request.owes_refusal}")


# C3/C17: the duration clocks: (name in `duration_<name>` / `max_duration_<name>`, the stamp
# field it is judged on, stamp units per duration unit).
CLOCKS = (("steps", "engine_step", 1), ("ms", "t_ns", 1_000_000))


def _promised_end(claim: Claim, clock: str, per_unit: int) -> tuple[int | None, bool]:
    """C17: the stamp before which the claim may not expire on `clock`, and whether it is exact.
    The term runs `duration` from its start (the decision, or the last refreshing hit) or to the
    latest extension end, whichever is later, but never past `decision + cap`. An unknown start
    leaves the extension end as a lower bound; a cap with an unknown decision leaves nothing."""
    duration, cap, start, decided, extended = claim.term(clock)
    if cap is not None and decided is None:
        return None, False  # a bound could lie past the capped end
    if start is not None and duration is not None:
        end, exact = start + duration * per_unit, True
        if extended is not None and extended > end:
            end = extended
    elif extended is not None:
        end, exact = extended, False
    else:
        return None, False
    if cap is not None and decided is not None and end > decided + cap * per_unit:
        end = decided + cap * per_unit
    return end, exact


def _restarted(start: int | None, hit: Any) -> int | None:
    """C3: a clock restarted by a hit: unknown if the hit has no clock value, else never earlier."""
    if not _is_int(hit):
        return None
    return hit if start is None else max(start, hit)
