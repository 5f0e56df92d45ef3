"""The CPU-tier side of the arbiter: offloaded claims, their restorations, and restoration failures.

Present only when the engine runs the binding's connector (`connector.ClaimOffloadingConnector`).
Semantics for an accepted `offloadable` claim (DESIGN 2.1, 6; seed 000 paths A-C):

- Its device blocks are watched, not pinned; its host chunks (the CPU tier's copy of its prefix)
  are held by the claim-aware CPU policy while it is responsible, so the tier never evicts them.
  Store jobs writing them carry the claim's tag; when one completes, each position it copied is
  reported as `block_stored` with `cache_level=cpu` (the chunk id as block id), which refinement
  checks for identity but never counts toward the device predicate.
- **Offloaded**: when the device loses a block that breaks its predicate and the CPU tier holds
  every chunk the predicate needs, `resident_claim_offloaded(tier=cpu)` is reported before the
  removals. Without a complete host copy the same loss is harm: a store that failed (its chunks
  are removed), one whose worker has not yet reported it (its chunks are pending, not ready),
  or one the full tier dropped leaves no host copy; only a store every worker confirmed counts.
- **Restore required**: when vLLM schedules a load carrying the claim's predicate blocks for a
  request (the claim is the load's claim tag), the request is reported admitted and
  `resident_claim_restore_required(claim, request)` follows, once per (claim, request).
- **Restored**: when every worker reports the load done without failure.
- **Restoration failed**: a failed load (reported by the connector's worker into vLLM's
  invalid-KV-load path) is mapped to the claims it carried *before* vLLM handles it. Under
  `kv_load_failure_policy=fail`, and under `recompute` once `max_restore_attempts` are used, the
  claim gets `resident_claim_restoration_failed(outcome=refusal)` and the request the fail-closed
  `active_request_refused(reason=restoration_failed, blocking_claim_ids=[claim])`; it then
  finishes as refused (finish_reason abort, stop_reason `kvclaims:refused:restoration_failed:
  <claim>`), so its `request_finished` follows the refusal. Below the cap vLLM retries the load
  under the same open restoration (no livelock: the cap always ends it). A failed load that
  restores no claim is vLLM's to handle, except that under `recompute` the binding caps it too.

Negative controls (`BindingConfig.negative_control`) swap this failure path for a deliberately
unsound one, so that refinement can be shown to reject it.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from vllm.v1.kv_offload.base import OffloadKey, make_offload_key

from kvclaims.spec.trace import (
    ActiveRequestRefused,
    BlockStored,
    ConflictReason,
    FaultInjected,
    ResidentClaimOffloaded,
    ResidentClaimRestorationFailed,
    ResidentClaimRestored,
    ResidentClaimRestoreRequired,
)
from kvclaims.statemachine.lifecycle import Event, Phase
from kvclaims.statemachine.requests import RequestEvent, RequestPhase
from kvclaims.vllm_binding.connector import ClaimOffloadingConnector, FailedLoad
from kvclaims.vllm_binding.registry import ClaimRecord, agreement
from kvclaims.vllm_binding.restoration import LoadJob, RestorationLedger

if TYPE_CHECKING:
    from kvclaims.vllm_binding.arbiter import ClaimArbiter
    from kvclaims.vllm_binding.metadata import ClaimRequest

TIER = "cpu"
RESTORATION_STOP_PREFIX = "kvclaims:refused:restoration_failed"
LOAD_FAILED_STOP_PREFIX = "kvclaims:load_failed"
_UNCAPPED = math.inf


class ClaimOffload:
    """Offload, restore and restoration-failure handling for one arbiter (see module docstring)."""

    def __init__(self, arbiter: ClaimArbiter, connector: ClaimOffloadingConnector) -> None:
        self.arbiter = arbiter
        self.connector = connector
        self.policy = connector.claim_policy
        self.blocks_per_chunk = connector.blocks_per_chunk
        self.ledger = RestorationLedger()
        self._reports: dict[int, int] = {}
        self._positions: dict[OffloadKey, list[tuple[str, int]]] = {}
        """CPU-tier key -> (claim, position) of every block it holds, for held claims."""
        self._stores: dict[int, list[tuple[str, int, OffloadKey]]] = {}
        connector.bind(self)
        if self.policy is not None:
            self.policy.guardian = self

    @classmethod
    def attach(cls, arbiter: ClaimArbiter, scheduler: Any) -> ClaimOffload | None:
        """The offload side of `arbiter`, or None when the engine runs no claim connector."""
        connector = getattr(scheduler, "connector", None)
        return cls(arbiter, connector) if isinstance(connector, ClaimOffloadingConnector) else None

    # -- claim terms and host-copy holds ---------------------------------------------------

    def terms_problem(self, op: ClaimRequest) -> str | None:
        """Why an offloadable claim with these terms cannot be kept here, or None."""
        if self.policy is None:
            return (
                "the CPU tier's eviction policy is not ClaimAwareLRUPolicy, so a host copy could "
                "be evicted while its claim is responsible"
            )
        assert op.footprint_blocks is not None
        per_chunk, block = self.blocks_per_chunk, self.arbiter.block_size
        required = op.predicate_blocks or (
            -(-op.predicate_tokens // block) if op.predicate_tokens else op.footprint_blocks
        )
        if op.footprint_blocks % per_chunk or required % per_chunk:
            return (
                f"footprint ({op.footprint_blocks}) and predicate ({required}) blocks must be "
                f"multiples of the CPU tier's {per_chunk} blocks per chunk"
            )
        return None

    def _keys(self, record: ClaimRecord, blocks: int | None = None) -> list[OffloadKey]:
        """The CPU-tier keys of the chunks holding the claim's first `blocks` blocks."""
        per_chunk = self.blocks_per_chunk
        count = len(record.hashes) if blocks is None else blocks
        return [
            make_offload_key(record.hashes[(i + 1) * per_chunk - 1], 0) for i in range(count // per_chunk)
        ]

    def hold(self, record: ClaimRecord) -> None:
        """Keep the claim's host chunks out of CPU-tier eviction while it is responsible."""
        keys = self._keys(record)
        if self.policy is not None:
            self.policy.hold(record.claim_id, keys)
        per_chunk = self.blocks_per_chunk
        for chunk, key in enumerate(keys):
            self._positions.setdefault(key, []).extend(
                (record.claim_id, position) for position in range(chunk * per_chunk, (chunk + 1) * per_chunk)
            )

    def release(self, record: ClaimRecord) -> None:
        """Responsibility ended: the claim's host chunks become ordinary cache entries."""
        if self.policy is not None:
            self.policy.release(record.claim_id)
        for key in self._keys(record):
            held = [entry for entry in self._positions.get(key, ()) if entry[0] != record.claim_id]
            if held:
                self._positions[key] = held
            else:
                self._positions.pop(key, None)
        self.ledger.close_claim(record.claim_id)

    def host_copy_ready(self, record: ClaimRecord) -> bool:
        """Whether the CPU tier holds every chunk the claim's predicate needs."""
        return self.connector.host_copy_ready(self._keys(record, record.required_blocks))

    def offload_if_restorable(self, record: ClaimRecord) -> None:
        """The device is about to lose the predicate: with a complete host copy, the claim is
        offloaded (reported now, before the removals); otherwise it is left to be harmed."""
        if self.host_copy_ready(record):
            self.arbiter.ledger.advance(record, Event.offload)
            self.arbiter.registry.version += 1
            self.arbiter.emit(ResidentClaimOffloaded, claim_id=record.claim_id, tier=TIER)

    # -- the connector's claim directory ---------------------------------------------------

    def on_load_scheduled(
        self, job_id: int, request_id: str, first_block: int, num_blocks: int
    ) -> tuple[str, ...]:
        """Book a scheduled load; its claim tags are the responsible offloadable claims whose
        predicate blocks it carries for this request (the request shares the whole predicate)."""
        request = self.arbiter.scheduler.requests.get(request_id)
        tags: list[str] = []
        hashes = request.block_hashes if request is not None else ()
        if hashes:
            for record in self.arbiter.registry.on_chain(hashes[0]):
                if (
                    record.offloadable
                    and record.responsible
                    and first_block < record.required_blocks
                    and agreement(hashes, record.hashes) >= record.required_blocks
                ):
                    tags.append(record.claim_id)
        self.ledger.book(LoadJob(job_id, request_id, tuple(tags), first_block, num_blocks))
        return tuple(tags)

    def on_store_scheduled(self, job_id: int, keys: frozenset[OffloadKey]) -> tuple[str, ...]:
        """Book a scheduled store; its claim tags are the held claims whose chunks it writes."""
        copied = [(claim, position, key) for key in keys for claim, position in self._positions.get(key, ())]
        if copied:
            self._stores[job_id] = copied
        return tuple(sorted({claim for claim, _, _ in copied}))

    def _store_completed(self, job_id: int) -> None:
        """Every worker wrote the job's chunks: each claimed position's host copy exists."""
        registry = self.arbiter.registry
        for claim_id, position, key in sorted(self._stores.pop(job_id, ()), key=lambda e: (e[0], e[1])):
            record = registry.claims.get(claim_id)
            chunk = self.policy.get(key) if self.policy is not None else None
            if record is None or chunk is None:
                continue
            self.arbiter.emit(
                BlockStored,
                block_id=chunk.chunk_id,
                block_hash=record.hashes[position].hex(),
                cache_level=TIER,
                claim_id=claim_id,
                position=position,
            )

    def _store_failed(self, job_id: int, *, injected: bool) -> None:
        """A worker did not write the job's chunks: no host copy is reported for them (the
        connector removes them from the CPU tier), so a claim they were for stays as it is on
        the device, and a later device loss of its predicate is harm, not an offload."""
        self._reports.pop(job_id, None)
        copied = self._stores.pop(job_id, ())
        if injected:
            for claim_id in sorted({claim for claim, _, _ in copied}):
                self.arbiter.note_fault("store_failure", claim_id=claim_id)

    # -- after schedule(): admissions and restore_required ---------------------------------

    def after_schedule(self) -> None:
        """Loads vLLM scheduled this step: their requests are reported admitted, and each
        offloaded claim a load restores steps to restoring (`restore_required`, once per claim
        and request) and gains the request as a feeder."""
        arbiter = self.arbiter
        for job in self.ledger.take_new():
            request = arbiter.scheduler.requests.get(job.request_id)
            book = arbiter.book_of(job.request_id)
            if request is None or book is None:
                continue
            if book.phase is not RequestPhase.admitted:
                arbiter.admit(request, book, prefix_hit_blocks=job.first_block)
            for claim_id in job.claim_ids:
                record = arbiter.registry.claims.get(claim_id)
                if record is None:
                    continue
                arbiter.check_claim(record)  # a device loss not yet reported comes first
                if record.phase not in (Phase.offloaded, Phase.restoring):
                    continue
                if not self.ledger.open_restoration(claim_id, job.request_id):
                    continue  # a retry of an open restoration
                arbiter.ledger.advance(record, Event.require_restore)
                record.feeders.add(job.request_id)
                book.restores.append(claim_id)
                arbiter.emit(ResidentClaimRestoreRequired, claim_id=claim_id, request_id=book.trace_id)

    # -- before update_from_output(): completed and failed loads ----------------------------

    def before_update(self, connector_output: Any) -> None:
        """Workers' reports of a model step: a failed load ends in its claims' outcome (or a
        retry); a load every worker completed restores its claims (restoring -> materialized);
        a completed store reports the host copies it wrote."""
        received = time.monotonic_ns()
        meta = connector_output.kv_connector_worker_meta
        if meta is None:
            return
        failed: dict[int, FailedLoad] = getattr(meta, "failed_loads", {})
        for job_id, failure in failed.items():
            self._reports.pop(job_id, None)
            self._load_failed(job_id, failure, received)
        failed_stores: dict[int, bool] = getattr(meta, "failed_stores", {})
        for job_id, injected in sorted(failed_stores.items()):
            self._store_failed(job_id, injected=injected)
        for job_id, count in meta.completed_jobs.items():
            if job_id in failed or job_id in failed_stores:
                continue
            if job_id not in self.ledger.jobs and job_id not in self._stores:
                continue
            reported = self._reports.get(job_id, 0) + count
            if reported < self.connector.num_workers:
                self._reports[job_id] = reported
                continue
            self._reports.pop(job_id, None)
            if job_id in self._stores:
                self._store_completed(job_id)
            else:
                self._load_succeeded(job_id)

    def _load_succeeded(self, job_id: int) -> None:
        job, restored = self.ledger.succeeded(job_id)
        if job is None:
            return
        self.arbiter.report_watched_losses()
        registry = self.arbiter.registry
        for claim_id in restored:
            record = registry.claims.get(claim_id)
            if record is None or record.phase is not Phase.restoring:
                continue
            self.arbiter.ledger.advance(record, Event.restore)
            registry.version += 1
            self.arbiter.watch_materialization(record)
            # The request's blocks before `first_block` were device hits and the load wrote
            # the rest of its range: that many of the claim's leading blocks are on the device
            # now, before vLLM reports them cached (a restore must be confirmed, issue 12).
            self.arbiter.emit(
                ResidentClaimRestored,
                claim_id=claim_id,
                request_id=self.arbiter.trace_id(job.request_id),
                restored_blocks=min(record.footprint_blocks, job.first_block + job.num_blocks),
            )

    def _load_failed(self, job_id: int, failure: FailedLoad, received_mono_ns: int) -> None:
        """One failed load, reported by a worker and received by the scheduler at
        `received_mono_ns`: the claim-scoped outcome (or a retry), before vLLM handles it."""
        arbiter = self.arbiter
        control = arbiter.config.negative_control
        recompute = bool(arbiter.scheduler.recompute_kv_load_failures)
        cap = _UNCAPPED if control else (arbiter.config.max_restore_attempts if recompute else 1)
        job, verdict = self.ledger.failed(job_id, cap)  # type: ignore[arg-type]
        if job is None:
            return
        trace_id = self.arbiter.trace_id(job.request_id)
        request = arbiter.scheduler.requests.get(job.request_id)
        live = request is not None and not request.is_finished()
        if control == "generic_counters":
            self._blame_from_counter(job, failure, request if live else None)
            return
        if verdict.exhausted and control is None:
            # The fail-closed outcome first; the note of what failed is context, after it.
            self._fail_closed(
                job,
                trace_id,
                verdict.exhausted,
                verdict.attempts,
                failure,
                received_mono_ns,
                request if live else None,
            )
        if failure.injected:
            arbiter.emit(
                FaultInjected,
                kind="cpu_to_gpu_load_failure",
                claim_id=job.claim_ids[0] if len(job.claim_ids) == 1 else None,
                request_id=trace_id,
                attempt=verdict.attempts,
                failure_reported_mono_ns=failure.reported_mono_ns,
            )
        if control == "fallback_recompute":
            if live and verdict.retried:
                request.skip_reading_prefix_cache = True  # type: ignore[union-attr]
        elif (
            not job.claim_ids
            and recompute
            and live
            and verdict.attempts >= arbiter.config.max_restore_attempts
        ):
            # A persistent fault on an unclaimed load: no claim to name, but no livelock either.
            arbiter.refuse(request, f"{LOAD_FAILED_STOP_PREFIX}:{verdict.attempts} attempts")  # type: ignore[arg-type]

    def _fail_closed(
        self,
        job: LoadJob,
        trace_id: str,
        claims: tuple[str, ...],
        attempts: int,
        failure: FailedLoad,
        received_mono_ns: int,
        request: Any,
    ) -> None:
        """The claim-scoped outcome, then the fail-closed refusal, before vLLM's handling (the
        two events first: bookkeeping that does not decide them waits until they are out)."""
        arbiter = self.arbiter
        for claim_id in claims:
            arbiter.emit(
                ResidentClaimRestorationFailed,
                claim_id=claim_id,
                request_id=trace_id,
                outcome="refusal",
                attempts=attempts,
                failure_reported_mono_ns=failure.reported_mono_ns,
            )
        if request is not None:
            arbiter.emit(
                ActiveRequestRefused,
                request_id=trace_id,
                reason=ConflictReason.restoration_failed,
                blocking_claim_ids=[claims[-1]],
                failure_reported_mono_ns=failure.reported_mono_ns,
                scheduler_received_mono_ns=received_mono_ns,
                mono_ns=time.monotonic_ns(),
            )
        registry = arbiter.registry
        for claim_id in claims:
            record = registry.claims.get(claim_id)
            if record is not None and record.phase is Phase.restoring:
                if not any(c == claim_id for c, _ in self.ledger.open):
                    # outcome refusal: the claim stays offloaded
                    arbiter.ledger.advance(record, Event.fail_restoration_refusal)
                registry.version += 1
        if request is not None:
            book = arbiter.book_of(job.request_id)
            if book is not None:
                book.step(RequestEvent.refuse_restoration)
            arbiter.refuse(request, f"{RESTORATION_STOP_PREFIX}:{claims[-1]}")

    def _blame_from_counter(self, job: LoadJob, failure: FailedLoad, request: Any) -> None:
        """NEGATIVE CONTROL `generic_counters`: all that is seen is a failure counter (no job,
        no claim); the naive adapter blames the claim the request reused."""
        arbiter = self.arbiter
        arbiter.emit(
            FaultInjected,
            kind="generic_kv_load_failed_counter",
            failure_reported_mono_ns=failure.reported_mono_ns,
        )
        book = arbiter.book_of(job.request_id)
        if request is None or book is None or book.attached is None:
            return
        arbiter.emit(
            ActiveRequestRefused,
            request_id=book.trace_id,
            reason=ConflictReason.restoration_failed,
            blocking_claim_ids=[book.attached],
            mono_ns=time.monotonic_ns(),
        )
        book.step(RequestEvent.refuse_restoration)
        arbiter.refuse(request, f"{RESTORATION_STOP_PREFIX}:{book.attached}")

    def request_finishing(self, request_id: str) -> None:
        """A request leaves: its open restorations end (none remain on the sound path: each
        ended restored or failed before the request could finish)."""
        for claim_id in self.ledger.close_request(request_id):
            record = self.arbiter.registry.claims.get(claim_id)
            still_restoring = any(c == claim_id for c, _ in self.ledger.open)
            if record is not None and record.phase is Phase.restoring and not still_restoring:
                # The restoration ended with its request and no outcome: the claim is left
                # where a refused restoration leaves it, offloaded.
                self.arbiter.ledger.advance(record, Event.fail_restoration_refusal)

    # -- the CPU policy's guardian ------------------------------------------------------------

    def release_for_space(self, needed_chunks: int) -> bool:
        """`cpu_tier_pressure=demote`: demote the oldest offloadable claims holding host copies
        (reported now, before the tier may evict their chunks) until `needed_chunks` are free."""
        if self.arbiter.config.cpu_tier_pressure != "demote":
            return False
        candidates = sorted(
            (
                r
                for r in self.arbiter.registry.claims.values()
                if r.offloadable and r.responsible and r.phase is not Phase.restoring
            ),
            key=lambda r: r.accepted_step,
        )
        released = 0
        for record in candidates:
            if released >= needed_chunks:
                break
            released += len(self._keys(record))
            self.arbiter.demote(
                record, f"the CPU tier needs {needed_chunks} chunks; its host copy is given up first"
            )
        return released > 0

    def host_copies_dropped(self, claim_ids: frozenset[str]) -> None:
        """The CPU tier is reset: every claim holding a host copy is demoted first."""
        for claim_id in sorted(claim_ids):
            record = self.arbiter.registry.claims.get(claim_id)
            if record is not None and record.responsible:
                self.arbiter.demote(record, "the CPU tier is reset, dropping its host copy")
