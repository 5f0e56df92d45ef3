"""The binding's KV connector: vLLM's `OffloadingConnector` with claim identity and a load-failure path.

Selected with `--kv-transfer-config '{"kv_connector": "ClaimOffloadingConnector",
"kv_connector_module_path": "kvclaims.vllm_binding.connector", "kv_role": "kv_both",
"kv_load_failure_policy": "fail", "kv_connector_extra_config": {...}}'` (or the registered name
`KVClaimsOffloadingConnector`; `BindingConfig(offload=...).engine_kwargs()` writes all of it).
Everything the stock connector does is kept; three things are added:

- **Claim identity through the jobs.** The scheduler-side instance asks the binding's arbiter
  (`bind`) which claims each load job restores (the claims whose prefix blocks it carries) and
  which claims each store job copies to the CPU tier, and ships those claim tags to the workers
  in `ClaimOffloadingMetadata.load_claims` / `store_claims`.
- **A failure path.** vLLM 0.32's offload worker asserts every transfer succeeded, so a failed
  CPU->GPU copy would kill the engine. Here the spec's worker is wrapped (`ReportingWorker`): a
  failed load is recorded, passed on as finished (so the request is released from its
  transfer wait, as vLLM requires), and reported into vLLM's invalid-KV-load path through
  `get_block_ids_with_load_errors()`; its job id, request, claim tags and the monotonic time of
  the report travel back to the scheduler in `ClaimWorkerMetadata.failed_loads`, where the
  arbiter maps it to a claim-scoped outcome before vLLM's own terminal handling.
- **Claim-filtered failure injection** (`faults`): off unless enabled, by claim: failed or
  late loads, or (with `stores`) failed or late stores of claimed host chunks.

A failed store (real or injected) is passed on as finished, so vLLM's worker does not assert
and releases the job's fenced blocks, and is reported in `ClaimWorkerMetadata.failed_stores`;
the scheduler side then completes it in the CPU tier's manager as failed
(`complete_store(success=False)`: the unwritten chunks are removed, never marked stored), before
vLLM's own completion, which then finds nothing to mark. A claim whose host copy it was to
write has no host copy: it is never reported offloaded on it. A store that does not fit the
CPU tier is dropped by vLLM's manager, as before.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from vllm.config import VllmConfig
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
    OffloadingConnectorMetadata,
    OffloadingWorkerMetadata,
    TransferStats,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker import OffloadingConnectorWorker
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.kv_offload.base import (
    CanonicalKVCaches,
    GPULoadStoreSpec,
    LoadStoreSpec,
    OffloadingSpec,
    OffloadingWorker,
    TransferResult,
)
from vllm.v1.outputs import KVConnectorOutput

from kvclaims.vllm_binding.cache_policy import ClaimAwareLRUPolicy
from kvclaims.vllm_binding.faults import EXTRA_CONFIG_KEY, LoadFaultInjector, LoadFaultPlan

C = TypeVar("C")

CONNECTOR_NAME = "ClaimOffloadingConnector"
CONNECTOR_MODULE = "kvclaims.vllm_binding.connector"


class ClaimDirectory(Protocol):
    """The scheduler-side party that knows claims (the binding's arbiter)."""

    def on_load_scheduled(
        self, job_id: int, request_id: str, first_block: int, num_blocks: int
    ) -> tuple[str, ...]:
        """A load of the request's blocks `[first_block, first_block + num_blocks)` was
        scheduled as `job_id`; returns the claims it would restore (its claim tags)."""
        ...

    def on_store_scheduled(self, job_id: int, keys: frozenset[Any]) -> tuple[str, ...]:
        """A store of the CPU-tier chunks `keys` was scheduled as `job_id`; returns the claims
        whose host copy it writes (its claim tags)."""
        ...


@dataclass
class ClaimOffloadingMetadata(OffloadingConnectorMetadata):
    """vLLM's offloading metadata plus, per load job, the claims it restores."""

    load_claims: dict[int, tuple[str, ...]] = field(default_factory=dict)
    store_claims: dict[int, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class FailedLoad:
    """A CPU->GPU load that did not deliver its blocks, as reported by a worker."""

    job_id: int
    request_id: str
    claim_ids: tuple[str, ...]
    block_ids: tuple[int, ...]
    injected: bool
    reported_mono_ns: int
    """`time.monotonic_ns()` when the worker reported it into the invalid-KV-load path."""


@dataclass
class ClaimWorkerMetadata(OffloadingWorkerMetadata):
    """vLLM's worker metadata plus the loads that failed (a failed load is also completed)."""

    failed_loads: dict[int, FailedLoad] = field(default_factory=dict)
    failed_stores: dict[int, bool] = field(default_factory=dict)
    """Store job id -> whether its failure was injected (a failed store is also completed)."""

    def aggregate(self, other: Any) -> ClaimWorkerMetadata:
        merged = super().aggregate(other)
        assert isinstance(merged, OffloadingWorkerMetadata)
        stores = dict(self.failed_stores)
        for job_id, injected in getattr(other, "failed_stores", {}).items():
            stores[job_id] = stores.get(job_id, False) or injected
        return ClaimWorkerMetadata(
            completed_jobs=merged.completed_jobs,
            transfer_stats=merged.transfer_stats,
            failed_loads={**self.failed_loads, **getattr(other, "failed_loads", {})},
            failed_stores=stores,
        )


class ReportingWorker(OffloadingWorker):
    """Wraps the spec's offload worker: injects planned failures and late reports, and reports
    every failed transfer to its connector worker instead of letting vLLM's assertion kill the
    engine. Invariant: a late result is held for at most `late_by` calls of `get_finished`."""

    def __init__(self, inner: OffloadingWorker, owner: ClaimConnectorWorker) -> None:
        self.inner = inner
        self.owner = owner
        self._injected: list[TransferResult] = []
        self._loads: set[int] = set()
        self._late: dict[int, int] = {}
        """Job id -> worker reports its completion is still held back (injected lateness)."""
        self._held: dict[int, TransferResult] = {}

    def _inject(self, job_id: int, *, store: bool) -> bool:
        """Apply the plan to a submitted job; True when it is failed (nothing is copied)."""
        claims = self.owner.take_store_claims(job_id) if store else self.owner.claims_of_job(job_id)
        injector = self.owner.injector
        if not injector.should_fail(claims, store=store):
            return False
        if injector.plan.late_by is not None:
            self._late[job_id] = injector.plan.late_by
            return False
        self.owner.note_injected(job_id)
        self._injected.append(TransferResult(job_id=job_id, success=False))
        return True

    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec, dst_spec: LoadStoreSpec) -> bool:
        if self._inject(job_id, store=True):
            return True  # submitted, and will finish as failed: no bytes were copied
        return self.inner.submit_store(job_id, src_spec, dst_spec)

    def submit_load(
        self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec, expedited: bool = False
    ) -> bool:
        self._loads.add(job_id)
        if self._inject(job_id, store=False):
            return True  # submitted, and will finish as failed: no bytes were copied
        # vLLM 0.33 added `expedited`; a 0.32 worker never sees the argument.
        if expedited:
            return self.inner.submit_load(job_id, src_spec, dst_spec, expedited=True)
        return self.inner.submit_load(job_id, src_spec, dst_spec)

    def _due(self, results: list[TransferResult]) -> list[TransferResult]:
        """Hold back the results of late jobs; release those whose lateness has run out."""
        for result in results:
            self._held[result.job_id] = result
        due = [r for job_id, r in self._held.items() if self._late.get(job_id, 0) <= 0]
        for result in due:
            self._held.pop(result.job_id)
            self._late.pop(result.job_id, None)
        for job_id in self._late:
            self._late[job_id] -= 1
        return due

    def get_finished(self) -> list[TransferResult]:
        results = self._due([*self.inner.get_finished(), *self._injected])
        self._injected.clear()
        passed = []
        for result in results:
            if not result.success:
                # vLLM's connector worker asserts success; the failure is reported separately.
                if result.job_id in self._loads:
                    self.owner.note_failed(result.job_id)
                else:
                    self.owner.note_failed_store(result.job_id)
                result = TransferResult(
                    job_id=result.job_id, success=True, transfer_size=0, transfer_time=0.0
                )
            self._loads.discard(result.job_id)
            passed.append(result)
        return passed

    def wait(self, job_ids: set[int]) -> None:
        """vLLM blocks on these jobs (a fence before block reuse): none of them stays late."""
        for job_id in job_ids:
            self._late.pop(job_id, None)
        self.inner.wait(job_ids)

    def shutdown(self) -> None:
        self.inner.shutdown()


class ClaimConnectorWorker(OffloadingConnectorWorker):
    """vLLM's connector worker, with claim tags per load and a reporting, fault-injecting worker."""

    def __init__(
        self,
        spec: OffloadingSpec,
        vllm_config: VllmConfig,
        kv_cache_config: KVCacheConfig,
        plan: LoadFaultPlan,
    ) -> None:
        super().__init__(spec, vllm_config, kv_cache_config)
        self.injector = LoadFaultInjector(plan)
        self._job_claims: dict[int, tuple[str, ...]] = {}
        self._job_request: dict[int, str] = {}
        self._job_blocks: dict[int, tuple[int, ...]] = {}
        self._injected: set[int] = set()
        self._failed: list[int] = []
        self._reported: dict[int, FailedLoad] = {}
        self._store_claims: dict[int, tuple[str, ...]] = {}
        self._failed_stores: dict[int, bool] = {}

    def _init_worker(self, kv_caches: CanonicalKVCaches) -> None:
        self.worker = ReportingWorker(self.spec.get_worker(kv_caches), self)

    def claims_of_job(self, job_id: int) -> tuple[str, ...]:
        return self._job_claims.get(job_id, ())

    def take_store_claims(self, job_id: int) -> tuple[str, ...]:
        """The claim tags of a store being submitted (forgotten: a job is submitted once)."""
        return self._store_claims.pop(job_id, ())

    def note_injected(self, job_id: int) -> None:
        self._injected.add(job_id)

    def note_failed(self, job_id: int) -> None:
        self._failed.append(job_id)

    def note_failed_store(self, job_id: int) -> None:
        """A store did not write its chunks: reported to the scheduler with the next metadata."""
        self._failed_stores[job_id] = job_id in self._injected
        self._injected.discard(job_id)

    def _tag_stores(self, metadata: OffloadingConnectorMetadata) -> None:
        # Only a store writer submits stores (and so takes their tags back).
        if isinstance(metadata, ClaimOffloadingMetadata) and getattr(self, "_is_store_writer", True):
            self._store_claims.update(metadata.store_claims)

    def handle_preemptions(self, kv_connector_metadata: OffloadingConnectorMetadata) -> None:
        self._tag_stores(kv_connector_metadata)  # flushed stores are submitted here
        super().handle_preemptions(kv_connector_metadata)

    def prepare_store_kv(self, metadata: OffloadingConnectorMetadata) -> None:
        self._tag_stores(metadata)
        super().prepare_store_kv(metadata)

    def start_kv_transfers(self, metadata: OffloadingConnectorMetadata) -> None:
        tags = metadata.load_claims if isinstance(metadata, ClaimOffloadingMetadata) else {}
        for job_id, job in metadata.load_jobs.items():
            self._job_claims[job_id] = tags.get(job_id, ())
            self._job_request[job_id] = job.req_id
            assert isinstance(job.dst_spec, GPULoadStoreSpec)
            self._job_blocks[job_id] = tuple(int(b) for b in job.dst_spec.block_ids)
        super().start_kv_transfers(metadata)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str], set[str]]:
        sending, recving = super().get_finished(finished_req_ids)
        for job_id in list(self._job_request):
            if job_id not in self._load_jobs and job_id not in self._failed:
                self._forget(job_id)  # finished successfully
        return sending, recving

    def _forget(self, job_id: int) -> None:
        self._job_claims.pop(job_id, None)
        self._job_request.pop(job_id, None)
        self._job_blocks.pop(job_id, None)
        self._injected.discard(job_id)

    def take_load_errors(self) -> set[int]:
        """Destination blocks of loads that failed since the last call (vLLM's
        `get_block_ids_with_load_errors`); the failures are stamped as reported now."""
        now = time.monotonic_ns()
        blocks: set[int] = set()
        for job_id in self._failed:
            failed = FailedLoad(
                job_id=job_id,
                request_id=self._job_request.get(job_id, ""),
                claim_ids=self._job_claims.get(job_id, ()),
                block_ids=self._job_blocks.get(job_id, ()),
                injected=job_id in self._injected,
                reported_mono_ns=now,
            )
            self._reported[job_id] = failed
            blocks.update(failed.block_ids)
            self._forget(job_id)
        self._failed.clear()
        return blocks

    def build_connector_worker_meta(self) -> OffloadingWorkerMetadata | None:
        base = super().build_connector_worker_meta()
        if base is None and not self._reported and not self._failed_stores:
            return None
        meta = ClaimWorkerMetadata(
            completed_jobs=base.completed_jobs if base else {},
            transfer_stats=base.transfer_stats if base else TransferStats(),
            failed_loads=self._reported,
            failed_stores=self._failed_stores,
        )
        self._reported = {}
        self._failed_stores = {}
        return meta


def sync_load_problem(extra_config: Mapping[str, Any]) -> str | None:
    """Why the claim connector cannot run with these connector settings, or None.

    vLLM 0.33's `sync_load_budget_bytes` loads small CPU hits inside the step that schedules
    the request: it never waits for its KV, so a claim's restoration would have no
    `restore_required` -> `restored` interval and a failed load would reach a running
    request. Refused until the restoration ledger models that path.
    """
    budget = extra_config.get("sync_load_budget_bytes", 0)
    if budget:
        return f"sync_load_budget_bytes={budget!r}: synchronous CPU-tier loads are not supported with claims"
    return None


class ClaimOffloadingConnector(OffloadingConnector):
    """`OffloadingConnector` with claim tags on load jobs and a reported load-failure path."""

    def __init__(
        self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig
    ) -> None:
        problem = sync_load_problem(vllm_config.kv_transfer_config.kv_connector_extra_config)  # type: ignore[union-attr]
        if problem is not None:
            raise ValueError(f"kvclaims: {problem}")
        super().__init__(vllm_config, role, kv_cache_config)
        self._directory: ClaimDirectory | None = None
        self._failed_stores: set[int] = set()
        """Store jobs some worker reported failed, until vLLM completes them."""
        if self.connector_worker is not None:
            extra = vllm_config.kv_transfer_config.kv_connector_extra_config  # type: ignore[union-attr]
            plan = LoadFaultPlan.from_mapping(extra.get(EXTRA_CONFIG_KEY))
            stock = self.connector_worker
            self.connector_worker = ClaimConnectorWorker(stock.spec, vllm_config, kv_cache_config, plan)

    # -- scheduler side ---------------------------------------------------------------------

    def bind(self, directory: ClaimDirectory) -> None:
        """Let the claim directory tag this connector's load jobs."""
        self._directory = directory

    @property
    def claim_policy(self) -> ClaimAwareLRUPolicy | None:
        """The CPU tier's claim-aware policy, when that is the configured eviction policy."""
        manager = self.scheduler.manager
        policy = getattr(manager, "_policy", None)  # vLLM 0.32 CPUOffloadingManager
        return policy if isinstance(policy, ClaimAwareLRUPolicy) else None

    @property
    def blocks_per_chunk(self) -> int:
        return int(self.scheduler.config.blocks_per_chunk)

    @property
    def num_workers(self) -> int:
        return int(self.scheduler.config.num_workers)

    def host_copy_ready(self, keys: Iterable[Any]) -> bool:
        """Whether every chunk in `keys` is stored (and readable) in the CPU tier."""
        from vllm.v1.kv_offload.base import LookupResult, ReqContext

        probe = ReqContext(req_id="kvclaims-host-copy-probe")
        manager = self.scheduler.manager
        return all(manager.lookup(key, probe) is LookupResult.HIT for key in keys)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = super().build_connector_meta(scheduler_output)
        assert isinstance(meta, OffloadingConnectorMetadata)
        loads: dict[int, tuple[str, ...]] = {}
        stores: dict[int, tuple[str, ...]] = {}
        if self._directory is not None:
            for job_id, job in meta.load_jobs.items():
                spec = job.dst_spec
                assert isinstance(spec, GPULoadStoreSpec)
                loads[job_id] = self._directory.on_load_scheduled(
                    job_id, job.req_id, int(spec.block_indices[0]), int(spec.group_sizes[0])
                )
            jobs = self.scheduler._jobs  # vLLM 0.32: job id -> status with the chunks' keys
            for job_id in meta.store_jobs:
                status = jobs.get(job_id)
                if status is not None:
                    stores[job_id] = self._directory.on_store_scheduled(job_id, frozenset(status.keys))
        return ClaimOffloadingMetadata(
            load_jobs=meta.load_jobs,
            store_jobs=meta.store_jobs,
            jobs_to_flush=meta.jobs_to_flush,
            load_claims=loads,
            store_claims=stores,
        )

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        """vLLM's completion bookkeeping, after the failed stores it completes now are
        completed as failed in the CPU tier (their unwritten chunks removed, never marked
        stored; vLLM's own `complete_store` then finds nothing to mark)."""
        meta = connector_output.kv_connector_worker_meta
        if isinstance(meta, ClaimWorkerMetadata):
            self._failed_stores.update(meta.failed_stores)
        if isinstance(meta, OffloadingWorkerMetadata) and self._failed_stores:
            fail_stores(self.scheduler, self._failed_stores, meta.completed_jobs)
        super().update_connector_output(connector_output)

    # -- worker side ------------------------------------------------------------------------

    def get_block_ids_with_load_errors(self) -> set[int]:
        worker = self.connector_worker
        return worker.take_load_errors() if isinstance(worker, ClaimConnectorWorker) else set()

    def set_load_fault_plan(self, plan: LoadFaultPlan) -> None:
        """Replace the worker's failure-injection plan (restarting its failure count)."""
        assert isinstance(self.connector_worker, ClaimConnectorWorker)
        self.connector_worker.injector.set_plan(plan)


def fail_stores(scheduler: Any, failed: set[int], completed: Mapping[int, int]) -> None:
    """Complete as failed, in vLLM 0.32's offloading scheduler `scheduler`, each store job of
    `failed` whose last worker report is in `completed` (job id -> reports); those leave
    `failed`. A job another worker still writes stays pending (its chunks are not freed)."""
    for job_id in sorted(failed & completed.keys()):
        status = scheduler._jobs.get(job_id)
        if status is None:
            failed.discard(job_id)  # a stale job (before a reset): vLLM skips it too
            continue
        if status.pending_count > completed[job_id]:
            continue
        context = scheduler._req_status[status.req_id].req_context
        scheduler.manager.complete_store(status.keys, context, success=False)
        failed.discard(job_id)


def process_connector(kind: type[C], name: str) -> C:
    """This worker process's KV connector (process-global in vLLM), which must be a `kind`
    (registered as `name`); raises `RuntimeError` otherwise."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

    if not has_kv_transfer_group():
        raise RuntimeError("this engine runs no KV connector")
    connector = get_kv_transfer_group()
    if not isinstance(connector, kind):
        raise RuntimeError(f"the engine's connector is {type(connector).__name__}, not {name}")
    return connector


def set_load_fault_plan(worker: Any, plan: dict[str, Any]) -> int:
    """`LLM.collective_rpc(set_load_fault_plan, args=(plan,))`: replace the injection plan in
    every worker process. Returns the failures the previous plan caused in this worker."""
    del worker  # the connector is process-global in vLLM
    connector = process_connector(ClaimOffloadingConnector, CONNECTOR_NAME)
    assert isinstance(connector.connector_worker, ClaimConnectorWorker)
    caused = connector.connector_worker.injector.failures
    connector.set_load_fault_plan(LoadFaultPlan.from_mapping(plan))
    return caused


__all__ = [
    "CONNECTOR_MODULE",
    "CONNECTOR_NAME",
    "ClaimConnectorWorker",
    "ClaimDirectory",
    "ClaimOffloadingConnector",
    "ClaimOffloadingMetadata",
    "ClaimWorkerMetadata",
    "FailedLoad",
    "ReportingWorker",
    "fail_stores",
    "process_connector",
    "set_load_fault_plan",
]
