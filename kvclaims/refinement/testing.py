"""Helpers for writing trace v1 by hand and by generator (tests, benchmarks, adversaries).

`TraceBuilder` writes one event per call, numbering `seq` for you, so a test states only the
behaviour it is about:

    trace = TraceBuilder(usable_blocks=80)
    trace.accept("claim:a", mode="hard_protected", blocks=4)
    trace.store_prefix("claim:a", 4)
    trace.materialize("claim:a", 4)
    verdict = check_bytes(trace.ndjson())

`generate_valid_trace` writes a long, valid, randomized trace (many claims, requests, offload
cycles, failures, conflicts, demotions and harm) for the benchmarks; its output is accepted by
the checker by construction of the generator, and a test checks that it is.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import msgspec

from kvclaims.spec.tracefile import closing_line

_encode = msgspec.json.Encoder().encode


class TraceBuilder:
    """An in-memory trace v1: a header plus events appended in order."""

    def __init__(
        self, *, usable_blocks: int | None = None, block_size: int | None = 16, **header: Any
    ) -> None:
        self.header: dict[str, Any] = {
            "kvclaims_trace": 1,
            "usable_blocks": usable_blocks,
            "block_size": block_size,
        }
        self.header |= header
        self.events: list[dict[str, Any]] = []
        self._block_ids: dict[tuple[str, int], int] = {}

    def add(self, event: str, **fields: Any) -> TraceBuilder:
        """Append one event; `seq` is the next integer unless given."""
        seq = fields.pop("seq", self.events[-1]["seq"] + 1 if self.events else 0)
        self.events.append({"seq": seq, "event": event, **fields})
        return self

    def ndjson(self, *, closed: bool = True) -> bytes:
        """The trace as NDJSON; `closed` ends it with `trace_closed` (a complete trace), else
        it is an open prefix (refinement calls it truncated unless judged open)."""
        lines = b"".join(_encode(doc) + b"\n" for doc in [self.header, *self.events])
        if closed:
            lines += closing_line(self.events[-1]["seq"] + 1 if self.events else 0)
        return lines

    # claims --------------------------------------------------------------------------------

    def accept(
        self,
        claim_id: str,
        *,
        mode: str = "hard_protected",
        blocks: int = 4,
        footprint: int | None = None,
        owner: str = "tenant-a",
        object_id: str | None = None,
        two_key: bool = False,
    ) -> TraceBuilder:
        predicate = (
            {"kind": "hybrid_two_key", "boundary_blocks": blocks}
            if two_key
            else {"kind": "leading_prefix_at_least", "blocks": blocks}
        )
        return self.add(
            "resident_claim_accepted",
            claim_id=claim_id,
            owner_scope=owner,
            object_id=object_id or f"object:{claim_id}",
            mode=mode,
            footprint_blocks=footprint or blocks,
            predicate=predicate,
        )

    def materialize(self, claim_id: str, leading: int, **fields: Any) -> TraceBuilder:
        return self.add("resident_claim_materialized", claim_id=claim_id, leading_blocks=leading, **fields)

    def claim_event(self, event: str, claim_id: str, **fields: Any) -> TraceBuilder:
        return self.add(f"resident_claim_{event}", claim_id=claim_id, **fields)

    def block_id(self, claim_id: str, position: int) -> int:
        return self._block_ids.setdefault((claim_id, position), len(self._block_ids) + 1000)

    def store_prefix(self, claim_id: str, count: int, *, start: int = 0) -> TraceBuilder:
        for position in range(start, start + count):
            self.add(
                "block_stored",
                block_id=self.block_id(claim_id, position),
                block_hash=f"h:{claim_id}:{position}",
                claim_id=claim_id,
                position=position,
            )
        return self

    def remove_block(self, claim_id: str, position: int, *, named: bool = True) -> TraceBuilder:
        fields: dict[str, Any] = {"claim_id": claim_id, "position": position} if named else {}
        return self.add(
            "block_removed",
            block_id=self.block_id(claim_id, position),
            block_hash=f"h:{claim_id}:{position}",
            **fields,
        )

    # requests ------------------------------------------------------------------------------

    def admit(self, request_id: str, blocks: int = 1) -> TraceBuilder:
        return self.add("active_request_admitted", request_id=request_id, active_live_blocks=blocks)

    def finish(self, request_id: str, status: str = "finished") -> TraceBuilder:
        return self.add("request_finished", request_id=request_id, status=status)

    def reuse(self, request_id: str, claim_id: str, cached: int, satisfied: bool = True) -> TraceBuilder:
        return self.add(
            "request_reused",
            request_id=request_id,
            claim_id=claim_id,
            cached_blocks=cached,
            predicate_satisfied=satisfied,
        )

    # routing (a router stream) -------------------------------------------------------------

    def route(
        self,
        request_id: str,
        claim_id: str,
        chosen: str,
        *,
        candidates: tuple[str, ...] = ("A", "B"),
        predicted: int = 0,
    ) -> TraceBuilder:
        return self.add(
            "route_decided",
            request_id=request_id,
            claim_id=claim_id,
            candidate_engines=list(candidates),
            chosen_engine=chosen,
            predicted_hit_blocks=predicted,
        )

    def report_route(
        self, request_id: str, claim_id: str, engine: str, delivered: int, outcome: str, **fields: Any
    ) -> TraceBuilder:
        return self.add(
            "route_reuse_reported",
            request_id=request_id,
            claim_id=claim_id,
            engine=engine,
            delivered_blocks=delivered,
            outcome=outcome,
            **fields,
        )

    def conflict(
        self,
        request_id: str,
        blocking: list[str],
        *,
        refused: bool = True,
        reason: str = "capacity",
        protected: int | None = None,
        active: int | None = None,
        usable: int | None = None,
        total: int | None = None,
        shortfall: int | None = None,
    ) -> TraceBuilder:
        """A refusal or deferral; the capacity proof is computed from the numbers given
        (override `total` / `shortfall` to write an inconsistent one)."""
        fields: dict[str, Any] = {"request_id": request_id, "reason": reason, "blocking_claim_ids": blocking}
        if protected is not None and active is not None:
            usable = usable if usable is not None else self.header["usable_blocks"]
            total = protected + active if total is None else total
            shortfall = max(0, total - usable) if shortfall is None else shortfall
            fields |= {
                "protected_resident_blocks": protected,
                "active_live_blocks_required": active,
                "resident_plus_active_blocks": total,
                "usable_blocks": usable,
                "capacity_shortfall_blocks": shortfall,
            }
        return self.add("active_request_refused" if refused else "active_request_deferred", **fields)

    # offload -------------------------------------------------------------------------------

    def offload(self, claim_id: str, tier: str = "cpu") -> TraceBuilder:
        return self.claim_event("offloaded", claim_id, tier=tier)

    def restore_required(self, claim_id: str, request_id: str) -> TraceBuilder:
        return self.claim_event("restore_required", claim_id, request_id=request_id)

    def restored(self, claim_id: str, request_id: str, blocks: int | None = None) -> TraceBuilder:
        """`resident_claim_restored`; `blocks` is its `restored_blocks` (the confirmation a
        later satisfied reuse needs unless the claim's own block events show the prefix)."""
        fields = {} if blocks is None else {"restored_blocks": blocks}
        return self.claim_event("restored", claim_id, request_id=request_id, **fields)

    def restoration_failed(self, claim_id: str, request_id: str, outcome: str = "refusal") -> TraceBuilder:
        return self.claim_event("restoration_failed", claim_id, request_id=request_id, outcome=outcome)


# --- the benchmark generator ------------------------------------------------------------------


class _Generator:
    """A small runtime simulation that only emits legal histories, one action at a time.

    Claims are hard_protected, offloadable or best_effort; each lives through acceptance,
    block-by-block materialization, reuse, offload / restore / failed-restore cycles and
    capacity conflicts, and ends demoted-then-released (with post-release block loss) or harmed.
    As in a serving run, every request caches its own (unclaimed) prompt blocks and cache
    pressure evicts the oldest of them, so block events are most of the trace.
    """

    def __init__(self, seed: int, usable_blocks: int, live_claims: int) -> None:
        self.rng = random.Random(seed)
        self.usable = usable_blocks
        self.live_target = live_claims
        self.seq = 0
        self.claims = 0
        self.requests = 0
        self.block_ids = 0
        self.materialized: list[_LiveClaim] = []
        self.offloaded: list[str] = []
        self.cached: collections.deque[int] = collections.deque()
        self.contents: dict[int, str] = {}
        """Claim block id -> its content: a claim's position keeps its content in every block
        that ever holds it (restored into new blocks, the same hashes)."""
        self.out: list[bytes] = []

    def _event(self, event: str, **fields: Any) -> None:
        self.seq += 1
        self.out.append(_encode({"seq": self.seq, "event": event, **fields}) + b"\n")

    def _request_id(self) -> str:
        self.requests += 1
        return f"req-{self.requests}"

    def _new_block(self) -> int:
        self.block_ids += 1
        return self.block_ids

    def actions(self) -> Iterator[list[bytes]]:
        """Each item is the lines of one complete action (requests finish inside it)."""
        rng = self.rng
        choices = (
            (self._new_claim, 6),
            (self._reuse, 10),
            (self._offload_cycle, 4),
            (self._failed_restore, 1),
            (self._capacity_conflict, 2),
            (self._plain_request, 10),
            (self._churn, 8),
        )
        functions = [f for f, _ in choices]
        weights = [w for _, w in choices]
        while True:
            if len(self.materialized) + len(self.offloaded) > self.live_target:
                self._retire()
            elif not self.materialized:
                self._new_claim()
            else:
                rng.choices(functions, weights)[0]()
            lines, self.out = self.out, []
            yield lines

    def _new_claim(self) -> None:
        rng = self.rng
        self.claims += 1
        claim = _LiveClaim(f"claim-{self.claims}", rng.choice(_MODES), rng.randint(4, 16))
        claim.required = rng.randint(1, claim.footprint)
        self._event(
            "resident_claim_accepted",
            claim_id=claim.claim_id,
            owner_scope=f"tenant-{self.claims % 7}",
            object_id=f"prefix-{self.claims}",
            mode=claim.mode,
            footprint_blocks=claim.footprint,
            predicate={"kind": "leading_prefix_at_least", "blocks": claim.required},
        )
        self._store_prefix(claim)
        self._event("resident_claim_materialized", claim_id=claim.claim_id, leading_blocks=claim.footprint)
        self.materialized.append(claim)

    def _store_prefix(self, claim: _LiveClaim) -> None:
        claim.blocks = [self._new_block() for _ in range(claim.footprint)]
        for position, block in enumerate(claim.blocks):
            content = self.contents[block] = f"h:{claim.claim_id}:{position}"
            self._event(
                "block_stored",
                block_id=block,
                block_hash=content,
                claim_id=claim.claim_id,
                position=position,
            )

    def _remove_blocks(self, blocks: list[int]) -> None:
        for block in blocks:
            self._event("block_removed", block_id=block, block_hash=self.contents.pop(block))

    def _pick(self, mode: str | None = None) -> _LiveClaim | None:
        recent = self.materialized[-32:]
        candidates = recent if mode is None else [c for c in recent if c.mode == mode]
        return self.rng.choice(candidates) if candidates else None

    def _reuse(self) -> None:
        claim = self._pick()
        if claim is None:
            return
        request_id = self._request_id()
        self._event(
            "active_request_admitted", request_id=request_id, active_live_blocks=self.rng.randint(1, 8)
        )
        self._event(
            "request_reused",
            request_id=request_id,
            claim_id=claim.claim_id,
            cached_blocks=claim.footprint,
            predicate_satisfied=True,
        )
        self._cache_blocks(self.rng.randint(1, 8))  # the request's own suffix after the claimed prefix
        self._event("request_finished", request_id=request_id, status="finished")

    def _offload(self, claim: _LiveClaim) -> str:
        self.materialized.remove(claim)
        self._event("resident_claim_offloaded", claim_id=claim.claim_id, tier="cpu")
        self._remove_blocks(claim.blocks)
        request_id = self._request_id()
        self._event("active_request_admitted", request_id=request_id, active_live_blocks=claim.footprint)
        self._event("resident_claim_restore_required", claim_id=claim.claim_id, request_id=request_id)
        return request_id

    def _offload_cycle(self) -> None:
        claim = self._pick("offloadable")
        if claim is None:
            return
        request_id = self._offload(claim)
        self._store_prefix(claim)
        self._event("resident_claim_restored", claim_id=claim.claim_id, request_id=request_id)
        self._event(
            "request_reused",
            request_id=request_id,
            claim_id=claim.claim_id,
            cached_blocks=claim.footprint,
            predicate_satisfied=True,
        )
        self._event("request_finished", request_id=request_id, status="finished")
        self.materialized.append(claim)

    def _failed_restore(self) -> None:
        claim = self._pick("offloadable")
        if claim is None:
            return
        request_id = self._offload(claim)
        self._event(
            "fault_injected", kind="cpu_to_gpu_load_failure", claim_id=claim.claim_id, request_id=request_id
        )
        self._event(
            "resident_claim_restoration_failed",
            claim_id=claim.claim_id,
            request_id=request_id,
            outcome="refusal",
        )
        self._event(
            "active_request_refused",
            request_id=request_id,
            reason="restoration_failed",
            blocking_claim_ids=[claim.claim_id],
        )
        self._event("request_finished", request_id=request_id, status="refused")
        self.offloaded.append(claim.claim_id)

    def _capacity_conflict(self) -> None:
        hard = [c for c in self.materialized[-64:] if c.mode != "best_effort"][:3]
        if not hard:
            return
        protected = sum(c.footprint for c in hard)
        active = max(1, self.usable - protected + self.rng.randint(1, 20))
        total = protected + active
        request_id = self._request_id()
        fields = {
            "request_id": request_id,
            "reason": "capacity",
            "blocking_claim_ids": [c.claim_id for c in hard],
            "protected_resident_blocks": protected,
            "active_live_blocks_required": active,
            "resident_plus_active_blocks": total,
            "usable_blocks": self.usable,
            "capacity_shortfall_blocks": max(0, total - self.usable),
        }
        self._event("active_request_deferred", **fields)
        self._event("active_request_refused", **fields)
        self._event("request_finished", request_id=request_id, status="refused")

    def _plain_request(self) -> None:
        """An ordinary request: its prompt blocks enter the prefix cache unclaimed."""
        request_id = self._request_id()
        blocks = self.rng.randint(4, 24)
        self._event("active_request_admitted", request_id=request_id, active_live_blocks=blocks)
        self._cache_blocks(blocks)
        self._event("request_finished", request_id=request_id, status="finished")

    def _cache_blocks(self, count: int) -> None:
        for _ in range(count):
            block = self._new_block()
            self.cached.append(block)
            self._event("block_stored", block_id=block, block_hash=f"h{block}")

    def _churn(self) -> None:
        """Cache pressure evicts the oldest unclaimed blocks (ordinary eviction, no claim)."""
        excess = len(self.cached) - self.usable // 2
        for _ in range(max(0, excess) + self.rng.randint(0, 8)):
            if not self.cached:
                return
            block = self.cached.popleft()
            self._event("block_removed", block_id=block, block_hash=f"h{block}")

    def _retire(self) -> None:
        if self.offloaded and self.rng.random() < 0.5:
            claim_id = self.offloaded.pop(0)
            self._event("resident_claim_demoted", claim_id=claim_id, reason="capacity")
            self._event("resident_claim_released", claim_id=claim_id)
            return
        claim = self.materialized.pop(0)
        if claim.mode == "hard_protected" and self.rng.random() < 0.2:
            self._remove_blocks(claim.blocks[:1])
            self._event(
                "resident_claim_harmed",
                claim_id=claim.claim_id,
                leading_blocks=0,
                required_blocks=claim.required,
            )
            self._remove_blocks(claim.blocks[1:])
            return
        self._event("resident_claim_demoted", claim_id=claim.claim_id, reason="pressure")
        self._remove_blocks(claim.blocks)
        self._event("resident_claim_released", claim_id=claim.claim_id)


_MODES = ("hard_protected", "offloadable", "offloadable", "best_effort")


class _LiveClaim:
    __slots__ = ("blocks", "claim_id", "footprint", "mode", "required")

    def __init__(self, claim_id: str, mode: str, footprint: int) -> None:
        self.claim_id = claim_id
        self.mode = mode
        self.footprint = footprint
        self.required = footprint
        self.blocks: list[int] = []


def generate_valid_trace(
    out: IO[bytes], events: int, *, seed: int = 0, usable_blocks: int = 4096, live_claims: int = 256
) -> int:
    """Write a valid trace v1 of at least `events` events (it stops after a whole action) to
    `out`; return the number of events written. With `live_claims` small against `events`, the
    workload is stationary after a short ramp (claims retire as fast as they are accepted), so a
    longer trace is the same workload for longer."""
    generator = _Generator(seed, usable_blocks, live_claims)
    header = {
        "kvclaims_trace": 1,
        "source": f"kvclaims.refinement.testing.generate_valid_trace seed={seed}",
        "usable_blocks": usable_blocks,
        "block_size": 16,
    }
    out.write(_encode(header) + b"\n")
    written = 0
    pending: list[bytes] = []
    for lines in generator.actions():
        pending.extend(lines)
        written += len(lines)
        if len(pending) >= 8192:
            out.write(b"".join(pending))
            pending.clear()
        if written >= events:
            break
    out.write(b"".join(pending))
    out.write(closing_line(generator.seq + 1))
    return written


def write_fleet(
    directory: Path, router: TraceBuilder, engines: dict[str, TraceBuilder], *, closed: bool = True
) -> tuple[Path, list[Path]]:
    """Write a fleet's streams into `directory`: the router stream and one stream per engine
    (the builder's header gets the engine's `engine_id` unless it names one)."""
    router_path = directory / "router.ndjson"
    router_path.write_bytes(router.ndjson(closed=closed))
    paths = []
    for index, (engine, builder) in enumerate(engines.items()):
        builder.header.setdefault("engine_id", engine)
        path = directory / f"engine-{index}.ndjson"
        path.write_bytes(builder.ndjson())
        paths.append(path)
    return router_path, paths


def write_routed_history(history: dict[str, Any], directory: Path) -> tuple[Path, list[Path]]:
    """Write one routed reuse of claim `c1` by request `r1`, given as plain values (the shape of
    `kvclaims.solver.routing_proofs.find_history`), as a fleet: one stream per engine and the
    router stream. Every engine serves a warm-up request (a stream with no model step is
    inconclusive); the holders accept and materialize the claim."""
    footprint = history["footprint_blocks"]
    engines = {}
    for engine in history["engines"]:
        trace = TraceBuilder(usable_blocks=8)
        trace.admit(f"warmup-{engine}").finish(f"warmup-{engine}")
        if engine in history["holds"]:
            trace.accept("c1", blocks=history["predicate_blocks"], footprint=footprint)
            trace.store_prefix("c1", footprint).materialize("c1", footprint)
        if engine == history["chosen"]:
            trace.admit("r1")
            if engine in history["holds"]:
                served = history["served_blocks"]
                trace.reuse("r1", "c1", served, served >= history["predicate_blocks"])
            trace.finish("r1")
        engines[engine] = trace
    router = TraceBuilder(usable_blocks=None, block_size=None, source="routed history")
    router.route(
        "r1",
        "c1",
        history["chosen"],
        candidates=tuple(history["engines"]),
        predicted=history["predicted_hit_blocks"],
    )
    if history["reported"]:
        claim = "c1" if history["report_names_claim"] else "c2"
        router.report_route(
            "r1", claim, history["report_engine"], history["report_blocks"], history["report_outcome"]
        )
    return write_fleet(directory, router, engines)
