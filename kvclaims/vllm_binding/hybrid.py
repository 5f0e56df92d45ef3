"""Two-key claims on hybrid models (seed 002): the arbiter's side of the checkpoint connector.

Present only when the engine runs a hybrid model in vLLM's alignment mode (one recurrent-state
group, `MambaSpec`, and one full-attention group, hashed at the scheduler's block size) with
the binding's checkpoint connector (`checkpoint_connector.ClaimCheckpointConnector`).
Semantics of an accepted `hybrid_two_key(B)` claim:

- **KV key**: the claim's first B attention blocks, by block hash, as for every claim.
- **Materialized** when its feeder has computed and cached those B blocks *and* the worker
  has taken the checkpoint of the recurrent state vLLM stored at boundary B (the block of
  vLLM's `boundary_state_offloads` entry for that boundary). The checkpoint (both hashes and
  every tensor's ABI metadata) is recorded in `resident_claim_materialized`; its value hash is
  kept here, apart from anything the workers hold. A preserving claim also pins that state
  block, so the state its next reuse restores stays in the pool.
- **Resume** (an in-place restore, seed 002: payload -> scratch -> live slot -> post-restore
  view, meeting the KV key at B): a request attached to the claim whose prefix hit is exactly
  B blocks gets the state copied from the boundary block into its live slot by vLLM. The
  worker takes the checkpoint of that post-restore view before the forward; when it arrives
  (before vLLM applies the step) the claim gets `resident_claim_restore_required`, then
  `resident_claim_restored` (the KV key: its B blocks in the device tier) and
  `resident_claim_checkpoint_restored` with the restored checkpoint (absent for an unknown
  layout), and only then is the state compared. Equal value hash (and boundary): the claim is
  materialized again and the reuse satisfied. Anything else (another value hash, an unknown
  layout, no checkpoint) fails closed *before the request proceeds*:
  `resident_claim_restoration_failed` with outcome demotion (the runtime can no longer vouch
  for that state: a payload that kept its bytes proves nothing, and an in-place claim has no
  other tier to refuse back to), an unsatisfied reuse, and the request finished now
  (finish_reason abort, stop_reason `kvclaims:refused:checkpoint_mismatch:<claim>`), so the
  token its step sampled from the wrong state never leaves the engine.

`BindingConfig.negative_control="silent_resume"` (negative control only) resumes without the
restore and reports the mismatching checkpoint as a satisfied reuse, which refinement rejects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

from kvclaims.spec.trace import (
    Checkpoint,
    ResidentClaimCheckpointRestored,
    ResidentClaimRestored,
    ResidentClaimRestoreRequired,
)
from kvclaims.statemachine.lifecycle import Event, Phase
from kvclaims.vllm_binding.checkpoint_connector import (
    CaptureJob,
    CheckpointWorkerMetadata,
    ClaimCheckpointConnector,
    Resume,
    VerifyJob,
)
from kvclaims.vllm_binding.registry import ClaimRecord
from kvclaims.vllm_binding.state_checkpoint import UnknownLayout

if TYPE_CHECKING:
    from kvclaims.vllm_binding.arbiter import ClaimArbiter

MISMATCH_STOP_PREFIX = "kvclaims:refused:checkpoint_mismatch"


@dataclass(frozen=True)
class HybridLayout:
    """Which KV cache group holds the recurrent state and which the attention KV."""

    state_group: int
    kv_group: int


def hybrid_layout(scheduler: Any) -> HybridLayout | str:
    """The engine's hybrid layout, or why two-key claims cannot be kept on it."""
    groups = scheduler.kv_cache_config.kv_cache_groups
    specs = [group.kv_cache_spec for group in groups]
    states = [i for i, spec in enumerate(specs) if isinstance(spec, MambaSpec)]
    kvs = [i for i, spec in enumerate(specs) if type(spec) is FullAttentionSpec]
    if len(groups) != 2 or len(states) != 1 or len(kvs) != 1:
        return (
            f"the model has {len(groups)} KV cache groups; claims need one attention group "
            "(plus one recurrent-state group on hybrid models)"
        )
    attention = specs[kvs[0]]
    if attention.sliding_window or attention.attention_chunk_size:
        return "the attention group is not plain full attention"
    if scheduler.cache_config.mamba_cache_mode != "align":
        return f"mamba_cache_mode is {scheduler.cache_config.mamba_cache_mode!r}; two-key claims need 'align'"
    if specs[states[0]].block_size != scheduler.block_size:
        return "the recurrent-state block size differs from the scheduler's"
    if not isinstance(getattr(scheduler, "connector", None), ClaimCheckpointConnector):
        return "a hybrid model needs the binding's checkpoint connector (BindingConfig.checkpoints)"
    return HybridLayout(states[0], kvs[0])


@dataclass
class _Resume:
    """A resume whose worker report is due (reported with it)."""

    request: Any
    book: Any
    hit_blocks: int


@dataclass
class HybridCheckpoints:
    """Checkpoints of two-key claims: captured, recorded, verified on resume."""

    arbiter: ClaimArbiter
    layout: HybridLayout
    recorded: dict[str, Checkpoint] = field(default_factory=dict)
    """Claim id -> the checkpoint recorded at materialization."""
    state_pins: dict[str, Any] = field(default_factory=dict)
    """Claim id -> the pinned state block (preserving claims)."""
    _captured: dict[str, Checkpoint | UnknownLayout] = field(default_factory=dict)
    _resumes: dict[str, _Resume] = field(default_factory=dict)

    @classmethod
    def attach(cls, arbiter: ClaimArbiter, scheduler: Any, layout: HybridLayout) -> HybridCheckpoints:
        hybrid = cls(arbiter, layout)
        connector = scheduler.connector
        assert isinstance(connector, ClaimCheckpointConnector)
        connector.bind(hybrid)
        return hybrid

    @property
    def block_size(self) -> int:
        return self.arbiter.block_size

    # -- connector jobs (inside vLLM's schedule) --------------------------------------------

    def jobs(self, scheduler_output: Any) -> tuple[list[CaptureJob], list[VerifyJob]]:
        """This step's captures (boundary states claims wait for) and verifications (resumes
        of materialized two-key claims at exactly their boundary)."""
        return self._captures(scheduler_output), self._verifies(scheduler_output)

    def _captures(self, scheduler_output: Any) -> list[CaptureJob]:
        """Boundary states this step writes (vLLM's `boundary_state_offloads`), and cached
        ones a feeder's prefix hit lands on exactly (a claim over an already cached prefix)."""
        wanted = self._wanted_boundaries()
        if not wanted:
            return []
        written = scheduler_output.kv_connector_block_state
        offered = [
            (request_id, block_id, tokens)
            for request_id, entries in (written.boundary_state_offloads.items() if written else ())
            for group, block_id, tokens in entries
            if group == self.layout.state_group
        ]
        state = self.layout.state_group
        offered += [
            (
                data.req_id,
                data.block_ids[state][data.num_computed_tokens // self.block_size - 1],
                data.num_computed_tokens,
            )
            for data in scheduler_output.scheduled_new_reqs
            if data.num_computed_tokens
        ]
        jobs = []
        for request_id, block_id, tokens in offered:
            boundary, partial = divmod(tokens, self.block_size)
            if not partial and boundary in wanted.get(request_id, ()):
                jobs.append(CaptureJob(request_id, block_id, boundary))
        return jobs

    def _wanted_boundaries(self) -> dict[str, set[int]]:
        wanted: dict[str, set[int]] = {}
        for record in self.arbiter.registry.claims.values():
            if record.profile.two_key and record.claim_id not in self.recorded and record.responsible:
                for feeder in record.feeders:
                    wanted.setdefault(feeder, set()).add(record.required_blocks)
        return wanted

    def _verifies(self, scheduler_output: Any) -> list[VerifyJob]:
        jobs = []
        for data in scheduler_output.scheduled_new_reqs:
            book = self.arbiter.book_of(data.req_id)
            record = self.arbiter.registry.claims.get(book.attached or "") if book is not None else None
            if record is None or record.claim_id not in self.recorded:
                continue
            boundary = record.required_blocks
            if data.num_computed_tokens != boundary * self.block_size:
                continue
            blocks = data.block_ids[self.layout.state_group]
            scheduled = scheduler_output.num_scheduled_tokens[data.req_id]
            live = -(-(data.num_computed_tokens + scheduled) // self.block_size) - 1
            jobs.append(VerifyJob(data.req_id, record.claim_id, blocks[boundary - 1], blocks[live], boundary))
            self._resumes[data.req_id] = _Resume(None, book, boundary)
        return jobs

    # -- the arbiter's hooks ------------------------------------------------------------------

    def defers_reuse(self, request: Any, hit_blocks: int) -> bool:
        """Whether the reuse report of `request` waits for its worker's resume report."""
        resume = self._resumes.get(request.request_id)
        if resume is None:
            return False
        resume.request, resume.hit_blocks = request, hit_blocks
        return True

    def take_checkpoint(self, record: ClaimRecord, feeder_id: str) -> Checkpoint | None:
        """The checkpoint `record` materializes with (captured from `feeder_id`'s boundary
        state), recorded and its state block pinned; None while none was captured."""
        captured = self._captured.get(feeder_id)
        if not isinstance(captured, Checkpoint) or captured.boundary != record.required_blocks:
            return None
        del self._captured[feeder_id]
        self.recorded[record.claim_id] = captured
        if record.protected:
            managers = self.arbiter.scheduler.kv_cache_manager.coordinator.single_type_managers
            block = managers[self.layout.state_group].req_to_blocks[feeder_id][record.required_blocks - 1]
            self.arbiter.pool.touch([block])
            self.state_pins[record.claim_id] = block
        return captured

    def unpin(self, record: ClaimRecord) -> None:
        """Responsibility is ending: drop the claim's state-block pin."""
        block = self.state_pins.pop(record.claim_id, None)
        if block is not None:
            self.arbiter.pool.free_blocks([block])

    def forget(self, record: ClaimRecord) -> None:
        """The claim was retired."""
        self.unpin(record)
        self.recorded.pop(record.claim_id, None)

    def before_update(self, connector_output: Any) -> None:
        """A step's worker reports arrive: keep captures, judge resumes (before vLLM applies
        the step, so a failed resume's token is never delivered)."""
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        if not isinstance(meta, CheckpointWorkerMetadata):
            return
        self._captured.update(meta.captured)
        for request_id, report in meta.resumed.items():
            resume = self._resumes.pop(request_id, None)
            if resume is not None and resume.request is not None:
                self._judge(resume, report)

    def _judge(self, resume: _Resume, report: Resume) -> None:
        arbiter = self.arbiter
        request, book = resume.request, resume.book
        if report.fault is not None:
            arbiter.note_fault(
                f"checkpoint_{report.fault}", claim_id=report.claim_id, request_id=request.request_id
            )
        restored = report.restored if isinstance(report.restored, Checkpoint) else None
        problem = self.mismatch(report.claim_id, report.restored)
        recorded = self.recorded.get(report.claim_id)
        if problem is not None and recorded is not None and isinstance(report.payload, Checkpoint):
            kept = "unchanged" if report.payload.payload_hash == recorded.payload_hash else "changed"
            problem += f"; the stored payload is {kept} (payload_hash {report.payload.payload_hash})"
        silent = arbiter.config.negative_control == "silent_resume"
        record = arbiter.registry.claims.get(report.claim_id)
        if record is not None and not silent:
            arbiter.check_claim(record)  # a device loss not yet reported comes first
        if record is not None and record.phase is Phase.materialized and not silent:
            self._restore_in_place(record, book.trace_id, restored, holds=problem is None)
            if problem is not None:
                arbiter.fail_restoration(
                    record, book.trace_id, f"state identity not established on resume: {problem}"
                )
        arbiter.report_reuse(
            request, book, resume.hit_blocks, resumed=restored, state_holds=problem is None or silent
        )
        if problem is None or silent:
            return
        record = arbiter.registry.claims.get(report.claim_id)
        if record is not None and record.responsible:
            arbiter.demote(record, f"state identity not established on resume by {book.trace_id}: {problem}")
        arbiter.refuse(request, f"{MISMATCH_STOP_PREFIX}:{report.claim_id}")

    def _restore_in_place(
        self, record: ClaimRecord, trace_id: str, restored: Checkpoint | None, *, holds: bool
    ) -> None:
        """Report the resume as the restore it is (materialized -> restoring in place): the
        KV key's B blocks are in the device tier, then the restored checkpoint (none for an
        unknown layout) is reported as it `holds` or not; a mismatch leaves the claim owing
        its failure outcome."""
        arbiter, ledger = self.arbiter, self.arbiter.ledger
        ledger.advance(record, Event.require_restore)
        arbiter.emit(ResidentClaimRestoreRequired, claim_id=record.claim_id, request_id=trace_id)
        ledger.advance(record, Event.restore)
        arbiter.emit(
            ResidentClaimRestored,
            claim_id=record.claim_id,
            request_id=trace_id,
            restored_blocks=record.required_blocks,
        )
        if restored is None:
            return
        ledger.advance(record, Event.restore_checkpoint_match if holds else Event.restore_checkpoint_mismatch)
        arbiter.emit(
            ResidentClaimCheckpointRestored,
            claim_id=record.claim_id,
            boundary=restored.boundary,
            payload_hash=restored.payload_hash,
            value_hash=restored.value_hash,
        )

    def mismatch(self, claim_id: str, restored: Checkpoint | UnknownLayout) -> str | None:
        """Why a restored state is not the claim's recorded state, or None when it is."""
        recorded = self.recorded.get(claim_id)
        if recorded is None:
            return "no checkpoint was recorded at materialization"
        if isinstance(restored, UnknownLayout):
            return restored.describe()
        if (restored.boundary, restored.value_hash) != (recorded.boundary, recorded.value_hash):
            return (
                f"restored value_hash {restored.value_hash} (payload_hash {restored.payload_hash}) "
                f"at boundary {restored.boundary}; recorded value_hash {recorded.value_hash} "
                f"at {recorded.boundary}"
            )
        return None

    def request_finishing(self, request_id: str) -> None:
        self._captured.pop(request_id, None)
        self._resumes.pop(request_id, None)
