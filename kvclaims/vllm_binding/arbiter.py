"""The claim side of vLLM's scheduler: registry decisions, pins, feasibility, telemetry.

One `ClaimArbiter` lives inside each binding scheduler (`kvclaims.vllm_binding.scheduler`),
which calls it from vLLM's own entry points. It works on vLLM's real objects: requests
(`block_hashes`, `num_computed_tokens`, ...), the block pool (`touch` / `free_blocks` for
pins) and the request block tables; it never replaces or patches them.

Semantics (DESIGN 2.1-2.2, 6):
- A claim is submitted by a request over the first `footprint_blocks` full blocks of its own
  prompt; its identity is those blocks' prefix hashes. Accepted claims of a preserving mode
  reserve their blocks against the pool (the protected set) from acceptance on.
- Materialization: after a model step, a claim pins each leading block its feeders (the
  submitting request, and same-owner requests attached to it) have computed and cached;
  `materialized` once the contiguous leading run meets the predicate. A pin is one extra
  block reference (`BlockPool.touch`), never on the null block.
- Loss: every step the arbiter checks that each held block still carries the claim's cache
  key; a removal is reported as `block_removed` with claim id and position. A preserving
  claim falling below its predicate while responsible is `harmed` (e.g. vLLM's invalid-load
  `fail` path strips hashes even from pinned blocks); a best_effort claim is `lost`; after
  demotion or expiry it is post-release loss, and the claim is released once nothing is left.
- soft_priority: nothing is pinned (never blocks admission); after each step the free-queue
  positions of its blocks are permuted so lower-priority claims lose blocks first
  (`kvclaims.vllm_binding.soft_priority`); a loss is reported as for best_effort.
- Feasibility: before vLLM sees a waiting request, protected blocks + the request's live need
  (net of shared blocks guaranteed present) must fit the usable pool; otherwise the request is
  admitted after demoting demotable claims, deferred (kept in its queue position) or refused
  with `blocking_claim_ids` and the capacity proof, per the configured conflict actions.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import Any

from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.request import Request, RequestStatus

from kvclaims.spec.claims import CacheIdentity
from kvclaims.spec.ids import RetiredIds
from kvclaims.spec.tables import MAX_IDENTIFIER_LENGTH
from kvclaims.spec.trace import (
    ActiveRequestAdmitted,
    ActiveRequestDeferred,
    ActiveRequestRefused,
    BlockRemoved,
    BlockStored,
    Checkpoint,
    CloseReason,
    ConflictReason,
    FaultInjected,
    RequestFinished,
    RequestReused,
    ResidentClaimAccepted,
    ResidentClaimDemoted,
    ResidentClaimExpired,
    ResidentClaimExtended,
    ResidentClaimHarmed,
    ResidentClaimLost,
    ResidentClaimMaterialized,
    ResidentClaimRejected,
    ResidentClaimReleased,
    ResidentClaimRestorationFailed,
    ResidentClaimSubmitted,
    TraceHeader,
    _Event,
)
from kvclaims.spec.vocabulary import NS_PER_MS, ClaimState, ProtectionMode
from kvclaims.statemachine.ledger import ConflictAction, Loss, fewest_oldest, next_request_phase
from kvclaims.statemachine.lifecycle import SATISFIABLE, SETTLED, Event, Phase
from kvclaims.statemachine.requests import RequestEvent, RequestPhase
from kvclaims.vllm_binding import kv_hints, shutdown
from kvclaims.vllm_binding.capacity import CapacityProof, peak_live_blocks
from kvclaims.vllm_binding.config import DP_RANK_PLACEHOLDER, SUPPORTED_MODES, BindingConfig
from kvclaims.vllm_binding.continuum import ContinuumJobs, JobKeyProblem, JobTurn, parse_job_keys
from kvclaims.vllm_binding.hybrid import HybridCheckpoints, HybridLayout, hybrid_layout
from kvclaims.vllm_binding.metadata import (
    NOTE_PREFIX,
    ClaimOp,
    ClaimRequest,
    MetadataRejection,
    claim_input,
    owner_of,
    parse_claim_metadata,
    shown,
)
from kvclaims.vllm_binding.offload import ClaimOffload
from kvclaims.vllm_binding.outcome import note_with_stop, refusal_note
from kvclaims.vllm_binding.registry import PINNED_MODES, UNATTRIBUTED, ClaimRecord, ClaimRegistry, agreement
from kvclaims.vllm_binding.soft_priority import SoftRank, reorder_free_queue
from kvclaims.vllm_binding.telemetry import EventSink, NullSink, TraceSink

logger = logging.getLogger(__name__)

REFUSAL_STOP_PREFIX = "kvclaims:refused"
"""Refused requests finish with FinishReason.ABORT and stop_reason
`kvclaims:refused:capacity:<claim ids>`. vLLM 0.32 turns FinishReason.ERROR into an opaque
HTTP 500 that drops stop_reason; ABORT reaches the client as finish_reason "abort" with the
stop_reason visible, and is what a refusal is: the engine did not serve the request."""

_SCALE = {"steps": 1, "ms": NS_PER_MS}
"""Per duration clock, its units per trace unit (engine steps; t_ns per ms)."""
_ROUNDING_MARGIN_NS = 1_000
"""How much later than a term's exact end (t_ns) its float-ms deadline is armed: a wall-clock
t_ns in ms as a float rounds by about 0.25 us, and an expiry must never look early."""

PINNED_SWEEP_STEPS = 32
"""Pinned blocks are re-verified at least this often even without a known hash-stripping path."""


def trace_request_id(request_id: str) -> str:
    """A trace-safe identifier for a vLLM request id (long ids are hashed, not truncated)."""
    if 0 < len(request_id) <= MAX_IDENTIFIER_LENGTH:
        return request_id
    return "request-sha256-" + hashlib.sha256(request_id.encode()).hexdigest()[:32]


def layout_problem(scheduler: Any) -> str | HybridLayout | None:
    """Why claims cannot be kept on this engine's KV layout, None, or the hybrid layout on
    which two-key claims can be kept.

    Claims are leading-prefix block runs in one full-attention cache group whose blocks are
    hashed at the scheduler's block size, plus, on a hybrid model in vLLM's alignment mode
    with the checkpoint connector, one recurrent-state group (`hybrid`); anything else
    (sliding-window models, partial-hash hits, disabled prefix caching, context parallelism)
    is refused per claim.
    """
    if not scheduler.cache_config.enable_prefix_caching:
        return "prefix caching is disabled on this engine"
    groups = scheduler.kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        layout = hybrid_layout(scheduler)
        return layout if isinstance(layout, str) else _hashing_problem(scheduler) or layout
    spec = groups[0].kv_cache_spec
    if _may_skip_positions(spec):
        return f"KV cache spec {type(spec).__name__} is not plain full attention"
    return _hashing_problem(scheduler)


def _may_skip_positions(spec: Any) -> bool:
    """Whether a KV cache group's spec is other than plain full attention (sliding window,
    chunked attention, recurrent state: positions it skips hold vLLM's null block)."""
    return type(spec) is not FullAttentionSpec or bool(spec.sliding_window or spec.attention_chunk_size)


def _group_skips(manager: Any) -> list[bool]:
    """Per KV cache group of `manager` (vLLM's `KVCacheManager`), whether its block lists may
    hold the null block; read from the managers it holds, not from a config that may be stale."""
    return [_may_skip_positions(group.kv_cache_spec) for group in manager.coordinator.single_type_managers]


def _hashing_problem(scheduler: Any) -> str | None:
    """What every layout needs: block hashes at the block size, one rank per block."""
    if scheduler.hash_block_size != scheduler.block_size:
        return "prefix hashes are finer than the scheduler block size"
    if scheduler.dcp_world_size > 1 or scheduler.pcp_world_size > 1:
        return "context parallelism shards blocks across ranks"
    if getattr(scheduler, "num_hash_lookahead_tokens", 0):  # vLLM 0.33, EAGLE block drop
        return "block hashes cover lookahead tokens beyond the block (EAGLE block drop)"
    return None


_NORMAL_FINISH = frozenset({RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED})
"""Finishes after which a Continuum turn is pinned (never an abort, refusal or error)."""

_SETTLE_EVENT = {
    Event.demote: ResidentClaimDemoted,
    Event.expire: ResidentClaimExpired,
    Event.fail_restoration_demotion: ResidentClaimRestorationFailed,
}


@dataclass(eq=False, slots=True)
class RequestBook:
    """What the arbiter knows of one live request. `phase` moves only by the request
    lifecycle's step (`kvclaims.statemachine.requests`)."""

    trace_id: str
    sourced: list[str] = field(default_factory=list)
    attached: str | None = None
    phase: RequestPhase = RequestPhase.absent
    held_back: bool = False
    """Deferred and held out of vLLM's waiting queue now. A deferral that ended leaves the
    request queued again (its phase stays deferred until vLLM admits it)."""
    deferred_steps: int = 0
    last_conflict: tuple[Any, ...] | None = None
    checked_version: int = -1
    restores: list[str] = field(default_factory=list)
    """Offloaded claims this request loads back (their blocks become its blocks)."""
    claim_note: str | None = None
    """What happened to the request's claim operation, for the caller (`NOTE_PREFIX`)."""
    owner: str | None = None
    """The owner the request's claim operation established (a refusal names only its claims)."""
    turn: JobTurn | None = None
    """The request's agent-job turn (Continuum compatibility mode only)."""

    @property
    def job(self) -> str | None:
        return None if self.turn is None else self.turn.job_id

    @property
    def feeds(self) -> list[str]:
        if not (self.sourced or self.attached or self.restores):
            return []
        attached = [self.attached] if self.attached else []
        return list(dict.fromkeys([*self.sourced, *attached, *self.restores]))

    @property
    def queued(self) -> bool:
        """In vLLM's waiting queue and not held back: never admitted, deferred or refused, or
        queued again after a deferral ended."""
        return self.phase is RequestPhase.absent or (
            self.phase is RequestPhase.deferred and not self.held_back
        )

    def step(self, event: RequestEvent) -> None:
        """Move `phase` by `event`; raises `IllegalTransition` if the request lifecycle forbids it."""
        self.phase = next_request_phase(self.trace_id, self.phase, event)


class ClaimArbiter:
    """Claims of one engine core, driven by its scheduler's entry points."""

    def __init__(self, scheduler: Any, config: BindingConfig) -> None:
        self._s = scheduler
        self.config = config
        self._manager = scheduler.kv_cache_manager
        """The KV cache manager the arbiter is bound to (`_follow_cache`)."""
        self._pool = self._manager.block_pool
        self.block_size: int = scheduler.block_size
        self.usable_blocks: int = self._pool.num_gpu_blocks - 1  # block 0 is vLLM's null block
        self._largest_request_blocks = peak_live_blocks(
            prompt_tokens=scheduler.max_model_len,
            max_tokens=1,
            block_size=self.block_size,
            max_model_len=scheduler.max_model_len,
            lookahead_tokens=scheduler.num_lookahead_tokens,
        )
        """The live blocks of a request at the model length: no request needs more."""
        layout = layout_problem(scheduler)
        self.unsupported = layout if isinstance(layout, str) else None
        self.hybrid = (
            HybridCheckpoints.attach(self, scheduler, layout) if isinstance(layout, HybridLayout) else None
        )
        """Two-key claims' checkpoints (hybrid models only)."""
        self.kv_group = layout.kv_group if isinstance(layout, HybridLayout) else 0
        """The KV cache group whose block hashes are claims' identity."""
        self._group_skips = _group_skips(self._manager)
        """Per KV cache group the manager holds, whether its block lists may hold the null
        block (full attention never skips a position)."""
        self.registry = ClaimRegistry(
            usable_blocks=self.usable_blocks,
            protected_fraction=config.protected_fraction,
            owner_protected_fraction=config.owner_protected_fraction,
            max_claims=config.max_claims,
            max_decided_claim_ids=config.max_decided_claim_ids,
            max_claims_per_owner=config.max_claims_per_owner,
            max_decided_claim_ids_per_owner=config.max_decided_claim_ids_per_owner,
        )
        self.ledger = self.registry.ledger
        self.step = 0
        self.clock: Callable[[], int] = time.time_ns
        """The wall clock (ns) that stamps `t_ns` and times `duration_ms` claims; lanes with a
        virtual clock replace it. Read through `now_ns`, which never runs backwards."""
        self._last_ns = 0
        self._books: dict[str, RequestBook] = {}
        self._claim_notes: dict[str, str] = {}
        """Claim notes of requests that finished this step, by vLLM request id."""
        self._traced_ids = RetiredIds()
        """Every request trace id used so far (request-id reuse gets a new lifetime id)."""
        self._lifetimes: dict[str, int] = {}
        """The last lifetime of each request id that was reused (grows only with reuse)."""
        self._materializing: set[ClaimRecord] = set()
        self._deferred: set[str] = set()
        self._finished: list[tuple[str, str, str | None]] = []
        self._refusals: list[tuple[int, EngineCoreOutput]] = []
        self._rejection_handles = 0
        self._depth = 0
        self._pins_suspect = False
        self.sink: EventSink = self._open_sink()
        if self.sink.enabled:
            shutdown.on_engine_stop(self.stop_when_idle)
        self.continuum = ContinuumJobs(config.continuum) if config.continuum is not None else None
        """Continuum compatibility: job keys kept as pin claims; None when off."""
        self.offload: ClaimOffload | None = ClaimOffload.attach(self, scheduler)
        """The CPU-tier side (offload, restore, restoration failures); None without the
        binding's connector."""

    # -- telemetry ------------------------------------------------------------------------

    def _open_sink(self) -> EventSink:
        # vLLM resets data_parallel_rank to 0 on every engine of a dense model (its ranks are
        # independent); data_parallel_index keeps the engine's own rank.
        rank = self._s.vllm_config.parallel_config.data_parallel_index
        path = self.config.trace_template(rank)
        if path is None:
            return NullSink()
        header = TraceHeader(
            kvclaims_trace=1,
            source=self.config.trace_source or f"vllm {_vllm_version()} scheduler + kvclaims.vllm_binding",
            usable_blocks=self.usable_blocks,
            block_size=self.block_size,
            cache_identity=self.cache_identity(""),
            engine_id=None
            if self.config.engine_id is None
            else self.config.engine_id.replace(DP_RANK_PLACEHOLDER, str(rank)),
        )
        sink = TraceSink.open(path.replace(DP_RANK_PLACEHOLDER, str(rank)), header)
        shutdown.guard(sink)
        return sink

    def now_ns(self) -> int:
        """The clock now, never earlier than a time already stamped or armed (a wall clock
        stepped back must not make an expiry look early)."""
        now = self.clock()
        if now > self._last_ns:
            self._last_ns = now
            return now
        return self._last_ns

    def _emit(self, event_type: type[_Event], **fields: Any) -> None:
        sink = self.sink
        if sink.enabled:
            sink.record(event_type, {"engine_step": self.step, "t_ns": self.now_ns(), **fields})

    emit = _emit
    """Emit one trace event at the current engine step (for the arbiter's helpers)."""

    @property
    def scheduler(self) -> Any:
        """The vLLM scheduler this arbiter lives in."""
        return self._s

    @property
    def pool(self) -> Any:
        """vLLM's block pool (pins are `touch` / `free_blocks` on it)."""
        return self._pool

    def enter(self) -> None:
        """A vLLM entry point begins (pair with `leave`, in a `finally`)."""
        if self._depth == 0:
            self._follow_cache()
        self._depth += 1

    def _follow_cache(self) -> None:
        """Bind to the KV cache manager the scheduler holds now. vLLM's scheduler may replace
        its `kv_cache_manager` (and `kv_cache_config`) after `__init__` (its own tests do): the
        groups, the pool and the block lists are then the new manager's. Blocks held in the old
        pool are no longer vLLM's: every responsible claim is demoted first, then each held block
        is reported removed. The trace header's pool and layout describe the old manager, so claims are
        refused from here on."""
        manager = self._s.kv_cache_manager
        if manager is self._manager:
            return
        reason = "vLLM replaced its KV cache manager"
        for record in [r for r in self.registry.claims.values() if r.responsible]:
            self._settle(record, Event.demote, reason)
        for record in self.registry.with_blocks():
            self._on_loss(record, list(record.held()))
        self._manager = manager
        self._pool = manager.block_pool
        self._group_skips = _group_skips(manager)
        self.unsupported = f"{reason} after start-up (the trace describes the pool it had then)"

    def leave(self) -> None:
        """A vLLM entry point returns. Events were emitted at consistent points; the outermost
        return hands them to the trace file, whose flusher gets them to the OS within its
        bound even if the engine then goes idle."""
        if self._depth > 1:
            self._depth -= 1
            return
        try:  # still inside until the hand-over is done (see `stop_when_idle`)
            if self._finished:
                self._drain_finished()
            self.sink.flush()
        finally:
            self._depth -= 1

    @contextmanager
    def entry(self) -> Iterator[None]:
        """`enter` / `leave` as a context manager (lanes, tests and fault injection)."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def note_fault(self, kind: str, *, claim_id: str | None = None, request_id: str | None = None) -> None:
        """Record an injected fault (tests and failure-injection lanes) in the trace."""
        self._emit(
            FaultInjected,
            kind=kind,
            claim_id=claim_id,
            request_id=None if request_id is None else trace_request_id(request_id),
        )

    def stop_when_idle(self) -> None:
        """The engine is stopping (a termination signal reached vLLM's engine-core handler):
        close the trace now if no request is left and no binding code runs on this thread.
        Called from that signal handler too, which runs between two bytecodes of the engine's
        thread: outside every entry point (vLLM's scheduler methods that change requests all
        run inside one) nothing is half-written and the request queues are consistent."""
        if self._depth == 0 and not self._s.has_unfinished_requests():
            with self.entry():
                self.close()

    def close(self, reason: CloseReason = CloseReason.closed) -> None:
        """End the trace with `trace_closed`: `reason`, or the termination signal that led
        here (see `shutdown`)."""
        self._drain_finished()
        self.sink.close(shutdown.reason(reason))

    def release_everything(self) -> None:
        """Drop every claim's pins and host-copy holds without reporting (the arbiter is being
        replaced on an idle engine; its trace ends here)."""
        for record in list(self.registry.claims.values()):
            self._unpin_all(record)
            record.drop_all()
            self.registry.retire(record)

    def cache_identity(self, namespace: str) -> CacheIdentity:
        """The cache identity of claims made on this engine under a cache salt `namespace`."""
        vllm_config = self._s.vllm_config
        model = str(vllm_config.model_config.served_model_name or vllm_config.model_config.model)
        if not 0 < len(model) <= MAX_IDENTIFIER_LENGTH:
            model = "model-sha256-" + hashlib.sha256(model.encode()).hexdigest()[:32]
        return CacheIdentity(
            cache_key_domain="vllm-prefix-cache",
            model_id=model,
            token_hash_domain=f"vllm-{vllm_config.cache_config.prefix_caching_hash_algo}",
            namespace=namespace,
            block_size=self.block_size,
            kv_format=str(vllm_config.model_config.dtype).removeprefix("torch."),
        )

    # -- add_request: claim operations -----------------------------------------------------

    def on_request_added(self, request: Request) -> None:
        """vLLM accepted `request`: open its book and carry out its claim operation, if any
        (submit: a claim accepted into the registry or rejected with a reason; attach: the
        request feeds an existing claim; release / demote by the claim's owner)."""
        book = RequestBook(trace_id=self._lifetime_id(request.request_id))
        self._books[request.request_id] = book
        params = request.sampling_params
        extra_args = None if params is None else params.extra_args
        parsed = parse_claim_metadata(extra_args, typed=self.config.typed_metadata)
        if self.continuum is not None:
            self._join_job(request, parse_job_keys(extra_args), book, claim_op=parsed is not None)
        envelope = kv_hints.envelope_of(request)
        if envelope is not None:
            self._carry_out_hints(request, envelope, book, also_metadata=parsed is not None)
        if parsed is not None:
            self._carry_out(request, parsed, book)

    def _carry_out(
        self, request: Request, parsed: ClaimRequest | MetadataRejection, book: RequestBook
    ) -> None:
        if isinstance(parsed, MetadataRejection):
            self._reject(parsed.claim_id, parsed.reason, book, charge=UNATTRIBUTED)
            return
        owner = owner_of(parsed, default_owner=self.config.default_owner, hmac_key=self.config.owner_hmac_key)
        if isinstance(owner, MetadataRejection):
            charge = UNATTRIBUTED if parsed.op is ClaimOp.submit else None
            self._reject(parsed.claim_id, owner.reason, book, charge=charge)
            return
        book.owner = owner
        if parsed.op is ClaimOp.submit:
            self._submit(request, parsed, owner, book)
        elif parsed.op is ClaimOp.attach:
            self._attach(request, parsed, owner, book)
        else:
            self._owner_settles(parsed, owner, book)

    def _carry_out_hints(
        self,
        request: Request,
        envelope: kv_hints.Envelope | kv_hints.EnvelopeProblem,
        book: RequestBook,
        *,
        also_metadata: bool,
    ) -> None:
        """Each action of a `kv_hints` envelope gets an outcome: the binding's resident-claim
        action is carried out as claim metadata is (at most one claim operation a request);
        any other action type or version is rejected, naming it. Rejections are in the trace
        (`resident_claim_rejected`), acceptances as the claim's own events; the client reads
        every outcome in the request's note."""
        if isinstance(envelope, kv_hints.EnvelopeProblem):
            self._reject(None, f"kv_hints envelope: {envelope.reason}", book, charge=UNATTRIBUTED)
            book.claim_note = kv_hints.outcome_note(None, [], envelope.reason)
            return
        outcomes: list[kv_hints.Outcome] = []
        claimed = also_metadata
        for action in envelope.actions:
            metadata = kv_hints.claim_metadata(action)
            if not isinstance(metadata, str) and claimed:
                metadata = "one claim operation a request (another action or kvclaims_* key carries one)"
            if isinstance(metadata, str):
                reason = f"kv_hints action {shown(action.action_id)}: {metadata}"
                self._reject(None, reason, book, charge=None)
                outcomes.append(kv_hints.Outcome(action.action_id, kv_hints.HintOutcome.rejected, metadata))
                continue
            claimed = True
            book.claim_note = None
            parsed = parse_claim_metadata(metadata)
            if parsed is None:
                parsed = MetadataRejection(reason="the action's payload names no claim term", claim_id=None)
            self._carry_out(request, parsed, book)
            outcomes.append(kv_hints.outcome_of_note(action.action_id, book.claim_note))
        book.claim_note = kv_hints.outcome_note(envelope.message_id, outcomes)

    def _join_job(
        self, request: Request, turn: JobTurn | JobKeyProblem | None, book: RequestBook, *, claim_op: bool
    ) -> None:
        """Continuum mode: note the request's job turn and attach it to its job's live pin (its
        prefix hit is then reported as a reuse of the pin)."""
        if turn is None:
            return
        if isinstance(turn, JobKeyProblem):
            self._reject(None, turn.reason, book, charge=None)
            return
        if claim_op:
            self._reject(
                None,
                "a request with Continuum job keys takes no kvclaims_* claim operation",
                book,
                charge=None,
            )
            return
        book.turn = turn
        assert self.continuum is not None
        pin = self.continuum.pin_of(turn.job_id, self.registry.claims)
        if pin is not None:
            record = self.registry.claims[pin]
            book.attached = pin
            record.feeders.add(request.request_id)

    def _pin_turn(self, request: Request, book: RequestBook) -> None:
        """Continuum mode, a request of a job is finishing: the job's previous pin is released
        (superseded) and a non-last turn that finished normally submits the next one while its
        blocks are still held."""
        assert self.continuum is not None and book.turn is not None
        job = book.turn.job_id
        previous = self.continuum.pin_of(job, self.registry.claims)
        if previous is not None:
            self._release(
                self.registry.claims[previous], f"superseded: request {book.trace_id} of its job finished"
            )
            book.claim_note = book.claim_note or f"{NOTE_PREFIX}claim_released:{previous}"
        footprint = request.num_prompt_tokens // self.block_size
        if book.turn.last_step or request.status not in _NORMAL_FINISH or footprint == 0:
            return
        op = self.continuum.pin_request(book.turn, footprint)
        assert op.owner is not None
        self._submit(request, op, op.owner, book)
        if op.claim_id in self.registry.claims:
            self.continuum.pinned(job, op.claim_id)

    def _lifetime_id(self, request_id: str) -> str:
        """The trace id of this lifetime of `request_id`. vLLM lets a finished request's id be
        used again; each later lifetime is traced as `id#2`, `id#3`, ... (bounded, hashed
        membership: a collision only renumbers a fresh id, never merges two lifetimes)."""
        base = trace_request_id(request_id)
        lifetime = self._lifetimes.get(base, 1)
        candidate = base if lifetime == 1 else trace_request_id(f"{base}#{lifetime}")
        while candidate in self._traced_ids:
            lifetime += 1
            candidate = trace_request_id(f"{base}#{lifetime}")
        if lifetime > 1:
            self._lifetimes[base] = lifetime
        self._traced_ids.add(candidate)
        return candidate

    def _reject(self, claim_id: str | None, reason: str, book: RequestBook, *, charge: str | None) -> None:
        """Refuse a claim operation; the request is served as an ordinary one.

        A new, well-formed claim id of a submission is spent by the rejection (ids are decided
        once), charged to the owner `charge` while that owner's id quota lasts. Operations that
        cannot be reported under their own id (a malformed id, an id already decided, an
        operation on an existing claim, an exhausted quota) get a fresh `rejected-N` handle,
        with the named id (bounded) in the reason.
        """
        book.claim_note = f"{NOTE_PREFIX}claim_rejected:{claim_id or '-'}:{reason}"
        if (
            charge is not None
            and claim_id is not None
            and not self.registry.is_decided(claim_id)
            and self.registry.spend_problem(charge) is None
        ):
            self.registry.decide(claim_id, charge)
            subject = claim_id
        else:
            self._rejection_handles += 1
            subject = f"rejected-{self._rejection_handles}"
            if claim_id is not None:
                reason = f"claim {shown(claim_id)}: {reason}"
        logger.info("kvclaims: request %s: claim operation rejected: %s", book.trace_id, reason)
        self._emit(ResidentClaimRejected, claim_id=subject, reason=reason, request_id=book.trace_id)

    def _submit(self, request: Request, op: ClaimRequest, owner: str, book: RequestBook) -> None:
        if self.config.owner_scoped_claim_ids and not op.claim_id.startswith(f"{owner}:"):
            self._reject(
                op.claim_id, f"claim id must begin with {shown(owner + ':')} (its owner)", book, charge=None
            )
            return
        if self.registry.is_decided(op.claim_id):
            self._reject(op.claim_id, "claim id already decided (ids are single-use)", book, charge=None)
            return
        quota = self.registry.spend_problem(owner)
        if quota is not None:
            self._reject(op.claim_id, quota, book, charge=None)
            return
        problem = self._submission_problem(request, op)
        claim = None
        if problem is None:
            assert request.cache_salt is None or len(request.cache_salt) <= MAX_IDENTIFIER_LENGTH
            claim = claim_input(op, owner=owner, cache_identity=self.cache_identity(request.cache_salt or ""))
            if isinstance(claim, MetadataRejection):
                problem, claim = claim.reason, None
        if claim is None:
            self._reject(op.claim_id, problem or "invalid claim", book, charge=owner)
            return
        predicate = claim.materialization_predicate
        footprint = claim.footprint_blocks
        full_prompt_blocks = request.num_prompt_tokens // self.block_size
        terms = {
            "claim_id": claim.claim_id,
            "owner_scope": claim.owner_scope,
            "object_id": claim.object_id,
            "mode": claim.protection_mode,
            "footprint_blocks": footprint,
            "predicate": predicate,
            "duration_steps": claim.duration_steps,
            "duration_ms": claim.duration_ms,
            "refresh_on_hit": claim.refresh_on_hit,
            "max_duration_steps": claim.max_duration_steps,
            "max_duration_ms": claim.max_duration_ms,
        }
        self._emit(ResidentClaimSubmitted, request_id=book.trace_id, **terms)
        if footprint > full_prompt_blocks:
            self._reject(
                claim.claim_id,
                f"footprint of {footprint} blocks exceeds the request's "
                f"{full_prompt_blocks} full prompt blocks",
                book,
                charge=owner,
            )
            return
        hashes = tuple(request.block_hashes[:footprint])
        pinned = claim.protection_mode in PINNED_MODES
        problem = self.registry.admission_problem(owner, hashes, pinned) or (
            self._feasibility_problem(request, hashes) if pinned else None
        )
        if problem is not None:
            self._reject(claim.claim_id, problem, book, charge=owner)
            return
        record = ClaimRecord(
            claim=claim,
            hashes=hashes,
            keys=[make_block_hash_with_group_id(h, self.kv_group) for h in hashes],
            source_request_id=request.request_id,
            accepted_step=self.step,
            required_blocks=predicate.required_blocks(self.block_size),
            priority=request.priority,
        )
        self.registry.add(record)
        book.sourced.append(record.claim_id)
        self._materializing.add(record)
        if record.offloadable and self.offload is not None:
            self.offload.hold(record)
        stamp = self.now_ns()
        self._emit(ResidentClaimAccepted, request_id=book.trace_id, t_ns=stamp, **terms)
        record.cap_ends = {
            clock: start + cap * _SCALE[clock]
            for clock, cap, start in (
                ("steps", claim.max_duration_steps, self.step),
                ("ms", claim.max_duration_ms, stamp),
            )
            if cap is not None
        }
        self._arm_expiry(record)
        book.claim_note = f"{NOTE_PREFIX}claim_accepted:{record.claim_id}"

    def _submission_problem(self, request: Request, op: ClaimRequest) -> str | None:
        if self.unsupported is not None:
            return f"claims are not supported on this engine: {self.unsupported}"
        if self.sink.failure is not None:
            return f"the claim trace is unwritable ({self.sink.failure}): no new claims"
        assert op.mode is not None
        if op.mode not in SUPPORTED_MODES:
            return f"mode {op.mode} is not supported by this binding"
        if request.cache_salt is not None and len(request.cache_salt) > MAX_IDENTIFIER_LENGTH:
            return f"cache_salt longer than {MAX_IDENTIFIER_LENGTH} characters cannot name a claim namespace"
        two_key = op.checkpoint_boundary_blocks is not None
        if two_key != (self.hybrid is not None):
            return (
                "a hybrid_two_key claim needs a hybrid model (recurrent state + attention)"
                if two_key
                else "on a hybrid model a claim needs its recurrent state too: give "
                "kvclaims_checkpoint_boundary_blocks (hybrid_two_key)"
            )
        if op.mode is ProtectionMode.offloadable:
            if self.offload is None:
                return (
                    "offloadable claims need the binding's offload connector "
                    "(BindingConfig.offload / ClaimOffloadingConnector); this engine has none"
                )
            return self.offload.terms_problem(op)
        return None

    def _feasibility_problem(self, request: Request, hashes: tuple[Any, ...]) -> str | None:
        """A protected claim is accepted only if its own request and every admitted request
        still fit next to the enlarged protected set."""
        protected = self.registry.protected_blocks_with(hashes)
        shared = self.registry.overlap(request.block_hashes, ()).credited_hashes | set(hashes)
        own = CapacityProof(protected, self._peak_blocks(request) - len(shared), self.usable_blocks)
        if own.capacity_shortfall_blocks:
            return (
                f"the submitting request could not be served next to the protected blocks "
                f"({own.protected_resident_blocks} + {own.active_live_blocks_required} "
                f"> {self.usable_blocks})"
            )
        for request_id, book in self._books.items():
            if book.phase is not RequestPhase.admitted:
                continue
            # Recomputed, not the figure from admission: claims it shared may be gone since.
            admitted = self._s.requests.get(request_id)
            if admitted is None:
                continue
            shared = self.registry.overlap(admitted.block_hashes, book.sourced).credited
            live = self._peak_blocks(admitted) - shared
            if protected + live > self.usable_blocks:
                return (
                    f"admitted request {book.trace_id} needs {live} live blocks; with "
                    f"{protected} protected blocks it would no longer fit {self.usable_blocks}"
                )
        return None

    def _attach(self, request: Request, op: ClaimRequest, owner: str, book: RequestBook) -> None:
        record = self.registry.claims.get(op.claim_id)
        if record is None:
            self._reject(op.claim_id, "attach: no such live claim", book, charge=None)
        elif record.owner != owner:
            self._reject(op.claim_id, "attach: the claim belongs to another owner", book, charge=None)
        else:
            book.attached = record.claim_id
            book.claim_note = f"{NOTE_PREFIX}claim_attached:{record.claim_id}"
            record.feeders.add(request.request_id)
            if record.responsible and record.leading_blocks < len(record.slots):
                self._materializing.add(record)

    def _owner_settles(self, op: ClaimRequest, owner: str, book: RequestBook) -> None:
        record = self.registry.claims.get(op.claim_id)
        if record is None:
            self._reject(op.claim_id, f"{op.op}: no such live claim", book, charge=None)
        elif record.owner != owner:
            self._reject(op.claim_id, f"{op.op}: the claim belongs to another owner", book, charge=None)
        elif op.op is ClaimOp.release:
            self._release(record, f"released by its owner (request {book.trace_id})")
            book.claim_note = f"{NOTE_PREFIX}claim_released:{record.claim_id}"
        elif op.op is ClaimOp.extend:
            self._extend(record, op, book)
        elif record.responsible:
            self._settle(record, Event.demote, f"demoted by its owner (request {book.trace_id})")
            book.claim_note = f"{NOTE_PREFIX}claim_demoted:{record.claim_id}"
        else:
            self._reject(op.claim_id, f"demote: the claim is already {record.state}", book, charge=None)

    def _extend(self, record: ClaimRecord, op: ClaimRequest, book: RequestBook) -> None:
        """Lengthen the claim's term by the owner's request (DESIGN 6.3): on each clock asked,
        to now plus the duration, clipped at the cap; reported as `resident_claim_extended` with
        the duration granted. A claim whose term has ended, a clock its terms lack, or a request
        that would not end later than the term it has (a shorter one, a claim at its cap) is
        rejected with the reason, and nothing changes."""
        claim = record.claim
        asked = {c: d for c, d in (("steps", op.duration_steps), ("ms", op.duration_ms)) if d is not None}
        lacking = [c for c in asked if c not in record.term_ends]
        problem = None
        if not record.responsible:
            problem = f"extend: the claim is already {record.state}"
        elif lacking:
            problem = f"extend: the claim's terms carry no duration_{lacking[0]}: an extension adds no clock"
        if problem is not None:
            self._reject(claim.claim_id, problem, book, charge=None)
            return
        stamp = self.now_ns()
        now = {"steps": self.step, "ms": stamp}
        granted: dict[str, tuple[int, int]] = {}
        for clock, duration in asked.items():
            scale = _SCALE[clock]
            cap_end = record.cap_ends.get(clock)
            if cap_end is not None and now[clock] + duration * scale > cap_end:
                duration = (cap_end - now[clock]) // scale  # whole units that end within the cap
            end = now[clock] + duration * scale
            if duration > 0 and end > record.term_ends[clock]:
                granted[clock] = (duration, end)
        if not granted:
            self._reject(
                claim.claim_id,
                "extend: would not end later than the term the claim has (a shorter request, or "
                "a claim at its cap)",
                book,
                charge=None,
            )
            return
        self._emit(
            ResidentClaimExtended,
            claim_id=claim.claim_id,
            t_ns=stamp,
            reason=f"extended by its owner (request {book.trace_id})",
            **{f"duration_{clock}": duration for clock, (duration, _) in granted.items()},
        )
        self.ledger.advance(record, Event.extend)
        for clock, (_, end) in granted.items():
            self._arm_term(record, clock, end)
        book.claim_note = f"{NOTE_PREFIX}claim_extended:{claim.claim_id}"

    # -- claim state changes ---------------------------------------------------------------

    def _unpin_all(self, record: ClaimRecord) -> None:
        """Drop the claim's extra references (tail first, so the tail is evicted first) and,
        for an offloadable claim, its hold on its host copy: responsibility is ending."""
        pinned = [block for _, block in record.held()] if record.protected else []
        if self.hybrid is not None:
            self.hybrid.unpin(record)
        self.registry.unprotect(record)
        if pinned:
            self._pool.free_blocks(reversed(pinned))
        if record.offloadable and self.offload is not None:
            self.offload.release(record)

    def _settle(self, record: ClaimRecord, event: Event, reason: str, **fields: Any) -> None:
        """Demote or expire (`event`, reported with `fields`): responsibility ends before any
        loss; blocks stay watched, and a claim with none left is released."""
        self.ledger.check(record, event)
        self._unpin_all(record)
        self.ledger.advance(record, event)
        self._materializing.discard(record)
        self._emit(_SETTLE_EVENT[event], claim_id=record.claim_id, reason=reason, **fields)
        if not record.held_count:
            self._release(record, f"nothing left to watch after {record.phase}")

    def _release(self, record: ClaimRecord, reason: str) -> None:
        """Release: the claim's pins and host-copy hold go, it names no block and is retired."""
        self.ledger.check(record, Event.release)
        self._unpin_all(record)
        record.drop_all()
        self.ledger.advance(record, Event.release)
        self._materializing.discard(record)
        self.registry.retire(record)
        if self.hybrid is not None:
            self.hybrid.forget(record)
        for request_id in record.feeders:
            book = self._books.get(request_id)
            if book is not None and book.attached == record.claim_id:
                book.attached = None
        self._emit(ResidentClaimReleased, claim_id=record.claim_id, reason=reason)

    def _arm_expiry(self, record: ClaimRecord) -> None:
        """(Re-)arm a claim's deadline from now (after the event that starts its clock was
        stamped, so the deadline is never earlier than the trace's clock start): at acceptance,
        and on a satisfied reuse of a `refresh_on_hit` claim; never past its cap."""
        claim = record.claim
        now = {"steps": self.step, "ms": self.now_ns()}
        for clock, duration in (("steps", claim.duration_steps), ("ms", claim.duration_ms)):
            if duration is not None:
                end = now[clock] + duration * _SCALE[clock]
                self._arm_term(record, clock, min(end, record.cap_ends.get(clock, end)))

    def _arm_term(self, record: ClaimRecord, clock: str, end: int) -> None:
        """The claim's term on `clock` ends at `end` (engine step or t_ns); arm its expiry."""
        record.term_ends[clock] = end
        if clock == "steps":
            self.ledger.expire_at(record, step=end)
        else:  # a float ms deadline, a little late: rounding must never make an expiry early
            self.ledger.expire_at(record, ms=(end + _ROUNDING_MARGIN_NS) / NS_PER_MS)

    def _expire_due(self) -> None:
        if not self.ledger.armed:
            return
        now_ms = self.now_ns() / NS_PER_MS
        due = self.ledger.due(self.step, now_ms)
        if not due:
            return
        waiting_jobs = {
            b.job for b in self._books.values() if b.job is not None and b.phase is not RequestPhase.admitted
        }
        for record in due:
            if self.continuum is not None and self.continuum.job_of(record) in waiting_jobs:
                # Continuum keeps a pin while its job's next request waits (seed 003): the
                # duration is a minimum, so holding on is within the claim's terms.
                self.ledger.expire_at(record, ms=now_ms)
                continue
            claim = record.claim  # type: ignore[attr-defined]
            ended = f"{claim.duration_steps} steps" if claim.duration_steps else f"{claim.duration_ms} ms"
            self._settle(record, Event.expire, f"duration of {ended} ended")  # type: ignore[arg-type]

    # -- materialization and loss ----------------------------------------------------------

    def _advance(self, record: ClaimRecord, request: Request) -> None:
        """Hold every further leading block `request` has computed and cached for the claim."""
        if not record.responsible:
            return
        if record.held_count == len(record.slots) and record.phase is not Phase.accepted:
            self._materializing.discard(record)  # every position held, materialized: nothing to do
            return
        blocks = self._request_blocks(request.request_id)
        computed = (request.num_computed_tokens - request.num_in_flight_tokens) // self.block_size
        limit = min(len(record.slots), computed, len(blocks))
        start = record.leading_blocks
        stored: list[int] = []
        for position in range(start, limit):
            if record.slots[position] is not None:
                continue
            block = blocks[position]
            key = block.block_hash
            if block.is_null or key != record.keys[position]:
                break
            if record.protected:
                block = self._pinned_copy(block)
                self._pool.touch([block])
            record.hold(position, block)
            record.keys[position] = key  # the same key, as the block's own object (see `_lost`)
            stored.append(position)
        if stored and record.protected:
            self.registry.pins_changed()
        if stored:
            self._report_reuse_of({record.slots[position].block_id for position in stored}, record)
        for position in stored:
            self._emit(
                BlockStored,
                block_id=record.slots[position].block_id,
                block_hash=record.hashes[position].hex(),
                claim_id=record.claim_id,
                position=position,
            )
        leading = record.leading_blocks
        if self.ledger.materializes(record):
            checkpoint = None
            if self.hybrid is not None:
                checkpoint = self.hybrid.take_checkpoint(record, request.request_id)
                if checkpoint is None:
                    return  # the KV key holds; the state key's checkpoint has not arrived yet
            self.ledger.advance(record, Event.materialize)
            self.registry.version += 1
            self._emit(
                ResidentClaimMaterialized,
                claim_id=record.claim_id,
                leading_blocks=leading,
                checkpoint=checkpoint,
            )
        if leading >= len(record.slots):
            self._materializing.discard(record)

    def _pinned_copy(self, block: Any) -> Any:
        """The copy of `block`'s content a protected claim pins: the one vLLM's prefix cache
        serves. vLLM caches a second block under one hash when two requests compute that block
        in one step; claims pinning both copies would hold more blocks than the protected term
        counts (one per hash). The served copy stays the same while pinned (only an eviction
        takes it out of the map)."""
        served = self._pool.cached_block_hash_to_block.get_one_block(block.block_hash)
        return block if served is None else served

    def _report_reuse_of(self, block_ids: set[int], holder: ClaimRecord) -> None:
        """Before blocks are reported stored for `holder`: another claim may still hold one of
        them under the key it had before vLLM evicted and reused it (a feeder finishing inside
        vLLM's `update_from_output` stores before the step's loss check). That loss is reported
        first: a block is its id and its content."""
        others = [
            record
            for record in self.registry.with_blocks()
            if record is not holder
            and any(slot is not None and slot.block_id in block_ids for slot in record.slots)
        ]
        if others:
            self._check_records(others)

    def _request_blocks(self, request_id: str) -> list[Any]:
        managers = self._manager.coordinator.single_type_managers
        return managers[self.kv_group].req_to_blocks.get(request_id, [])

    def _advance_all(self) -> None:
        requests = self._s.requests
        for record in list(self._materializing):
            for feeder in list(record.feeders):
                request = requests.get(feeder)
                if request is not None and not request.is_finished():
                    self._advance(record, request)

    def mark_pins_suspect(self) -> None:
        """Something that can strip hashes from referenced blocks ran (vLLM's invalid-KV-load
        path, a reset, an injected eviction): check pinned blocks at the next check."""
        self._pins_suspect = True

    def check_blocks(self, *, pinned: bool = True) -> None:
        """Report every held block that lost the claim's cache key, and what that means.

        Unpinned (watched) blocks can be evicted by any allocation and are checked every time.
        A pinned block is never in vLLM's free queue, so only `evict_blocks` or a prefix-cache
        reset can strip it; pinned blocks are checked when `pinned` is set, after
        `mark_pins_suspect`, and every `PINNED_SWEEP_STEPS` steps as a safety net.
        """
        pinned = pinned or self._pins_suspect or self.step % PINNED_SWEEP_STEPS == 0
        self._pins_suspect = False
        self._check_holders(pinned=pinned)

    def report_watched_losses(self) -> None:
        """Report now the blocks this step's scheduling evicted from watched claims (before a
        completed load is reported: the load came after those evictions made room, and a trace
        restoring first would hold more blocks than the pool). Pinned blocks are left to
        `after_update`, which also sees what vLLM's invalid-KV-load path strips."""
        self._check_holders(pinned=False)

    def _check_holders(self, *, pinned: bool) -> None:
        """Check every claim holding blocks: watched ones always, pinned ones when `pinned`."""
        holders = [r for r in self.registry.claims.values() if r.held_count and (pinned or not r.protected)]
        if holders:
            self._check_records(holders)

    def check_claim(self, record: ClaimRecord) -> None:
        """Report now any block the claim lost (e.g. before a restoration is reported)."""
        self._check_record(record)

    def demote(self, record: ClaimRecord, reason: str) -> None:
        """End a responsible claim's responsibility by demotion (reported before any loss):
        its pins and host-copy hold go, it steps to demoted (released at once if it holds no
        block). An illegal demotion raises `IllegalTransition` before anything changes."""
        self._settle(record, Event.demote, reason)

    def fail_restoration(self, record: ClaimRecord, trace_id: str, reason: str) -> None:
        """A restore of the claim for request `trace_id` failed: its outcome is demotion
        (`resident_claim_restoration_failed`, reported before any loss), which ends its
        responsibility as `demote` does. An illegal one raises `IllegalTransition` first."""
        self._settle(record, Event.fail_restoration_demotion, reason, request_id=trace_id, outcome="demotion")

    def watch_materialization(self, record: ClaimRecord) -> None:
        """Hold the claim's blocks again as its feeders compute or load them."""
        self._materializing.add(record)

    def _check_record(self, record: ClaimRecord) -> None:
        if record.protected and not self._pins_suspect:
            return  # pinned blocks lose their keys only where pins are marked suspect (`check_blocks`)
        if _lost(record):  # the lost block may be shared: every claim holding one is checked
            self._check_records(self.registry.with_blocks())

    def _check_records(self, records: list[ClaimRecord]) -> None:
        """Report the losses of `records`: first every offload they cause, then the removals
        and what follows. A block several claims hold is removed for all of them at its first
        `block_removed`, so an offloadable claim's offload must precede every claim's removal."""
        losses = [(record, lost) for record in records if (lost := _lost(record))]
        for record, lost in losses:
            self._offload_before_loss(record, lost)
        for record, lost in losses:
            self._on_loss(record, lost)

    def _offload_before_loss(self, record: ClaimRecord, lost: list[tuple[int, Any]]) -> None:
        if record.offloadable and record.phase is Phase.materialized and self.offload is not None:
            leading_after = min(record.leading_blocks, min(position for position, _ in lost))
            if leading_after < record.required_blocks:
                # Offloaded, not harmed, iff the host copy already holds the whole predicate;
                # reported before the removals that break the predicate on the device.
                self.offload.offload_if_restorable(record)

    def _on_loss(self, record: ClaimRecord, lost: list[tuple[int, Any]]) -> None:
        pinned = record.protected
        if pinned:
            self.registry.pins_changed()
        for position, block in lost:
            if pinned:
                self._pool.free_blocks([block])
            record.drop(position)
            self._emit(
                BlockRemoved,
                block_id=block.block_id,
                block_hash=record.hashes[position].hex(),
                claim_id=record.claim_id,
                position=position,
            )
        leading = record.leading_blocks
        if record.phase is Phase.materialized and leading < record.required_blocks:
            # Before the model's verdict: a claim that will be harmed still counts as protected
            # here (an observational claim pins nothing and holds no host copy: a no-op).
            self._unpin_all(record)
            if self.ledger.break_predicate(record) is Loss.harm:
                record.drop_all()
                self.ledger.advance(record, Event.harm)
                self._materializing.discard(record)
                self.registry.retire(record)
                logger.warning(
                    "kvclaims: claim %s harmed: %d < %d", record.claim_id, leading, record.required_blocks
                )
                self._emit(
                    ResidentClaimHarmed,
                    claim_id=record.claim_id,
                    leading_blocks=leading,
                    required_blocks=record.required_blocks,
                )
            else:
                self.ledger.advance(record, Event.lose)
                self.registry.version += 1
                self._materializing.add(record)
                self._emit(ResidentClaimLost, claim_id=record.claim_id, leading_blocks=leading)
        elif record.phase in SETTLED and not record.held_count:
            self._release(record, f"every block lost after the claim was {record.phase}")
        elif record.responsible:
            self._materializing.add(record)

    # -- feasibility (before vLLM schedules waiting requests) ------------------------------

    def _peak_blocks(self, request: Request) -> int:
        return peak_live_blocks(
            prompt_tokens=request.num_prompt_tokens,
            max_tokens=request.max_tokens,
            block_size=self.block_size,
            max_model_len=self._s.max_model_len,
            lookahead_tokens=self._s.num_lookahead_tokens,
        )

    def before_schedule(self) -> tuple[list[Request], dict[Request, int]]:
        """Advance the engine step, expire claims, and decide every waiting request vLLM may
        reach this step. Returns the requests to hold out of this `schedule()` call and the
        queue order to put them back in."""
        self.step += 1
        self._expire_due()
        protected = self.registry.protected_blocks
        if not self._deferred and protected + self._largest_request_blocks <= self.usable_blocks:
            return [], {}  # even the largest request the engine takes fits beside the protected blocks
        budget = self._s.max_num_active_reqs - len(self._s.running)
        version = self.registry.version
        deferred_left = len(self._deferred)
        admissible = 0
        held: list[Request] = []
        refused: list[tuple[Request, str]] = []
        for request in self._s.waiting:
            if admissible >= budget and deferred_left == 0:
                break
            book = self._books.get(request.request_id)
            if book is None or request.is_finished():
                continue
            if book.checked_version == version and not book.held_back:
                admissible += 1  # decided before, nothing changed since
                continue
            if request.request_id in self._deferred:
                deferred_left -= 1
            verdict = self._decide(request, book)
            if verdict == "defer":
                held.append(request)
            elif verdict == "admit":
                admissible += 1
            else:
                refused.append((request, verdict))
        for request, stop_reason in refused:
            self._refuse(request, stop_reason)
        if not held:
            return [], {}
        order = {r: i for i, r in enumerate(self._s.waiting)}
        self._s.waiting.remove_requests(held)
        return held, order

    def _decide(self, request: Request, book: RequestBook) -> str:
        """The verdict for one waiting request: admit, defer, or the stop reason of a refusal."""
        if book.checked_version == self.registry.version and not book.held_back:
            return "admit"
        peak = self._peak_blocks(request)
        if self.registry.protected_blocks + peak <= self.usable_blocks:
            # Fits even if it shared no block with a claim (the common case: no overlap or
            # proof to build; the proof below could only find no shortfall either).
            book.checked_version = self.registry.version
            self._end_deferral(request.request_id, book)
            return "admit"
        overlap = self.registry.overlap(request.block_hashes, book.sourced)
        proof = CapacityProof(self.registry.protected_blocks, peak - overlap.credited, self.usable_blocks)
        if proof.capacity_shortfall_blocks == 0 or peak > self.usable_blocks:
            # Feasible, or infeasible even with no claim at all: then it is vLLM's to handle
            # and naming claims as blocking would be false attribution.
            book.checked_version = self.registry.version
            self._end_deferral(request.request_id, book)
            return "admit"
        blocking = self.registry.blocking(overlap)
        if self._demote_to_fit(blocking, overlap.credited_hashes, proof, book):
            return self._decide(request, book)
        resolvable_by_materialization = (
            overlap.pending > 0
            and CapacityProof(
                proof.protected_resident_blocks,
                proof.active_live_blocks_required - overlap.pending,
                self.usable_blocks,
            ).capacity_shortfall_blocks
            == 0
        )
        may_wait = resolvable_by_materialization or all(
            self.config.action_for(r.mode) is not ConflictAction.refuse for r in blocking
        )
        fields = dict(
            request_id=book.trace_id,
            reason=ConflictReason.capacity,
            blocking_claim_ids=[r.claim_id for r in blocking],
            **proof.fields(),
        )
        # A request vLLM already admitted (now preempted) is deferred before it is refused,
        # even past max_deferral_steps: its lifecycle has no admitted -> refused step (only
        # admitted -> deferred -> refused).
        admitted = book.phase is RequestPhase.admitted
        if admitted or (may_wait and book.deferred_steps < self.config.max_deferral_steps):
            book.deferred_steps += 1
            conflict = (tuple(fields["blocking_claim_ids"]), *proof.fields().values())
            if not book.held_back or book.last_conflict != conflict:
                self._emit(ActiveRequestDeferred, **fields)
                self.ledger.blame(blocking)
                book.step(RequestEvent.defer)
                book.last_conflict = conflict
            book.held_back = True
            self._deferred.add(request.request_id)
            return "defer"
        self._emit(ActiveRequestRefused, **fields)
        self.ledger.blame(blocking)
        book.step(RequestEvent.refuse_capacity)
        return refusal_note(blocking, self._owner_of_request(book), proof)

    def _owner_of_request(self, book: RequestBook) -> str | None:
        """Whose claims a refusal may name: the owner the request's claim operation established,
        else (with untrusted owners) the default owner; None when unknown."""
        if book.owner is not None or self.config.owner_hmac_key is not None:
            return book.owner
        return self.config.default_owner

    def _demote_to_fit(
        self, blocking: list[ClaimRecord], credited: frozenset[Any], proof: CapacityProof, book: RequestBook
    ) -> bool:
        """Demote the oldest demotable blocking claims, just enough to remove the shortfall."""
        candidates = sorted(
            (r for r in blocking if self.config.action_for(r.mode) is ConflictAction.demote),
            key=lambda r: r.accepted_step,
        )
        shortfall = proof.capacity_shortfall_blocks
        chosen = fewest_oldest(
            candidates, lambda records: len(self.registry.freed_by(records) - credited) >= shortfall
        )
        for victim in chosen or ():
            self._settle(
                victim,
                Event.demote,
                f"demoted to admit request {book.trace_id} (shortfall {shortfall} blocks)",
            )
        return chosen is not None

    def _end_deferral(self, request_id: str, book: RequestBook) -> None:
        if book.held_back:
            book.held_back = False
            self._deferred.discard(request_id)

    def refuse(self, request: Request, stop_reason: str) -> None:
        """Finish `request` now as refused (the refusal event was emitted by the caller)."""
        self._refuse(request, stop_reason)

    def _refuse(self, request: Request, stop_reason: str) -> None:
        self._deferred.discard(request.request_id)
        book = self._books.get(request.request_id)
        if book is not None:  # the refusal is what became of its claim operation
            book.claim_note = None
        request.stop_reason = stop_reason
        self._s.finish_requests([request.request_id], RequestStatus.FINISHED_ABORTED)
        self._refusals.append(
            (
                request.client_index,
                EngineCoreOutput(
                    request_id=request.request_id,
                    new_token_ids=[],
                    finish_reason=FinishReason.ABORT,
                    stop_reason=stop_reason,
                    events=request.take_events(),
                    trace_headers=request.trace_headers,
                ),
            )
        )
        self._drain_finished()

    def restore_held(self, held: list[Request], order: dict[Request, int]) -> None:
        """Put deferred requests back exactly where they were in the waiting queue."""
        if not held:
            return
        queue = self._s.waiting
        current = list(queue)
        newcomers = [r for r in current if r not in order]
        survivors = sorted([r for r in current if r in order] + held, key=order.__getitem__)
        queue.remove_requests(current)
        for request in [*newcomers, *survivors]:
            queue.add_request(request)

    def after_schedule(self, output: Any) -> None:
        """Report first admissions (and re-admissions after a deferral), and claim reuse."""
        for data in output.scheduled_new_reqs:
            self._scheduled(data.req_id, data.num_computed_tokens // self.block_size)
        for request_id in output.scheduled_cached_reqs.resumed_req_ids:
            self._scheduled(request_id, None)
        if self.offload is not None:
            self.offload.after_schedule()

    def _scheduled(self, request_id: str, hit_blocks: int | None) -> None:
        """vLLM scheduled `request_id`: first (with `hit_blocks` prefix-cache hit blocks) or
        resumed after a preemption (None)."""
        book = self._books.get(request_id)
        if book is None:
            return
        request = self._s.requests[request_id]
        if book.phase is not RequestPhase.admitted:
            self.admit(request, book, hit_blocks or 0)
        if book.attached is not None and hit_blocks is not None:
            if self.hybrid is None or not self.hybrid.defers_reuse(request, hit_blocks):
                self.report_reuse(request, book, hit_blocks)

    def book_of(self, request_id: str) -> RequestBook | None:
        """The live request's book (changes nothing)."""
        return self._books.get(request_id)

    def trace_id(self, request_id: str) -> str:
        """The trace id of a vLLM request id (its book's while it is live)."""
        book = self._books.get(request_id)
        return book.trace_id if book is not None else trace_request_id(request_id)

    def admit(self, request: Request, book: RequestBook, prefix_hit_blocks: int) -> None:
        """Report `request` admitted: vLLM gave it blocks (to compute or to load into)."""
        self._end_deferral(request.request_id, book)
        book.step(RequestEvent.admit)
        if self.sink.enabled:
            self._emit(
                ActiveRequestAdmitted,
                request_id=book.trace_id,
                active_live_blocks=self._admitted_live_blocks(request, book),
                prefix_hit_blocks=prefix_hit_blocks,
            )

    def _admitted_live_blocks(self, request: Request, book: RequestBook) -> int:
        """The blocks vLLM's KV cache manager gave `request` by now (its admission step:
        prefix hits, the scheduled chunk, lookahead), less those credited to protected claims
        (counted as theirs). Not the peak: vLLM admits a request whose peak exceeds the pool
        and preempts later; the admission holds only what was allocated."""
        allocated = 0
        managers = self._manager.coordinator.single_type_managers
        for manager, skips in zip(managers, self._group_skips, strict=True):
            # A request's block list holds each block once (groups allocate distinct blocks);
            # only the null block, at positions a sliding-window or state group skips, repeats.
            blocks = manager.req_to_blocks.get(request.request_id, ())
            allocated += len(blocks) - sum(map(_IS_NULL, blocks)) if skips else len(blocks)
        credited = self.registry.overlap(request.block_hashes, book.sourced).credited
        return allocated - min(credited, allocated)

    def report_reuse(
        self,
        request: Request,
        book: RequestBook,
        hit_blocks: int,
        *,
        resumed: Checkpoint | None = None,
        state_holds: bool = True,
    ) -> None:
        """Report the attached request's reuse of its claim: satisfied when the shared leading
        blocks meet the predicate, the claim can be satisfied, and (two-key) the state the
        request `resumed` from holds."""
        record = self.registry.claims.get(book.attached or "")
        if record is not None:
            self._check_record(record)  # a reuse report must not outrun a loss
            record = self.registry.claims.get(record.claim_id)
        if record is None:
            return
        if record.responsible:
            self._advance(record, request)  # blocks it restored or shares are reported first
        shared = min(hit_blocks, agreement(request.block_hashes, record.hashes))
        # (SATISFIABLE names released too; a released claim is no longer in the registry)
        satisfied = shared >= record.required_blocks and record.phase in SATISFIABLE and state_holds
        self._emit(
            RequestReused,
            request_id=book.trace_id,
            claim_id=record.claim_id,
            cached_blocks=shared,
            predicate_satisfied=satisfied,
            checkpoint=resumed,
        )
        self.ledger.advance(record, Event.reuse_satisfied if satisfied else Event.reuse_unsatisfied)
        book.step(RequestEvent.reuse)
        if satisfied and record.claim.refresh_on_hit:
            self._arm_expiry(record)

    # -- after a model step; finishing requests; resets -------------------------------------

    def before_update(self, connector_output: Any) -> None:
        """A model step's output arrives: map its failed and completed loads to claims before
        vLLM's own handling (its invalid-KV-load path and terminal handling) sees them."""
        if self.offload is not None and connector_output is not None:
            self.offload.before_update(connector_output)
        if self.hybrid is not None and connector_output is not None:
            self.hybrid.before_update(connector_output)

    def after_update(self, outputs: dict[int, EngineCoreOutputs]) -> None:
        """A model step was applied: report blocks claims lost (watched ones), hold what the
        feeders computed (claims may materialize), report finished requests, and hand vLLM
        the outputs of requests refused since the last step."""
        if self.registry.claims:
            self.check_blocks(pinned=False)
            if self._materializing:
                self._advance_all()
            self._order_soft_evictions()
        if self._finished:
            self._drain_finished()
        if self._refusals:
            for client_index, output in self._refusals:
                outputs.setdefault(client_index, EngineCoreOutputs()).outputs.append(output)
            self._refusals.clear()
        self._note_claims(outputs)

    def _order_soft_evictions(self) -> None:
        """Reorder vLLM's free queue so soft_priority claims lose blocks lowest priority first
        (`soft_priority`); unclaimed free blocks keep their LRU positions."""
        if not self.registry.holds_mode(ProtectionMode.soft_priority):
            return
        rank_of: dict[int, SoftRank] = {}
        for record in self.registry.with_blocks():
            if record.mode is ProtectionMode.soft_priority:
                rank = (record.priority, record.claim_id)
                for _, block in record.held():
                    rank_of[block.block_id] = min(rank_of.get(block.block_id, rank), rank)
        if rank_of:
            reorder_free_queue(self.pool.free_block_queue, rank_of)

    def _note_claims(self, outputs: dict[int, EngineCoreOutputs]) -> None:
        """Tell each finished caller what happened to its claim operation, whatever the finish:
        the output's `stop_reason` (which vLLM's OpenAI server returns as the choice's
        `stop_reason`) becomes the claim note; a stop token or string vLLM set is kept after it
        (`note_with_stop`), and the HTTP boundary puts it back (`kvclaims.vllm_binding.http`)."""
        notes = self._claim_notes
        if not notes:
            return
        for batch in outputs.values():
            noted = compress(batch.outputs, map(notes.__contains__, map(_REQUEST_ID, batch.outputs)))
            for output in noted:
                if output.finished:
                    output.stop_reason = note_with_stop(notes[output.request_id], output.stop_reason)
        notes.clear()

    def on_request_finishing(self, request: Request) -> None:
        """Last moment the request's blocks are reachable: let it feed its claims, then book
        its end (reported at the next consistent point)."""
        book = self._books.pop(request.request_id, None)
        if book is None:
            return
        if book.turn is not None:
            self._pin_turn(request, book)
        if book.claim_note is not None:
            self._claim_notes[request.request_id] = book.claim_note
        self._deferred.discard(request.request_id)
        if self.offload is not None:
            self.offload.request_finishing(request.request_id)
        for claim_id in book.feeds:
            record = self.registry.claims.get(claim_id)
            if record is not None:
                self._advance(record, request)
                record.feeders.discard(request.request_id)
                if not record.feeders:
                    self._materializing.discard(record)
        if self.hybrid is not None:
            self.hybrid.request_finishing(request.request_id)
        if book.queued:
            # Aborted while queued and not held back: nothing to finish in the arbitrated
            # lifecycle (never admitted, or its deferral had already ended).
            return
        book.step(RequestEvent.finish)
        if self.sink.enabled:
            reason = request.get_finished_reason()
            status = str(reason) if reason is not None else request.status.name.lower()
            stop = request.stop_reason if isinstance(request.stop_reason, str) else None
            self._finished.append((book.trace_id, status, stop))

    def _drain_finished(self) -> None:
        if self.sink.enabled:
            for trace_id, status, stop in self._finished:
                self._emit(RequestFinished, request_id=trace_id, status=status, stop_reason=stop)
        self._finished.clear()

    def before_reset(self, reset_running_requests: bool) -> None:
        """Pins make vLLM's prefix-cache reset fail (or raise, when it also preempts running
        requests). When pins are all that stand in the way, demote the protected claims first:
        responsibility ends before the reset drops their blocks (post-release loss, not harm);
        owners re-submit to re-materialize."""
        holders = [r for r in self.registry.protected() if r.held_count]
        if not holders or not (reset_running_requests or self._only_pins_hold_blocks(holders)):
            return
        for record in holders:
            self._settle(record, Event.demote, "prefix cache reset requested")

    def _only_pins_hold_blocks(self, holders: list[ClaimRecord]) -> bool:
        pins: dict[int, int] = {}
        for record in holders:
            for _, block in record.held():
                pins[block.block_id] = pins.get(block.block_id, 0) + 1
        used = self.usable_blocks - self._pool.get_num_free_blocks()
        return used == len(pins) and all(self._pool.blocks[b].ref_cnt == n for b, n in pins.items())

    # -- introspection (tests, fuzzing, lanes) ----------------------------------------------

    def pinned_blocks(self) -> dict[int, int]:
        """block id -> number of claim pins on it."""
        pins: dict[int, int] = {}
        for record in self.registry.protected():
            for _, block in record.held():
                pins[block.block_id] = pins.get(block.block_id, 0) + 1
        return pins

    def claim_states(self) -> dict[str, ClaimState]:
        """claim id -> reported state of every claim the registry holds (changes nothing)."""
        return {claim_id: record.state for claim_id, record in self.registry.claims.items()}

    def deferred_request_ids(self) -> frozenset[str]:
        """Requests held back by a deferral now (changes nothing)."""
        return frozenset(self._deferred)


_BLOCK_KEY = attrgetter("_block_hash")
_REQUEST_ID = attrgetter("request_id")
_IS_NULL = attrgetter("is_null")


def _lost(record: ClaimRecord) -> list[tuple[int, Any]]:
    """The claim's held blocks that no longer carry its cache key, by position.

    Runs every step for every watched claim. A claim holding all its positions is first
    compared whole, in C: its keys are the very objects its blocks carried when held (`_advance`),
    so the comparison is by identity until vLLM evicts or re-keys a block."""
    keys = record.keys
    slots = record.slots
    if record.held_count == len(slots) and list(map(_BLOCK_KEY, slots)) == keys:
        return []
    return [
        (position, block)
        for position, block in enumerate(slots)
        if block is not None and block._block_hash != keys[position]
    ]


def _vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


__all__ = [
    "REFUSAL_STOP_PREFIX",
    "ClaimArbiter",
    "RequestBook",
    "layout_problem",
    "trace_request_id",
]
