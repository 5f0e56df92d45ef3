"""The oracle's handlers of requests (rules 3 and 4, classes 1, 11, 14: admissions, conflicts,
reuses, finishes) and of blocks (classes 3, 4, 7; rule 6: stores, removals), on the state of
kvclaims.oracle.core."""

from __future__ import annotations

from typing import Any

from kvclaims.oracle.core import OracleCore
from kvclaims.oracle.state import (
    ATTRIBUTION,
    CAPACITY,
    DEVICE_TIERS,
    IDENTITY,
    LIFECYCLE,
    OFFLOAD_ORDER,
    PRESERVING,
    PROOF,
    RESPONSIBLE,
    RETIRED,
    SETTLED,
    TWO_KEY,
    Block,
    Claim,
    Request,
    Violation,
)


class RequestsAndBlocks(OracleCore):
    """Request and block events."""

    # requests (rules 3 and 4, classes 1, 11, 14)

    def _reuse_request(self, request_id: str) -> Request:
        """A request that reuses a claim: absent or admitted (C12)."""
        request = self._request(request_id)
        if request is None:
            request = self.requests[request_id] = Request("admitted")
        elif request.phase == "finished":
            raise Violation(IDENTITY, f"{request_id} already finished")
        elif request.phase not in ("admitted", "deferred"):  # C12: deferred, then served from cache
            raise Violation(LIFECYCLE, f"{request_id} reuses a claim while {request.phase}")
        request.phase = "admitted"
        return request

    def _active_request_admitted(self, event: dict[str, Any]) -> None:
        request_id = event["request_id"]
        request = self._request(request_id)
        if request is not None and request.phase == "finished":
            raise Violation(IDENTITY, f"{request_id} already finished")
        if request is not None and request.phase != "deferred":
            raise Violation(LIFECYCLE, f"admission of {request_id} while {request.phase}")
        if request is None:
            request = self.requests[request_id] = Request("admitted")
        request.phase = "admitted"
        reserved = self._held([c for c in self._reserving() if c.held], predicate_only=True)  # C1
        live = event["active_live_blocks"]
        shared = event.get("claim_shared_blocks")
        if shared is not None and (shared > live or shared > reserved):
            raise Violation(
                CAPACITY, f"claim_shared_blocks {shared} exceeds the live or the claim-held blocks"
            )
        if shared is None:
            shared = min(live, reserved)  # C1: unknown sharing, read as the most possible
        if self.pool is None:
            if reserved:
                self._undecidable("an admission beside reserved claims in a pool of unknown size")
        elif reserved + live - shared > self.pool:  # C1, seed 001 s. 3.4
            raise Violation(
                CAPACITY, f"pool overcommitted: {reserved} reserved + {live - shared} live > {self.pool}"
            )

    def _active_request_deferred(self, event: dict[str, Any]) -> None:
        self._conflict(event, refusal=False)

    def _active_request_refused(self, event: dict[str, Any]) -> None:
        self._conflict(event, refusal=True)

    def _conflict(self, event: dict[str, Any], *, refusal: bool) -> None:
        request_id, reason, blocking = event["request_id"], event["reason"], event["blocking_claim_ids"]
        numbers = [event.get(name) for name in PROOF]
        if reason == "capacity" and None in numbers:  # rule 3
            raise Violation(CAPACITY, "a capacity conflict without its capacity proof")
        if None not in numbers:
            protected, active, total, usable, shortfall = numbers
            if total != protected + active or shortfall != max(0, total - usable):
                raise Violation(CAPACITY, "capacity proof arithmetic does not add up")
            if self.pool is not None and usable != self.pool:  # C2: the pool's usable_blocks
                raise Violation(CAPACITY, f"proof's usable_blocks {usable} is not the pool's {self.pool}")
            if reason == "capacity" and shortfall <= 0:
                raise Violation(CAPACITY, "a capacity conflict needs a positive shortfall")
        if not blocking:  # rule 4
            raise Violation(ATTRIBUTION, "no blocking claim named")
        if len(set(blocking)) != len(blocking):
            raise Violation(ATTRIBUTION, "a blocking claim named twice")
        request = self._request(request_id)
        if request is not None and request.phase == "finished":
            rule = ATTRIBUTION if reason == "restoration_failed" else IDENTITY
            raise Violation(rule, f"{request_id} already finished")
        claims = []
        for claim_id in blocking:
            claim = self._accepted_claim(claim_id)
            self._named(claim, event["event"])
            claims.append(claim)
        if reason == "restoration_failed":  # rule 4, seed 000 path B, C10
            if request is not None and request.owes_refusal is not None:
                failed = request.owes_refusal
            elif request is not None and len(blocking) == 1 and blocking[0] in request.discharged:
                failed = blocking[0]  # a refusal after a restoration-failure deferral
            else:
                raise Violation(
                    ATTRIBUTION, "no claim's restoration failed (outcome refusal) for this request"
                )
            if list(blocking) != [failed]:
                raise Violation(ATTRIBUTION, f"a restoration refusal must name exactly {failed}")
            if request.phase not in ("admitted", "deferred"):
                raise Violation(LIFECYCLE, f"{request_id} refused or deferred while {request.phase}")
            request.discharged.add(failed)
            request.owes_refusal = None
            request.phase = "refused" if refusal else "deferred"
            return
        # a capacity conflict: the blocking claims reserve now (C13), the proof matches (C2)
        for claim in claims:
            if claim.mode not in PRESERVING:
                raise Violation(ATTRIBUTION, f"{claim.claim_id} carries no preservation obligation")
            if not claim.on_device():
                raise Violation(ATTRIBUTION, f"{claim.claim_id} reserves nothing while {claim.phase}")
        protected = numbers[0]
        if protected < self._held(claims):
            raise Violation(CAPACITY, "protected_resident_blocks leaves out blocks the blocking claims hold")
        if protected > sum(c.footprint for c in self._reserving()) or protected > numbers[3]:
            raise Violation(CAPACITY, "protected_resident_blocks exceeds what the claims reserve or the pool")
        if self.pool is None:
            self.pool = numbers[3]
        phase = request.phase if request is not None else None
        allowed = ("admitted", "deferred", None) if not refusal else ("deferred", None)
        if phase not in allowed:
            raise Violation(
                LIFECYCLE, f"capacity {'refusal' if refusal else 'deferral'} of {request_id} while {phase}"
            )
        if request is None:
            request = self.requests[request_id] = Request("deferred")
        request.phase = "refused" if refusal else "deferred"

    def _request_reused(self, event: dict[str, Any]) -> None:
        claim = self._subject(event)
        request_id = event["request_id"]
        request = self._request(request_id)
        if event["predicate_satisfied"]:
            if request is not None and claim.claim_id in request.failed:  # rule 5
                raise Violation(
                    OFFLOAD_ORDER, "a satisfied reuse after its restoration failed (fallback recompute)"
                )
            if claim.phase in ("offloaded", "restoring"):  # rule 5: restore before reuse
                raise Violation(OFFLOAD_ORDER, f"satisfied reuse of {claim.claim_id} before it was restored")
            shown = claim.phase == "accepted" and claim.tracked and claim.holds()  # class 4
            if claim.phase not in ("materialized", *SETTLED) and not shown:
                raise Violation(LIFECYCLE, f"satisfied reuse of {claim.claim_id} while {claim.phase}")
            if claim.required is not None and event["cached_blocks"] < claim.required:
                raise Violation(
                    LIFECYCLE, "satisfied reuse with fewer cached blocks than the predicate needs"
                )
            if claim.phase == "materialized" and claim.tracked and not claim.holds():  # C8
                raise Violation(LIFECYCLE, f"satisfied reuse of {claim.claim_id} while its blocks fail it")
            resumed = event.get("checkpoint")
            # rule 7, resumed in place; it binds while the runtime is responsible (DESIGN 4)
            if claim.two_key and resumed is not None and claim.phase in RESPONSIBLE:
                if claim.checkpoint != (resumed["boundary"], resumed["value_hash"]):
                    raise Violation(
                        TWO_KEY, f"satisfied in-place resume of {claim.claim_id} with another value"
                    )
            if request_id in claim.restored_for:  # C6: the restore for this request is confirmed
                claim.restored_for.discard(request_id)
                if claim.required is not None and not claim.holds():
                    raise Violation(
                        OFFLOAD_ORDER,
                        f"satisfied reuse after a restore of {claim.claim_id} nothing confirmed",
                    )
            self._hit_restarts_clocks(claim, event)
        self._reuse_request(request_id)

    def _request_finished(self, event: dict[str, Any]) -> None:
        request_id = event["request_id"]
        request = self._request(request_id)
        if request is None:  # C12: a client abort before the request reached the pool
            self.requests[request_id] = Request("finished")
            return
        if request.phase == "finished":
            raise Violation(IDENTITY, f"{request_id} already finished")
        if request.owes_refusal is not None:  # rule 4
            raise Violation(ATTRIBUTION, f"{request_id} finished before its fail-closed refusal")
        for claim in self.claims.values():
            if request_id in claim.pending:  # rule 5: served without restoration
                raise Violation(
                    OFFLOAD_ORDER, f"{request_id} finished with the restore of {claim.claim_id} pending"
                )
        request.phase = "finished"

    # blocks (classes 3, 4, 7; rule 6)

    def _block_claim(self, event: dict[str, Any]) -> Claim | None:
        """The claim a block event names and tracks, if any (C4)."""
        claim_id = event.get("claim_id")
        if claim_id is None:
            return None
        claim = self.claims.get(claim_id)
        if claim is None:
            raise Violation(IDENTITY, f"block event names {claim_id}, never submitted (post-hoc naming)")
        position = event.get("position")
        known = claim.terms != ()  # a claim rejected without a submission has no footprint
        if known and position is not None and position >= claim.footprint:  # also before the decision
            raise Violation(IDENTITY, f"position {position} outside {claim_id}'s footprint")
        if claim.phase in ("submitted", "rejected"):
            return None
        if claim.phase in RETIRED:  # C4: a retired claim's blocks are ordinary cache entries
            return None
        if position is None:  # a live claim's block it cannot place is never dropped silently
            self._undecidable(f"block {event['block_id']} names {claim_id} without a position")
            return None
        return claim

    def _block_stored(self, event: dict[str, Any]) -> None:
        if event.get("cache_level") is not None and event["cache_level"].lower() not in DEVICE_TIERS:
            self._block_claim(event)
            return
        claim = self._block_claim(event)
        block_id, block_hash = event["block_id"], event["block_hash"]
        block = self.blocks.get(block_id)
        if block is not None and block.block_hash != block_hash:  # C4: new content in a held id
            self._remove_block(block_id)
            block = None
        if block is None:
            block = self.blocks[block_id] = Block(block_hash)
        if claim is None:
            return
        position = event["position"]
        if claim.contents.setdefault(position, block_hash) != block_hash:
            raise Violation(
                IDENTITY, f"{claim.claim_id}@{position} stored with another hash than it first was"
            )
        claim.tracked = True
        before = claim.holds()
        claim.positions.setdefault(position, set()).add(block_id)
        claim.gone.discard(position)
        block.holders.add((claim.claim_id, position))
        self._after_blocks_changed(claim, before)

    def _remove_block(self, block_id: int) -> None:
        """The block leaves the device: every holder loses its position (C4)."""
        block = self.blocks.pop(block_id)
        for claim_id, position in sorted(block.holders):
            self._take_position(claim_id, position, block_id)

    def _block_removed(self, event: dict[str, Any]) -> None:
        if event.get("cache_level") is not None and event["cache_level"].lower() not in DEVICE_TIERS:
            self._block_claim(event)
            return
        claim = self._block_claim(event)
        block_id = event["block_id"]
        block = self.blocks.get(block_id)
        if block is not None:
            if block.block_hash != event["block_hash"]:
                raise Violation(
                    IDENTITY, f"block {block_id} removed with another hash than it was stored with"
                )
            if claim is not None and (claim.claim_id, event["position"]) not in block.holders:
                raise Violation(
                    IDENTITY, f"block {block_id} was not stored for {claim.claim_id}@{event['position']}"
                )
            self._remove_block(block_id)
            return
        if claim is not None:  # a block the trace never stored, named for a claim's position
            claim.tracked = True
            position = event["position"]
            if position in claim.positions:
                raise Violation(IDENTITY, f"{claim.claim_id}@{position} is stored in another block")
            if claim.present(position):  # one of the positions it reported materialized
                self._lose_position(claim, position)

    def _fault_injected(self, event: dict[str, Any]) -> None:
        """Context for a counterexample, not a model step."""

    def _trace_closed(self, event: dict[str, Any]) -> None:
        """The writer ended the trace cleanly (`drive` checks that nothing follows)."""
