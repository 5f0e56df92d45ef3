"""A brute-force reference interpreter of kvclaims trace v1: the oracle that checks the checker.

It is written from DESIGN section 4 (rules 1-7), seeds 000/001/002 and issue 12's rule classes
1-7 and 10-14, and shares no deciding code with `kvclaims.refinement` or
`kvclaims.statemachine`: it parses JSON itself, keeps a dict of claims, a dict of blocks and a
dict of requests, and decides every event with an explicit if-chain. Clarity over speed.

    verdict = judge(ndjson_bytes)          # Verdict(outcome, rule, line, message)

Outcomes: `accepted`, `rejected` (with the rule: the names of DESIGN 4's seven rules),
`inconclusive` (nothing violated, but something could not be decided), `invalid` (not a trace).

Where the spec is silent the oracle takes the conservative (fail-closed) reading. Its choices:

C1  Pool reservation (issue 12 class 1, seed 001 s. 3.4). A claim *reserves* the device blocks
    it holds while it is preserving and in `accepted` or `materialized` (an offloaded or
    restoring claim's blocks are in another tier; seed 001's protected term is the materialized
    60 blocks, not a promise). Blocks are counted once however many claims share them. At every
    `active_request_admitted`, the blocks of the leading positions the predicates need, of the
    reserving claims that held their predicate (the protected ones: blocks stored toward a
    predicate not yet shown, or past it, are ordinary cache, evictable with no harm owed) + the
    request's live blocks - `claim_shared_blocks` (its live blocks
    those claims hold) must be <= usable_blocks; `claim_shared_blocks` may not exceed the live
    or the protected blocks. Absent, it is read as the most sharing possible (min of the two),
    so each side fits alone. Live blocks are never summed across requests: requests share
    prefix blocks (vLLM), and trace v1 does not say which.
C2  Capacity proofs are checked against that state: every blocking claim reserves now; the
    device blocks the blocking claims hold <= protected_resident_blocks <= the footprints of all
    reserving claims (a runtime may reserve a footprint at acceptance, seed 001 table 5
    "resident reserve") and <= usable_blocks (nothing protects more than the pool); the
    proof's usable_blocks is the pool's. Without a header pool the first proof's usable_blocks
    becomes the pool; an admission while something is reserved and no pool is known is
    undecidable (inconclusive). A capacity *deferral*, like a refusal, needs a positive
    shortfall: if the request fits there is no capacity conflict to report.
C3  Time (class 2): the step clock is the optional integer `engine_step` field of the accepting
    and the expiring event (the runtime's own context field, trace-format.md), the wall clock
    its `t_ns` (nanoseconds) for `duration_ms`. Expiry with both known and fewer than
    duration_steps steps (duration_ms milliseconds) apart is a duration violation; expiry of a
    claim with a duration and no clock on either event is undecidable (inconclusive). With
    `refresh_on_hit` a satisfied reuse of the claim restarts its clocks at the reuse's own
    values, but never earlier than they stood (a hit stamped earlier cannot shorten the promise);
    a reuse without a clock value leaves that clock unknown. This covers `restoration_failed`
    with outcome `expiry` too.
C4  Block identity (class 3): a device block is (block_id, block_hash). Storing a different hash
    into a held id, and removing a block id, takes that position from *every* claim that held it.
    A removal whose hash differs from the stored one, or that names a (claim, position) the block
    was not stored for, is an identity violation; so is a removal of a block never stored that
    names a (claim, position) another block holds. A position may be held by several blocks (vLLM
    caches duplicates) and stays while any of them does. Blocks in a tier other than gpu/device
    are ignored. A block event naming a claim that was never submitted is post-hoc naming
    (identity); one naming a submitted, rejected, released or harmed claim is not tracked (no
    responsibility: a retired claim's blocks are ordinary cache).
C5  Harm from blocks (class 4): a preserving claim *held* its predicate once a `materialized`
    report or its own blocks showed it while responsible; a later fall below it owes
    `resident_claim_harmed` before any other event naming the claim (block events excepted) and
    before the end. A claim materialized without block events is assumed to hold the leading
    blocks it reported; later stores only add positions (a partial store never resets a
    reported prefix). A `materialized` report larger than what the claim's own tracked blocks
    show must be confirmed by its blocks before any other event names the claim and before the
    end (the seed's own BlockPool traces report materialization just before the last block's
    store; an immediate rule rejected them).
C6  Restores (class 5): `restored_blocks` puts that many leading blocks back on the device. A
    restore of a claim whose blocks are tracked that they do not show owes the confirmation a
    materialized report owes (C5); an untracked claim's prefix leaves the device at offload, so
    the first satisfied reuse by the restoring request needs `restored_blocks` to reach the
    predicate. A two-key claim is restored only when both keys arrived
    (a `restored` for the KV side, then a `checkpoint_restored` whose boundary and value_hash
    equal the materialization checkpoint: trace-format.md, KV blocks first); a mismatching checkpoint owes a
    restoration failure (before the end and before anything else names the claim).
    In place (seed 002: a hybrid resume restores the non-KV state, payload -> scratch -> live
    slot -> post-restore view, at the KV boundary): a materialized two-key claim may get a
    `restore_required` without an offload; its KV key stays on the device (it reserves and its
    loss is loss of a materialized claim), and its failure may not have outcome refusal (no
    other tier to return to: the outcome ends responsibility).
C7  Terms (class 6, DESIGN 4 rule 2): `resident_claim_accepted` after a submission repeats the
    submitted terms (mode, footprint, predicate, durations, refresh-on-hit, caps: C17) exactly (terms);
    `resident_claim_conditionally_accepted` accepts a submitted claim on other terms, which bind
    from then on, and needs the submission (terms). Either names the submitted owner and object
    (identity: a claim is one owner's one object).
C8  Lost/harmed agree with blocks (class 7): `harmed` needs leading < required == the claim's
    required; `lost` needs leading < required (also after release); when the claim's blocks are
    tracked the reported leading_blocks must equal what they show, and a harm report while they
    still show the predicate is a violation (not after release: C4). `lost` of a responsible
    preserving claim is silent harm. Harm of a claim that never held is a lifecycle violation.
    A satisfied reuse of a responsible claim whose tracked blocks no longer show its predicate is a lifecycle
    violation (after release it is ordinary cache behaviour, DESIGN appendix).
C9  Offload (class 10, seed 001 table 3, seed 000 s. 3): legal for offloadable and hard_protected
    claims whose predicate held; not for other modes.
C10 Restoration-failure deferral (class 11): a `restoration_failed` with outcome refusal owes the
    request a fail-closed active outcome naming exactly that claim; a refusal or a deferral with
    reason `restoration_failed` discharges it. After such a deferral the request may be refused,
    admitted or finished; it may never report a satisfied reuse of that claim.
C11 Pending restores (class 12): demotion, expiry, release or harm of a claim cancels its pending
    restores, so the waiting request may finish.
C12 Requests (class 14): `request_finished` of a request never seen (a client abort before it
    reached the pool) is accepted and retires the id; a reuse needs an absent, admitted or
    deferred request (a deferred request served from the cache is thereby admitted, as vLLM
    schedules a waiting request with a prefix hit); a capacity refusal comes
    from an absent or deferred request; an admitted request is deferred first.
C13 Blocking claims of a capacity conflict must be preserving and reserve now (not offloaded,
    restoring, settled or owing harm); rule 4's "accepted, unreleased" read strictly.
C14 A trace with no event other than `fault_injected` is inconclusive (nothing to accept). An
    unknown event type makes an otherwise clean trace inconclusive; so do the router stream's
    `route_decided` and `route_reuse_reported` in one engine's stream (trace-format.md: they are
    judged only across a fleet's streams, which this oracle does not do yet).
C15 Input: duplicate JSON keys, a bool where an integer is due, a float, a missing or mistyped
    required field, a block count or position past 2^24, a non-increasing seq, a clock
    (`engine_step`, `t_ns`) that is not a non-negative integer on any event, a header
    `engine_id` or `cache_identity` of the wrong shape: invalid. (A
    misspelt unknown field, which trace-format.md makes invalid, is not modelled: unknown
    fields are ignored.)
C16 End of stream (trace-format.md): see `drive`.
C17 Soft terms (DESIGN 6.3, rule 7). A cap `max_duration_steps` / `max_duration_ms` is part of
    the terms (C7) and needs the duration of its own clock, no longer than it; an extension
    `resident_claim_extended` gives `duration_steps` and/or `duration_ms` (else: invalid, C15).
    On each clock the promised end is min(max(start + duration, latest extension end),
    decision + cap), start as in C3 and the decision the accepting event's stamp; no cap, no min.
    An expiry before it is a duration violation; with the decision's stamp missing and a cap,
    or the start missing, it is undecidable, except that the latest extension end is then a
    lower bound (an expiry before it is a violation). An extension is legal only while
    responsible (accepted, materialized, offloaded, restoring, in place too: lifecycle after
    that, identity before acceptance, harm or a two-key failure first as for any event); per
    clock it names: a clock the terms lack is a duration violation; no stamp on the event,
    undecidable; its end (stamp + duration) past the cap, or before the current promised end
    (deadlines only extend), is a duration violation; then the latest extension end is the
    later of the two.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from kvclaims.oracle.format import SCHEMA, BadInput, _is_int, _parse_line, parse_event, parse_header
from kvclaims.oracle.state import (
    ACCEPTED,
    IDENTITY,
    INCONCLUSIVE,
    INVALID,
    LIFECYCLE,
    MAY_OFFLOAD,
    NO_SILENT_HARM,
    OFFLOAD_ORDER,
    PRESERVING,
    REJECTED,
    RESERVING,
    RESPONSIBLE,
    RETIRED,
    SETTLED,
    TERMS,
    TWO_KEY,
    Claim,
    Verdict,
    Violation,
)
from kvclaims.oracle.traffic import RequestsAndBlocks

__all__ = [
    "ACCEPTED",
    "INCONCLUSIVE",
    "INVALID",
    "REJECTED",
    "BadInput",
    "Oracle",
    "Verdict",
    "Violation",
    "conclude",
    "drive",
    "judge",
    "parse_event",
    "parse_header",
]


# --- the interpreter ---------------------------------------------------------------------------


class Oracle(RequestsAndBlocks):
    """The abstract state of one trace and `step(event)`; `finish()` says what is owed at the end.
    Claim events are decided here, request and block events in kvclaims.oracle.traffic."""

    # claim decisions (rule 1, class 6)

    def _terms(self, event: dict[str, Any]) -> tuple[Any, ...]:
        predicate = json.dumps(self._in_blocks(event["predicate"]), sort_keys=True)
        return (
            event["owner_scope"],
            event["object_id"],
            event["mode"],
            event["footprint_blocks"],
            predicate,
            event.get("duration_steps"),
            event.get("duration_ms"),
            event.get("refresh_on_hit", False),
            event.get("max_duration_steps"),  # C17: a cap is part of the terms
            event.get("max_duration_ms"),
        )

    def _in_blocks(self, predicate: dict[str, Any]) -> dict[str, Any]:
        """C7 compares terms in one unit: a token count is its blocks, rounded up."""
        if "tokens" not in predicate or self.block_size is None:
            return predicate
        blocks = -(-predicate["tokens"] // self.block_size)
        return {**{k: v for k, v in predicate.items() if k != "tokens"}, "blocks": blocks}

    def _unit_unknown(self, submitted: tuple[Any, ...], accepted: tuple[Any, ...]) -> bool:
        """Terms that differ only in a predicate counted in tokens on one side, with no
        block_size to round it by: whether they changed cannot be decided."""
        if self.block_size is not None or submitted[:4] + submitted[5:] != accepted[:4] + accepted[5:]:
            return False
        return '"tokens"' in submitted[4] or '"tokens"' in accepted[4]

    def _set_terms(self, claim: Claim, event: dict[str, Any]) -> None:
        predicate = event["predicate"]
        claim.mode = event["mode"]
        claim.footprint = event["footprint_blocks"]
        claim.duration = event.get("duration_steps")
        claim.duration_ms = event.get("duration_ms")
        claim.refresh_on_hit = event.get("refresh_on_hit", False)
        claim.cap_steps = event.get("max_duration_steps")
        claim.cap_ms = event.get("max_duration_ms")
        claim.two_key = predicate["kind"] == "hybrid_two_key"
        if claim.two_key:
            claim.required = predicate["boundary_blocks"]
        elif "blocks" in predicate:
            claim.required = predicate["blocks"]
        elif self.block_size is not None:
            claim.required = -(-predicate["tokens"] // self.block_size)
        else:
            claim.required = None
            self._undecidable(f"{claim.claim_id}: a token predicate and no block_size")
        if claim.required is not None and claim.required > claim.footprint:
            raise Violation(IDENTITY, f"{claim.claim_id}: predicate needs more blocks than its footprint")

    def _resident_claim_submitted(self, event: dict[str, Any]) -> None:
        claim_id = event["claim_id"]
        if claim_id in self.claims:
            raise Violation(IDENTITY, f"{claim_id} is decided once")
        claim = Claim(claim_id, "submitted", self._terms(event))
        self._set_terms(claim, event)
        self.claims[claim_id] = claim

    def _resident_claim_accepted(self, event: dict[str, Any]) -> None:
        claim_id = event["claim_id"]
        claim = self.claims.get(claim_id)
        if claim is not None and claim.phase != "submitted":
            raise Violation(
                IDENTITY, f"{claim_id} accepted twice (duplicate ownership) or after {claim.phase}"
            )
        terms = self._terms(event)
        if claim is not None and claim.terms[:2] != terms[:2]:
            raise Violation(IDENTITY, f"{claim_id}: accepted for another owner or object")
        if claim is not None and claim.terms != terms:  # C7, class 6
            if self._unit_unknown(claim.terms, terms):
                self._undecidable(f"{claim_id}: terms in tokens and blocks, and no block_size")
            else:
                raise Violation(TERMS, f"{claim_id}: accepted terms differ from the submitted ones")
        self._accept(claim_id, terms, event)

    def _accept(self, claim_id: str, terms: tuple[Any, ...], event: dict[str, Any]) -> None:
        claim = Claim(claim_id, "accepted", terms)
        self._set_terms(claim, event)
        step, now = event.get("engine_step"), event.get("t_ns")
        claim.accepted_step = claim.decided_step = step if _is_int(step) else None
        claim.accepted_ns = claim.decided_ns = now if _is_int(now) else None
        self.claims[claim_id] = claim

    def _resident_claim_conditionally_accepted(self, event: dict[str, Any]) -> None:
        """C7: other terms than the submitted ones, for the same owner and object; the new terms
        bind from here. Only a submitted claim can be accepted on changed terms."""
        claim_id = event["claim_id"]
        claim = self.claims.get(claim_id)
        if claim is None:
            raise Violation(TERMS, f"{claim_id} conditionally accepted, never submitted")
        if claim.phase != "submitted":
            raise Violation(IDENTITY, f"{claim_id} accepted twice or after {claim.phase}")
        terms = self._terms(event)
        if terms[:2] != claim.terms[:2]:
            raise Violation(IDENTITY, f"{claim_id}: accepted for another owner or object")
        self._accept(claim_id, terms, event)

    def _resident_claim_rejected(self, event: dict[str, Any]) -> None:
        claim_id = event["claim_id"]
        claim = self.claims.get(claim_id)
        if claim is not None and claim.phase != "submitted":
            raise Violation(IDENTITY, f"{claim_id} is decided once")
        if claim is None:
            claim = self.claims[claim_id] = Claim(claim_id, "rejected", ())
        claim.phase = "rejected"

    # soft terms (DESIGN 6.3, C17)

    def _resident_claim_extended(self, event: dict[str, Any]) -> None:
        """C17: a self-loop of a claim the runtime still answers for; its clocks in `_extension`."""
        claim = self._subject(event)  # identity before acceptance; harm or a two-key failure first
        if claim.phase not in RESPONSIBLE:
            raise Violation(LIFECYCLE, f"extension of {claim.claim_id} while {claim.phase}")
        self._extension(claim, event)

    # materialization (seed 001 s. 3.1, L6; seed 002)

    def _resident_claim_materialized(self, event: dict[str, Any]) -> None:
        claim = self._subject(event)
        if claim.phase not in RESERVING:
            raise Violation(LIFECYCLE, f"{claim.claim_id} materialized while {claim.phase}")
        leading = event["leading_blocks"]
        if claim.required is not None and leading < claim.required:
            raise Violation(LIFECYCLE, f"{claim.claim_id} materialized below its predicate")
        if leading > claim.footprint:
            raise Violation(LIFECYCLE, f"{claim.claim_id} materialized beyond its footprint")
        if claim.two_key:
            checkpoint = event.get("checkpoint")
            if checkpoint is None:
                raise Violation(
                    TWO_KEY, f"{claim.claim_id}: a two-key claim materialized without a checkpoint"
                )
            if checkpoint["boundary"] != claim.required:
                raise Violation(TWO_KEY, f"{claim.claim_id}: checkpoint boundary is not the predicate's")
            key = (checkpoint["boundary"], checkpoint["value_hash"])
            if claim.checkpoint is not None and claim.checkpoint != key:  # fixed when first recorded
                raise Violation(TWO_KEY, f"{claim.claim_id}: a second materialization replaced its state key")
            claim.checkpoint = key
        if claim.leading() < leading:
            if claim.tracked:  # C5: its own blocks must confirm it before its next event
                claim.unconfirmed = leading
            else:  # C5: assumed only without block events (else any store would confirm it)
                claim.assumed, claim.gone = leading, set()  # no allocation sized by the number
        claim.phase = "materialized"
        claim.held = True
        self._check_pool()

    # responsibility ends (seed 001 table 4, L4/L5)

    def _responsible(self, event: dict[str, Any]) -> Claim:
        claim = self._subject(event)
        if claim.phase not in RESPONSIBLE:
            raise Violation(LIFECYCLE, f"{event['event']} of {claim.claim_id} while {claim.phase}")
        return claim

    def _resident_claim_demoted(self, event: dict[str, Any]) -> None:
        self._end_responsibility(self._responsible(event), "demoted")

    def _resident_claim_expired(self, event: dict[str, Any]) -> None:
        claim = self._responsible(event)
        self._expiry_clock(claim, event)
        self._end_responsibility(claim, "expired")

    def _resident_claim_released(self, event: dict[str, Any]) -> None:
        claim = self._subject(event)
        if claim.phase not in RESPONSIBLE | {"demoted", "expired"}:
            raise Violation(LIFECYCLE, f"release of {claim.claim_id} while {claim.phase}")
        self._end_responsibility(claim, "released")

    # harm and loss (seed 001 table 4, rule 6, classes 4 and 7)

    def _resident_claim_harmed(self, event: dict[str, Any]) -> None:
        claim = self._accepted_claim(event["claim_id"])
        self._confirmed(claim)
        if claim.mode not in PRESERVING:
            raise Violation(
                LIFECYCLE, f"{claim.claim_id} has no preservation obligation: it is lost, not harmed"
            )
        if not claim.owes_harm:
            if claim.phase not in RESPONSIBLE or not claim.held:
                raise Violation(LIFECYCLE, f"harm of {claim.claim_id} while {claim.phase} (never held)")
            if claim.tracked and claim.on_device() and claim.holds():
                raise Violation(
                    NO_SILENT_HARM, f"harm of {claim.claim_id} while its blocks hold the predicate"
                )
        if event["leading_blocks"] >= event["required_blocks"]:
            raise Violation(NO_SILENT_HARM, "harm reported while its own numbers hold the predicate")
        if claim.required is not None and event["required_blocks"] != claim.required:
            raise Violation(NO_SILENT_HARM, "harm reports another required_blocks than the predicate's")
        if claim.tracked and claim.on_device() and event["leading_blocks"] != claim.leading():
            raise Violation(NO_SILENT_HARM, "harm reports another leading_blocks than its blocks show")
        self._end_responsibility(claim, "harmed")

    def _resident_claim_lost(self, event: dict[str, Any]) -> None:
        claim = self._subject(event)
        if claim.mode in PRESERVING and claim.phase in RESPONSIBLE:
            raise Violation(
                NO_SILENT_HARM, f"{claim.claim_id} has a preservation obligation: its loss is harm"
            )
        if not claim.on_device() and claim.phase not in SETTLED:
            raise Violation(LIFECYCLE, f"loss of {claim.claim_id} while {claim.phase}")
        leading = event["leading_blocks"]
        if claim.required is not None and leading >= claim.required:
            raise Violation(LIFECYCLE, "loss reported while its own numbers hold the predicate")
        if claim.tracked and claim.phase not in RETIRED and leading != claim.leading():
            raise Violation(LIFECYCLE, "loss reports another leading_blocks than its blocks show")
        claim.assumed = min(claim.assumed, leading)  # C5: a reported prefix is gone past the loss
        if claim.on_device():
            claim.phase = "accepted"
            claim.pending.clear()
            claim.kv_back = claim.in_place = False

    # offload and restore (seed 000 paths A/B, rule 5, classes 5, 10, 11, 12)

    def _resident_claim_offloaded(self, event: dict[str, Any]) -> None:
        claim = self._subject(event)
        if claim.mode not in MAY_OFFLOAD:
            raise Violation(LIFECYCLE, f"{claim.mode} claims may not be offloaded")
        if claim.phase not in RESERVING or not claim.held:
            raise Violation(
                LIFECYCLE, f"offload of {claim.claim_id} while {claim.phase} (predicate never held)"
            )
        claim.phase = "offloaded"
        if not claim.tracked:  # C6: its reported prefix left the device; a restore must bring it back
            claim.assumed = 0

    def _resident_claim_restore_required(self, event: dict[str, Any]) -> None:
        claim = self._subject(event)
        request_id = event["request_id"]
        in_place = claim.two_key and claim.phase == "materialized"  # C6: a resume in place
        if claim.phase not in ("offloaded", "restoring") and not in_place:
            raise Violation(OFFLOAD_ORDER, f"restore_required of {claim.claim_id} while {claim.phase}")
        if request_id in claim.pending:
            raise Violation(OFFLOAD_ORDER, "restore_required again while the previous one is outstanding")
        request = self._request(request_id)
        if request is not None and claim.claim_id in request.failed:
            raise Violation(OFFLOAD_ORDER, "a failed restoration is never retried for the same request")
        self._reuse_request(request_id)
        claim.pending.add(request_id)
        claim.phase = "restoring"
        claim.in_place = claim.in_place or in_place

    def _resident_claim_restored(self, event: dict[str, Any]) -> None:
        claim = self._subject(event)
        request_id = event["request_id"]
        if request_id not in claim.pending:  # C6: per claim and request (another may be restored)
            raise Violation(OFFLOAD_ORDER, f"restored without a pending restore_required for {request_id}")
        count = event.get("restored_blocks")
        if count is not None:  # C6: the restored leading blocks are back on the device
            if count > claim.footprint:
                raise Violation(OFFLOAD_ORDER, f"{claim.claim_id} restored more blocks than its footprint")
            claim.assumed = max(claim.assumed, count)
            claim.gone = {g for g in claim.gone if g >= count}
        if claim.two_key:
            claim.kv_back = True  # C6: the KV key; the value key is the checkpoint
            self._two_key_restored(claim)
            return
        self._back(claim, request_id)

    def _two_key_restored(self, claim: Claim) -> None:
        if claim.kv_back and claim.value_back:
            claim.kv_back = claim.value_back = claim.in_place = False
            for request_id in sorted(claim.pending):
                self._back(claim, request_id)

    def _back(self, claim: Claim, request_id: str) -> None:
        """C6, class 5: the claim is resident again for `request_id` (other requests' restores
        stay pending: each ends restored or failed). Its tracked blocks must show the predicate
        before anything else names it and before the end; an untracked claim's restore counts
        for its request's satisfied reuse only if `restored_blocks` reached the predicate."""
        if claim.required is not None and claim.tracked and not claim.holds():
            claim.unconfirmed = claim.required
        claim.restored_for.add(request_id)
        claim.pending.discard(request_id)
        claim.phase = "materialized"
        claim.held = True
        self._check_pool()

    def _resident_claim_checkpoint_restored(self, event: dict[str, Any]) -> None:
        claim = self._subject(event)
        if not claim.two_key or claim.phase != "restoring":
            raise Violation(TWO_KEY, f"checkpoint restore of {claim.claim_id} while {claim.phase}")
        if not claim.kv_back:  # trace-format.md: the KV blocks are restored before the checkpoint
            raise Violation(TWO_KEY, f"{claim.claim_id}: checkpoint restored before its KV blocks")
        recorded = claim.checkpoint
        if recorded is None or (event["boundary"], event["value_hash"]) != recorded:
            claim.mismatch = True  # seed 002: only value_hash equality is state identity
            return
        claim.value_back = True
        self._two_key_restored(claim)

    def _resident_claim_restoration_failed(self, event: dict[str, Any]) -> None:
        claim = self._subject(event)
        request_id, outcome = event["request_id"], event["outcome"]
        if request_id not in claim.pending:  # per claim and request, as restored
            raise Violation(
                OFFLOAD_ORDER, f"restoration_failed without a pending restore_required for {request_id}"
            )
        if outcome == "refusal" and claim.in_place:
            raise Violation(
                TWO_KEY, f"{claim.claim_id}: a failed in-place restore has no tier to refuse back to"
            )
        claim.pending.discard(request_id)
        claim.mismatch = False
        request = self._request(request_id)
        if request is not None:
            request.failed.add(claim.claim_id)
        if outcome == "refusal":
            if claim.phase == "restoring":  # else another request's restore brought it back
                claim.phase = "offloaded" if not claim.pending else "restoring"
                claim.kv_back = claim.value_back = False
            if request is not None:
                request.owes_refusal = claim.claim_id
        elif outcome == "demotion":
            self._end_responsibility(claim, "demoted")
        elif outcome == "expiry":
            self._expiry_clock(claim, event)
            self._end_responsibility(claim, "expired")
        else:
            self._end_responsibility(claim, "harmed")


# --- driving ------------------------------------------------------------------------------------


def judge(data: bytes) -> Verdict:
    """The oracle's verdict on one trace v1 (header + NDJSON events)."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # a last line without its newline is judged as it parses
    try:
        if not lines:
            raise BadInput("empty")
        usable, block_size = parse_header(_parse_line(lines[0]))
    except BadInput as error:
        return Verdict(INVALID, line=1, message=str(error))
    return drive(Oracle(usable, block_size), _parsed(lines))


def _parsed(lines: list[bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    previous: int | None = None
    for number, line in enumerate(lines[1:], start=2):
        try:
            event = parse_event(line, previous)
        except BadInput as error:
            error.line = number
            raise
        previous = event["seq"]
        yield number, event


def drive(oracle: Oracle, events: Iterable[tuple[int, dict[str, Any]]]) -> Verdict:
    """Step `oracle` through `(line, event)` pairs to a verdict; a `BadInput` raised while the
    pairs are produced (with its `line`) makes the trace invalid. C16 (trace-format.md): a
    trace is complete only when it ends with `trace_closed`; a line after it is invalid; an
    unclosed trace that broke no rule on the way is inconclusive (truncated); a rule broken
    after an unknown event type is inconclusive too (the unknown event may explain it)."""
    unknown: int | None = None
    closed: int | None = None
    try:
        for number, event in events:
            if closed is not None:
                return Verdict(INVALID, line=number, message=f"a line follows trace_closed (line {closed})")
            if event["event"] not in SCHEMA:
                unknown = unknown or number
                continue
            if event["event"] == "trace_closed":
                closed = number
            try:
                oracle.step(event)
            except Violation as violation:
                if unknown is not None:
                    return Verdict(
                        INCONCLUSIVE, line=unknown, message="unknown event type before a violation"
                    )
                return Verdict(REJECTED, violation.rule, number, violation.message)
    except BadInput as error:
        return Verdict(INVALID, line=error.line, message=str(error))
    if closed is None:
        return Verdict(INCONCLUSIVE, message="truncated: the trace does not end with trace_closed")
    return conclude(oracle, unknown)


def conclude(oracle: Oracle, unknown_line: int | None = None) -> Verdict:
    """The verdict of a trace that ended in `oracle`'s state without a violation on the way."""
    try:
        oracle.finish()
    except Violation as violation:
        if unknown_line is not None:
            return Verdict(INCONCLUSIVE, line=unknown_line, message="unknown event type before a violation")
        return Verdict(REJECTED, violation.rule, 0, violation.message)
    if unknown_line is not None:
        return Verdict(INCONCLUSIVE, line=unknown_line, message="unknown event type")
    if oracle.undecided is not None:
        return Verdict(INCONCLUSIVE, message=oracle.undecided)
    if oracle.steps == 0:
        return Verdict(INCONCLUSIVE, message="no model step")
    return Verdict(ACCEPTED)
