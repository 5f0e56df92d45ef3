"""Store faults on the CPU tier, with vLLM 0.32's own `CPUOffloadingManager`: a failed store,
a full tier and a late worker report each leave no host copy that the binding would count
(`ClaimOffloadingConnector.host_copy_ready`, which decides offloaded against harm), and a
failed store never reaches `block_stored`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytestmark = pytest.mark.vllm


def _tier(num_chunks: int) -> tuple[Any, Any]:
    from vllm.v1.kv_offload.base import ReqContext
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    return CPUOffloadingManager(num_chunks=num_chunks), ReqContext(req_id="writer")


def _keys(*tags: int) -> list[Any]:
    from vllm.v1.kv_offload.base import make_offload_key

    return [make_offload_key(bytes([tag]) * 32, 0) for tag in tags]


def _ready(manager: Any, keys: list[Any]) -> bool:
    from kvclaims.vllm_binding.connector import ClaimOffloadingConnector

    return ClaimOffloadingConnector.host_copy_ready(
        SimpleNamespace(scheduler=SimpleNamespace(manager=manager)), keys
    )  # type: ignore[arg-type]


def _scheduler(manager: Any, context: Any, jobs: dict[int, tuple[list[Any], int]]) -> Any:
    """The part of vLLM's offloading scheduler `fail_stores` reads: jobs with their keys."""
    status = {
        job: SimpleNamespace(keys=keys, pending_count=n, req_id="writer") for job, (keys, n) in jobs.items()
    }
    return SimpleNamespace(
        manager=manager, _jobs=status, _req_status={"writer": SimpleNamespace(req_context=context)}
    )


def test_a_failed_store_leaves_no_host_copy_even_after_vllm_completes_it() -> None:
    from kvclaims.vllm_binding.connector import fail_stores

    manager, context = _tier(4)
    keys = _keys(1, 2)
    assert manager.prepare_store(keys, context) is not None
    failed = {7}
    fail_stores(_scheduler(manager, context, {7: (keys, 1)}), failed, {7: 1})
    assert failed == set()
    manager.complete_store(keys, context)  # what vLLM's scheduler does next for the job
    assert not _ready(manager, keys)
    assert manager.prepare_store(_keys(3, 4, 5, 6), context) is not None, "the failed chunks were freed"


def test_a_store_another_worker_still_writes_is_failed_only_at_its_last_report() -> None:
    from kvclaims.vllm_binding.connector import fail_stores

    manager, context = _tier(4)
    keys = _keys(1)
    manager.prepare_store(keys, context)
    scheduler = _scheduler(manager, context, {7: (keys, 2)})
    failed = {7}
    fail_stores(scheduler, failed, {7: 1})
    assert failed == {7}, "one of two workers reported: the chunk stays allocated"
    scheduler._jobs[7].pending_count = 1
    fail_stores(scheduler, failed, {7: 1})
    assert failed == set()
    manager.complete_store(keys, context)
    assert not _ready(manager, keys)


def test_a_stale_failed_store_is_forgotten() -> None:
    from kvclaims.vllm_binding.connector import fail_stores

    manager, context = _tier(2)
    failed = {3}
    fail_stores(_scheduler(manager, context, {}), failed, {3: 1})
    assert failed == set()


def test_a_full_tier_stores_nothing_so_nothing_counts_as_a_host_copy() -> None:
    """An exhausted host buffer: vLLM's manager refuses the store (no job); no host copy."""
    manager, context = _tier(1)
    first, more = _keys(1), _keys(2, 3)
    assert manager.prepare_store(first, context) is not None
    assert manager.prepare_store(more, context) is None, "one chunk, write pending: no room"
    manager.complete_store(first, context)
    assert _ready(manager, first) and not _ready(manager, more)


def test_a_late_store_counts_only_once_its_worker_confirmed_it() -> None:
    manager, context = _tier(2)
    keys = _keys(1, 2)
    manager.prepare_store(keys, context)
    assert not _ready(manager, keys), "written but not yet reported: pending, not a host copy"
    manager.complete_store(keys, context)
    assert _ready(manager, keys)


class _Arbiter:
    def __init__(self) -> None:
        self.faults: list[tuple[str, str | None]] = []
        self.events: list[Any] = []

    def note_fault(self, kind: str, *, claim_id: str | None = None, request_id: str | None = None) -> None:
        self.faults.append((kind, claim_id))

    def emit(self, event: Any, **fields: Any) -> None:
        self.events.append((event, fields))


def _offload(stores: dict[int, list[tuple[str, int, Any]]]) -> tuple[Any, _Arbiter]:
    """The arbiter's CPU-tier side with only the state `before_update` reads for stores."""
    from kvclaims.vllm_binding.offload import ClaimOffload
    from kvclaims.vllm_binding.restoration import RestorationLedger

    offload = ClaimOffload.__new__(ClaimOffload)
    arbiter = _Arbiter()
    offload.arbiter = arbiter  # type: ignore[assignment]
    offload.connector = SimpleNamespace(num_workers=1)  # type: ignore[assignment]
    offload.ledger = RestorationLedger()
    offload._reports = {}
    offload._stores = stores
    return offload, arbiter


def test_a_failed_store_reports_no_host_copy_and_an_injected_one_is_attributed() -> None:
    from kvclaims.vllm_binding.connector import ClaimWorkerMetadata

    key = _keys(1)[0]
    offload, arbiter = _offload({5: [("claim:A", 0, key), ("claim:A", 1, key)], 6: [("claim:B", 0, key)]})
    meta = ClaimWorkerMetadata(completed_jobs={5: 1, 6: 1}, failed_stores={5: True, 6: False})
    offload.before_update(SimpleNamespace(kv_connector_worker_meta=meta))
    assert arbiter.events == [], "no block_stored for a store that failed"
    assert arbiter.faults == [("store_failure", "claim:A")], "a real failure is not called injected"
    assert offload._stores == {}


def test_failed_stores_of_every_worker_merge_and_injected_wins() -> None:
    from kvclaims.vllm_binding.connector import ClaimWorkerMetadata

    left = ClaimWorkerMetadata(completed_jobs={1: 1}, failed_stores={1: False})
    right = ClaimWorkerMetadata(completed_jobs={1: 1, 2: 1}, failed_stores={1: True, 2: False})
    assert left.aggregate(right).failed_stores == {1: True, 2: False}
