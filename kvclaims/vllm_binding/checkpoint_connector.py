"""The binding's checkpoint connector: the non-KV key of two-key claims on hybrid models.

Selected with `BindingConfig(checkpoints=True).engine_kwargs()` (vLLM's `kv_transfer_config`:
`{"kv_connector": "ClaimCheckpointConnector", "kv_connector_module_path":
"kvclaims.vllm_binding.checkpoint_connector", "kv_role": "kv_both"}`). It moves no KV: it is a
connector only because a connector is vLLM's one extension point that runs on the workers,
sees the block pool, and is ordered around the forward pass. It supports vLLM's hybrid KV
cache manager (`SupportsHMA`), so vLLM keeps its hybrid alignment mode with it.

Per engine step the scheduler side (the arbiter's `HybridCheckpoints`) hands the workers two
kinds of job in the connector metadata:

- **capture** (request, block, boundary): the step writes the recurrent state at `boundary`
  into `block` (vLLM's `boundary_state_offloads`); after the forward (`wait_for_save`) the
  worker takes the checkpoint of that block (`state_checkpoint.checkpoint_of`).
- **verify** (request, claim, payload block, live block, boundary): a request resumes a
  two-key claim; vLLM's align-mode pre-copy has copied the cached boundary state (the payload)
  into the request's live slot. Before the forward (the step's loads are marked synchronous,
  as vLLM's HiSparse connector does) the worker takes the checkpoint of the payload block and
  of the live slot's post-restore view. Comparing is the scheduler's job: it holds the value
  hash recorded at materialization, apart from anything the worker could alias.

Both come back in the worker metadata (`CheckpointWorkerMetadata`). Seed 002 fault injection
(`set_checkpoint_fault` through `LLM.collective_rpc`): `restore_transposed` (the live slot
gets the payload's SSM state transposed: payload bytes intact, value wrong), `layout_alias`
(live bytes identical to the payload, but the view handed on reads them column-major: same
payload hash, other value), `unknown_layout` (a view whose strides the ABI does not know).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from vllm.config import VllmConfig
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
    SupportsHMA,
)
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.kv_cache_interface import KVCacheConfig, MambaSpec

from kvclaims.spec.trace import Checkpoint
from kvclaims.vllm_binding.state_checkpoint import (
    StateView,
    UnknownLayout,
    checkpoint_of,
    views_at,
)

CONNECTOR_NAME = "ClaimCheckpointConnector"
CONNECTOR_MODULE = "kvclaims.vllm_binding.checkpoint_connector"

FAULT_KINDS = ("restore_transposed", "layout_alias", "unknown_layout")
"""Seed 002 faults the worker can inject into a verified resume."""


@dataclass(frozen=True)
class CaptureJob:
    """Checkpoint `block` after the forward: it then holds the state at `boundary` blocks."""

    request_id: str
    block_id: int
    boundary: int


@dataclass(frozen=True)
class VerifyJob:
    """Checkpoint a resume's payload block and live slot before the forward."""

    request_id: str
    claim_id: str
    payload_block: int
    live_block: int
    boundary: int


@dataclass(frozen=True)
class Resume:
    """What a worker saw of one resume: the stored payload's checkpoint and the live slot's
    (either may be `UnknownLayout`), and the fault it injected, if any."""

    claim_id: str
    payload: Checkpoint | UnknownLayout
    restored: Checkpoint | UnknownLayout
    fault: str | None


@dataclass
class CheckpointMetadata(KVConnectorMetadata):
    captures: list[CaptureJob] = field(default_factory=list)
    verifies: list[VerifyJob] = field(default_factory=list)


@dataclass
class CheckpointWorkerMetadata(KVConnectorWorkerMetadata):
    captured: dict[str, Checkpoint | UnknownLayout] = field(default_factory=dict)
    """Request id -> the checkpoint of the boundary state its step wrote."""
    resumed: dict[str, Resume] = field(default_factory=dict)
    """Request id -> what its resume restored."""

    def aggregate(self, other: KVConnectorWorkerMetadata) -> CheckpointWorkerMetadata:
        assert isinstance(other, CheckpointWorkerMetadata)
        return CheckpointWorkerMetadata(
            {**self.captured, **other.captured}, {**self.resumed, **other.resumed}
        )


class CheckpointJobs(Protocol):
    """The scheduler-side party that decides what to capture and verify (the arbiter's
    `HybridCheckpoints`)."""

    def jobs(self, scheduler_output: SchedulerOutput) -> tuple[list[CaptureJob], list[VerifyJob]]: ...


@dataclass
class FaultPlan:
    """Inject `kind` into the next `count` verified resumes of `claim_id` (any claim when unset)."""

    kind: str | None = None
    claim_id: str | None = None
    count: int = 0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> FaultPlan:
        unknown = sorted(set(data) - {"kind", "claim_id", "count"})
        if unknown:
            raise ValueError(f"checkpoint fault plan: unknown keys {unknown}")
        plan = cls(data.get("kind"), data.get("claim_id"), int(data.get("count", 1)))
        if plan.kind is not None and plan.kind not in FAULT_KINDS:
            raise ValueError(f"checkpoint fault plan: kind must be one of {FAULT_KINDS}, got {plan.kind!r}")
        return plan

    def take(self, claim_id: str) -> str | None:
        """The fault to inject into this resume (and one fewer left), or None."""
        if self.kind is None or self.count < 1 or self.claim_id not in (None, claim_id):
            return None
        self.count -= 1
        return self.kind


def _inject(fault: str | None, views: list[StateView]) -> list[StateView]:
    """Apply `fault` to the live slot's SSM state (in place for `restore_transposed`)."""
    if fault is None:
        return views
    result = []
    for view in views:
        tensor = view.tensor
        if view.kind == "ssm_state":
            if fault == "restore_transposed":
                tensor.copy_(tensor.transpose(-1, -2).clone())
            elif fault == "layout_alias":
                tensor = tensor.transpose(-1, -2)
            else:
                tensor = tensor.transpose(0, 1)
        result.append(StateView(view.kind, view.layer, tensor))
    return result


class ClaimCheckpointConnector(KVConnectorBase_V1, SupportsHMA):
    """Captures and verifies recurrent-state checkpoints of two-key claims; moves no KV."""

    def __init__(
        self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig
    ) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self._jobs: CheckpointJobs | None = None
        self._state_layers = [
            name
            for group in kv_cache_config.kv_cache_groups
            if isinstance(group.kv_cache_spec, MambaSpec)
            for name in group.layer_names
        ]
        self._layers: list[tuple[str, Sequence[torch.Tensor]]] = []
        self._captured: dict[str, Checkpoint | UnknownLayout] = {}
        self._resumed: dict[str, Resume] = {}
        self.faults = FaultPlan()

    # -- scheduler side ---------------------------------------------------------------------

    def bind(self, jobs: CheckpointJobs) -> None:
        """Let the arbiter's hybrid side decide each step's jobs."""
        self._jobs = jobs

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        return 0, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        return None

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        captures, verifies = self._jobs.jobs(scheduler_output) if self._jobs is not None else ([], [])
        if verifies:
            # The live slot must be read after vLLM's pre-copy and before the forward.
            scheduler_output.has_sync_kv_loads = True
        return CheckpointMetadata(captures, verifies)

    def request_finished(self, request: Any, block_ids: Any) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    def request_finished_all_groups(self, request: Any, block_ids: Any) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    # -- worker side ------------------------------------------------------------------------

    def _bind_layers(self, forward_context: Any) -> None:
        if self._layers:
            return
        layers = forward_context.no_compile_layers
        for name in self._state_layers:
            cache = layers[name].kv_cache
            if cache and isinstance(cache[0], (list, tuple)):
                cache = cache[0]  # one entry per virtual engine
            self._layers.append((name, tuple(cache)))

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        self._bind_layers(forward_context)
        metadata = self._get_connector_metadata()
        assert isinstance(metadata, CheckpointMetadata)
        for job in metadata.verifies:
            fault = self.faults.take(job.claim_id)
            live = _inject(fault, views_at(self._layers, job.live_block))
            self._resumed[job.request_id] = Resume(
                claim_id=job.claim_id,
                payload=checkpoint_of(views_at(self._layers, job.payload_block), job.boundary),
                restored=checkpoint_of(live, job.boundary),
                fault=fault,
            )

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return None

    def wait_for_save(self) -> None:
        if not self.has_connector_metadata():
            return
        metadata = self._get_connector_metadata()
        assert isinstance(metadata, CheckpointMetadata)
        for job in metadata.captures:
            self._captured[job.request_id] = checkpoint_of(views_at(self._layers, job.block_id), job.boundary)

    def build_connector_worker_meta(self) -> CheckpointWorkerMetadata | None:
        if not self._captured and not self._resumed:
            return None
        meta = CheckpointWorkerMetadata(self._captured, self._resumed)
        self._captured, self._resumed = {}, {}
        return meta


def set_checkpoint_fault(worker: Any, plan: dict[str, Any]) -> None:
    """`LLM.collective_rpc(set_checkpoint_fault, args=(plan,))`: install a seed 002 fault plan
    (`{"kind": ..., "claim_id": ..., "count": n}`; `{}` clears it) in every worker."""
    del worker  # the connector is process-global in vLLM
    from kvclaims.vllm_binding.connector import process_connector

    process_connector(ClaimCheckpointConnector, CONNECTOR_NAME).faults = FaultPlan.from_mapping(plan)
