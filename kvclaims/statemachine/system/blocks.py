"""Block content and claim positions (DESIGN 4 rules 1 `identity`, 9 `block_identity` and 10
`no_silent_harm`): a block is its id and its content; a claim position is present while a device
block stored for it survives; a drop below the predicate is the lifecycle's predicate_broken.

Events: block_stored, block_removed (block_id, block_hash, claim_id, position, cache_level),
fault_injected (context only).
"""

from __future__ import annotations

from typing import Any

from kvclaims.spec.tables import DEVICE_CACHE_LEVELS
from kvclaims.spec.vocabulary import (
    TraceWitness,
)
from kvclaims.statemachine import lifecycle
from kvclaims.statemachine.lifecycle import (
    INITIAL,
    Event,
    Phase,
)
from kvclaims.statemachine.system.declarations import Rule
from kvclaims.statemachine.system.records import (
    _MAX_HOLDERS,
    _NO_PAIRS,
    _RETIRED,
    _UNDECIDED,
    ASSUMED,
    RESIDENT,
    RESPONSIBLE,
    ClaimRecord,
    OutOfBudget,
    R,
    Undecided,
)


class BlockModel:
    """The block rules, as `SystemState` methods."""

    def _block_claim(self, ev: Any) -> ClaimRecord | None:
        claim_id = ev.claim_id
        if claim_id is None:
            return None
        claim = self._known(claim_id)
        if claim is None or claim.phase is INITIAL:
            self._fail(
                R.identity,
                f"{self._event} names claim {claim_id}, which was never submitted or accepted "
                "(post-hoc claim naming)",
                subject=f"claim {claim_id}",
                state=lifecycle.describe(_UNDECIDED, Phase.absent),
                allowed=("resident_claim_accepted first",),
                ids=(claim_id,),
            )
        assert claim is not None
        # A retired claim keeps its phase, profile and footprint: its blocks may still be named
        # (post-release loss is legal, seed 001 table 4), within its footprint (if terms were known).
        known_footprint = claim.footprint or claim.phase not in _RETIRED
        if ev.position is not None and known_footprint and ev.position >= claim.footprint:
            self._claim_fail(
                claim,
                R.identity,
                f"{self._event} at position {ev.position}, outside its {claim.footprint}-block footprint",
            )
        return claim

    def _block_stored(self, ev: Any) -> None:
        claim_id = ev.claim_id
        position = ev.position
        claim = None if claim_id is None else self.claims.get(claim_id)
        key = ev.block_id
        if (
            claim is None
            or position is None
            or ev.cache_level is not None
            or claim.present is None
            or position >= claim.footprint
            or key in self.block_hash
        ):
            self._block_stored_rarely(ev)
            return
        self.block_hash[key] = ev.block_hash
        self._track(claim, key, position)

    def _block_stored_rarely(self, ev: Any) -> None:
        """The paths the hot one leaves out: unclaimed or host-tier blocks, a claim's first
        block, a block id already stored, a retired or undecided claim, and identity errors."""
        claim = self._block_claim(ev)
        level = ev.cache_level
        if level is not None and level.lower() not in DEVICE_CACHE_LEVELS:
            return
        key = ev.block_id
        held = self.block_hash.get(key)
        if held is not None and held != ev.block_hash:
            self._lose_owners(key)  # different content in a held block id: a loss for its holders
        self.block_hash[key] = ev.block_hash
        if claim is None or not self._tracks(claim):
            return
        if ev.position is None:
            self._unplaced(claim, key)
            return
        self._start_tracking(claim)
        self._track(claim, key, ev.position)

    @staticmethod
    def _tracks(claim: ClaimRecord) -> bool:
        """Whether the model follows the claim's blocks: from its acceptance until it retires
        (a submitted, rejected, released or harmed claim's blocks are ordinary cache)."""
        return claim.phase not in _RETIRED and claim.phase is not Phase.submitted

    def _start_tracking(self, claim: ClaimRecord) -> None:
        """At a claim's first claim-scoped block event: its presence map, holding the prefix
        it reported materialized (whatever phase it is in now: a demotion does not remove
        blocks, so neither a later partial store nor a named removal resets that prefix)."""
        if claim.present is not None:
            return
        claim.present = self._prefix_map(claim)
        if claim.reported_leading:
            _assume_prefix(claim, claim.reported_leading)
        if TraceWitness.claim_scoped_blocks not in self._complete:
            self._witness(TraceWitness.claim_scoped_blocks, (claim.accepted_at, self._at), claim.claim_id)

    def _track(self, claim: ClaimRecord, key: int, position: int) -> None:
        """Block `key` (its content already recorded) now holds `position` of `claim`'s prefix,
        beside its other holders, if it holds the content that position was first stored with."""
        content = self.block_hash[key]
        recorded = claim.contents.setdefault(position, content)
        if recorded != content:
            self._claim_fail(
                claim,
                R.block_identity,
                f"block {key} stored for position {position} with {content!r}, but that position "
                f"was stored with {recorded!r}: a claim position holds the content it was stored with",
            )
        owner = self.block_owner.get(key)
        if owner is None:
            self.block_owner[key] = claim
            claim.blocks[key] = position
        elif owner is claim and claim.blocks[key] == position:
            return  # the same block stored again: no new holder
        else:
            shared = self.shared_owners.setdefault(key, [])
            if (claim, position) in shared:
                return
            shared.append((claim, position))
            if claim.also_held is _NO_PAIRS:
                claim.also_held = set()
            claim.also_held.add((key, position))
        present = claim.present
        count = present[position]  # type: ignore[index]
        if count == 0 or count == ASSUMED:
            present[position] = 1  # type: ignore[index]
            if count == 0 and position == claim.leading:
                self._extend_leading(claim)
        elif count == _MAX_HOLDERS:
            raise OutOfBudget(f"more than {_MAX_HOLDERS} device blocks holding one claim position")
        else:
            present[position] = count + 1  # type: ignore[index]

    def _extend_leading(self, claim: ClaimRecord) -> None:
        present: bytearray = claim.present  # type: ignore[assignment]
        start = claim.leading + 1
        footprint = claim.footprint
        leading = present.find(0, start, footprint)  # one C scan, however long the run
        if leading < 0:
            leading = footprint
        self._count_scan(leading - start)
        claim.leading = leading
        if claim.unconfirmed is not None and leading >= claim.unconfirmed[0]:
            claim.unconfirmed = None
            if claim.profile.preserving and claim.phase in RESIDENT:
                # a restore (or report) confirmed by blocks that came after it: they count now
                self._check_occupancy(f"{claim.claim_id} confirmed by its blocks", joining=claim)
        required = claim.required
        if claim.phase is Phase.accepted and required is not None and leading >= required:
            # the claim's own blocks show its predicate: it is materialized, reported or not
            self._advance(claim, Event.materialize)

    def _owners_of(self, key: int) -> list[tuple[ClaimRecord, int]]:
        """Every (claim, position) block `key` held, forgetting them (not its content)."""
        owner = self.block_owner.pop(key, None)
        if owner is None:
            return []
        owned = [(owner, owner.blocks.pop(key))]
        if self.shared_owners:
            for holder, position in self.shared_owners.pop(key, ()):
                holder.also_held.discard((key, position))
                owned.append((holder, position))
        return owned

    def _lose_owners(self, key: int) -> bool:
        """Block `key` left the device tier (or now holds other content); False when no claim
        held it."""
        owned = self._owners_of(key)
        for claim, position in owned:
            self._lose(claim, position)
        return bool(owned)

    def _block_removed(self, ev: Any) -> None:
        if ev.claim_id is not None or ev.cache_level is not None:
            self._block_removed_rarely(ev)
            return
        self._forget_content(ev)
        if not self._lose_owners(ev.block_id) and not self._seen_eviction:
            self._seen_eviction = True
            self._witness(TraceWitness.ordinary_eviction_without_claim, (self._at,))

    def _forget_content(self, ev: Any) -> str | None:
        """A removal takes the block's recorded content with it; it must name that content
        (C4: a block is its id and its hash). Returns the content, None for an unknown id."""
        held = self.block_hash.get(ev.block_id)
        if held is not None and held != ev.block_hash:
            owner = self.block_owner.get(ev.block_id)
            self._fail(
                R.block_identity,
                f"block_removed says block {ev.block_id} held {ev.block_hash!r}, but it was stored "
                f"with {held!r}: a block is its id and its content",
                subject=f"block {ev.block_id}",
                state=f"block {ev.block_id} holds {held!r}",
                allowed=(f"block_hash == {held!r}",),
                ids=() if owner is None else (owner.claim_id,),
            )
        self.block_hash.pop(ev.block_id, None)
        return held

    def _block_removed_rarely(self, ev: Any) -> None:
        claim = self._block_claim(ev)
        level = ev.cache_level
        if level is not None and level.lower() not in DEVICE_CACHE_LEVELS:
            return
        known = self._forget_content(ev) is not None
        owned = self._owners_of(ev.block_id)
        position = ev.position
        if claim is not None and position is None and not known and self._tracks(claim):
            self._unplaced(claim, ev.block_id)
        if claim is not None and position is not None and self._tracks(claim):
            if known and not any(o is claim and p == position for o, p in owned):
                holders = ", ".join(f"{o.claim_id}@{p}" for o, p in owned) or "no claim"
                self._claim_fail(
                    claim,
                    R.block_identity,
                    f"block_removed names position {position} of {claim.claim_id}, but block "
                    f"{ev.block_id} was stored for {holders}",
                )
            if not known:  # a block the trace never stored, named for one of the claim's positions
                self._start_tracking(claim)
                count = claim.present[position]  # type: ignore[index]
                if count and count != ASSUMED:
                    self._claim_fail(
                        claim,
                        R.block_identity,
                        f"block_removed names position {position} of {claim.claim_id} in block "
                        f"{ev.block_id}, which the trace never stored, while that position is "
                        "stored in another block: the removal cannot be attributed",
                    )
                owned = [(claim, position)]
        if not owned:
            self._witness(TraceWitness.ordinary_eviction_without_claim, (self._at,))
        for owner, held_position in owned:  # a removal affects every holder, whichever it names
            self._lose(owner, held_position)

    def _unplaced(self, claim: ClaimRecord, key: int) -> None:
        """A claim-scoped block event the model cannot place (no `position`, and no stored block
        says which): never dropped silently, it leaves the claim's prefix undecidable."""
        self.undecided.append(
            Undecided(
                f"{self._event} names claim {claim.claim_id} for block {key} without field "
                "`position`, and no stored block places it: the claim's prefix is undecidable",
                self._at,
            )
        )

    def _prefix_map(self, claim: ClaimRecord) -> bytearray:
        """A fresh presence map for `claim`, counted against `max_prefix_positions`."""
        size = max(claim.footprint, claim.reported_leading)
        if self.prefix_positions + size > self.max_prefix_positions:
            raise OutOfBudget(f"claim prefixes spanning more than {self.max_prefix_positions} blocks")
        self.prefix_positions += size
        return bytearray(size)

    def _lose(self, claim: ClaimRecord, position: int) -> None:
        """One block holding `position` of `claim`'s prefix is gone; the position is gone when
        no other block holds it, and a drop below the predicate is the lifecycle's
        `predicate_broken`."""
        present = claim.present
        if present is None:
            return  # retired, or never tracked
        count = present[position]
        if 1 < count < ASSUMED:
            present[position] = count - 1  # another block still holds it
            return
        present[position] = 0
        if position >= claim.leading:
            return
        before = claim.leading
        claim.leading = position
        required = claim.required
        if required is not None and before >= required > position:
            if claim.phase in RESPONSIBLE:
                claim.broken_while_responsible = True
            self._advance(claim, Event.predicate_broken)
            self._settled_loss(claim)

    def _fault(self, ev: Any) -> None:
        """A fault injection is context for the counterexample, not a model step."""
        self.steps -= 1


_ASSUME = bytes(ASSUMED if count == 0 else count for count in range(256))


def _assume_prefix(claim: ClaimRecord, blocks: int) -> None:
    """The claim's first `blocks` positions are on the device though no block event named them
    (a materialized report before any of its blocks was seen, a restore's `restored_blocks`):
    each position no block holds is `ASSUMED`, so neither a later partial store nor a named
    removal can reset it (ignoring it would pass a silent harm)."""
    present = claim.present
    present[:blocks] = present[:blocks].translate(_ASSUME)  # type: ignore[index]
    gap = present.find(0)  # type: ignore[union-attr]
    claim.leading = min(claim.footprint, len(present) if gap < 0 else gap)  # type: ignore[arg-type]


RULES: tuple[Rule, ...] = (
    Rule(
        "blocks.a_position_is_held_by_its_stored_content",
        R.block_identity,
        "DESIGN 4 rule 9",
        "BlockModel._forget_content and BlockModel._track",
        {
            "block_stored": ("block_id", "block_hash", "claim_id", "position", "cache_level"),
            "block_removed": ("block_id", "block_hash", "claim_id", "position", "cache_level"),
        },
        ("blocks.holders_keep_their_content",),
    ),
    Rule(
        "harm.a_fallen_prefix_is_reported",
        R.no_silent_harm,
        "DESIGN 4 rule 10",
        "BlockModel._lose",
        {
            "block_stored": ("block_id", "block_hash"),
            "block_removed": ("block_id", "position"),
            "resident_claim_restored": ("restored_blocks",),
        },
        ("lifecycle.harm_only_for_accepted_unreleased_claims",),
    ),
)
