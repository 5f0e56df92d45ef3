"""The connector's failure path: injected and real load failures are recorded and reported,
never asserted away; worker metadata carries them across workers."""

from __future__ import annotations

from typing import Any

import pytest

from kvclaims.vllm_binding.faults import LoadFaultInjector, LoadFaultPlan

pytestmark = pytest.mark.vllm


class Inner:
    """An offload worker whose loads fail when told to (a real copy error)."""

    def __init__(self, failing: set[int]) -> None:
        from vllm.v1.kv_offload.base import TransferResult

        self._result = TransferResult
        self.failing = failing
        self.done: list[Any] = []
        self.loads: list[int] = []
        self.stores: list[int] = []

    def submit_store(self, job_id: int, src: Any, dst: Any) -> bool:
        self.stores.append(job_id)
        self.done.append(self._result(job_id, True, 64, 0.0))
        return True

    def submit_load(self, job_id: int, src: Any, dst: Any) -> bool:
        self.loads.append(job_id)
        self.done.append(self._result(job_id, job_id not in self.failing, 64, 0.0))
        return True

    def get_finished(self) -> list[Any]:
        done, self.done = self.done, []
        return done

    def wait(self, job_ids: set[int]) -> None:
        pass


class Owner:
    def __init__(self, plan: LoadFaultPlan, claims: dict[int, tuple[str, ...]]) -> None:
        self.injector = LoadFaultInjector(plan)
        self.claims = claims
        self.injected: list[int] = []
        self.failed: list[int] = []
        self.failed_stores: list[int] = []

    def claims_of_job(self, job_id: int) -> tuple[str, ...]:
        return self.claims.get(job_id, ())

    def take_store_claims(self, job_id: int) -> tuple[str, ...]:
        return self.claims.get(job_id, ())

    def note_failed_store(self, job_id: int) -> None:
        self.failed_stores.append(job_id)

    def note_injected(self, job_id: int) -> None:
        self.injected.append(job_id)

    def note_failed(self, job_id: int) -> None:
        self.failed.append(job_id)


def test_an_injected_failure_copies_nothing_and_is_reported_as_done() -> None:
    from kvclaims.vllm_binding.connector import ReportingWorker

    inner = Inner(failing=set())
    owner = Owner(LoadFaultPlan(enabled=True, target_claim="claim:A"), {1: ("claim:A",), 2: ("claim:B",)})
    worker = ReportingWorker(inner, owner)  # type: ignore[arg-type]
    assert worker.submit_load(1, None, None) and worker.submit_load(2, None, None)
    assert worker.submit_store(3, None, None)
    results = worker.get_finished()
    assert inner.loads == [2], "the injected load never reached the copy engine"
    assert owner.injected == [1] and owner.failed == [1]
    assert sorted(r.job_id for r in results) == [1, 2, 3] and all(r.success for r in results)


def test_expedited_loads_reach_a_033_worker_and_a_032_worker_never_sees_the_argument() -> None:
    """vLLM 0.33 submits small CPU hits with `expedited=True`; 0.32's workers take three
    arguments (`Inner` here), so the flag is forwarded only when set."""
    from kvclaims.vllm_binding.connector import ReportingWorker

    class Inner033(Inner):
        def __init__(self) -> None:
            super().__init__(failing=set())
            self.expedited: list[tuple[int, bool]] = []

        def submit_load(self, job_id: int, src: Any, dst: Any, expedited: bool = False) -> bool:
            self.expedited.append((job_id, expedited))
            return super().submit_load(job_id, src, dst)

    current = Inner033()
    worker = ReportingWorker(current, Owner(LoadFaultPlan(), {}))  # type: ignore[arg-type]
    assert worker.submit_load(1, None, None, expedited=True) and worker.submit_load(2, None, None)
    assert current.expedited == [(1, True), (2, False)]
    previous = Inner(failing=set())
    assert ReportingWorker(previous, Owner(LoadFaultPlan(), {})).submit_load(3, None, None)  # type: ignore[arg-type]
    assert previous.loads == [3]


def test_synchronous_loads_are_refused_with_a_reason() -> None:
    from kvclaims.vllm_binding.connector import sync_load_problem

    assert sync_load_problem({}) is None
    assert sync_load_problem({"sync_load_budget_bytes": 0}) is None
    problem = sync_load_problem({"sync_load_budget_bytes": 1 << 20})
    assert problem is not None and "sync_load_budget_bytes=1048576" in problem


def test_a_real_copy_failure_is_recorded_instead_of_killing_the_engine() -> None:
    from kvclaims.vllm_binding.connector import ReportingWorker

    owner = Owner(LoadFaultPlan(), {})
    worker = ReportingWorker(Inner(failing={5}), owner)  # type: ignore[arg-type]
    worker.submit_load(5, None, None)
    assert [r.success for r in worker.get_finished()] == [True]
    assert owner.failed == [5] and owner.injected == []


def test_a_failed_store_is_reported_as_failed_and_passed_on_as_done() -> None:
    """A store the worker says failed is reported as a failed store (not a failed load), and
    passed on as done with nothing copied, so vLLM's worker neither asserts nor waits on it."""
    from kvclaims.vllm_binding.connector import ReportingWorker

    inner = Inner(failing=set())
    inner.done.append(inner._result(9, False, 0, 0.0))  # a store that failed
    owner = Owner(LoadFaultPlan(), {})
    worker = ReportingWorker(inner, owner)  # type: ignore[arg-type]
    assert [(r.job_id, r.success, r.transfer_size) for r in worker.get_finished()] == [(9, True, 0)]
    assert owner.failed_stores == [9] and owner.failed == []


def test_an_injected_store_failure_selects_only_stores_of_the_target_claim() -> None:
    from kvclaims.vllm_binding.connector import ReportingWorker

    inner = Inner(failing=set())
    plan = LoadFaultPlan(enabled=True, target_claim="claim:A", stores=True)
    owner = Owner(plan, {1: ("claim:A",), 2: ("claim:B",), 3: (), 4: ("claim:A",)})
    worker = ReportingWorker(inner, owner)  # type: ignore[arg-type]
    for job in (1, 2, 3):
        assert worker.submit_store(job, None, None)
    assert worker.submit_load(4, None, None)
    results = {r.job_id: r for r in worker.get_finished()}
    assert sorted(results) == [1, 2, 3, 4] and all(r.success for r in results.values())
    assert inner.stores == [2, 3] and inner.loads == [4], "the load was not failed"
    assert results[1].transfer_size == 0 and results[2].transfer_size == 64
    assert owner.failed_stores == [1] and owner.injected == [1] and owner.failed == []


def test_a_late_store_is_reported_exactly_late_by_reports_later() -> None:
    """A late worker: the store's completion is held for `late_by` reports, then released."""
    from kvclaims.vllm_binding.connector import ReportingWorker

    plan = LoadFaultPlan(enabled=True, stores=True, late_by=3)
    worker = ReportingWorker(Inner(failing=set()), Owner(plan, {1: ("claim:A",), 2: ()}))  # type: ignore[arg-type]
    worker.submit_store(1, None, None)
    worker.submit_store(2, None, None)
    reports = [[r.job_id for r in worker.get_finished()] for _ in range(5)]
    assert reports == [[2], [], [], [1], []]


def test_a_late_job_vllm_waits_for_is_released_at_once() -> None:
    """vLLM's fence (`wait` before block reuse) never blocks on an injected lateness."""
    from kvclaims.vllm_binding.connector import ReportingWorker

    plan = LoadFaultPlan(enabled=True, stores=True, late_by=100)
    worker = ReportingWorker(Inner(failing=set()), Owner(plan, {1: ("claim:A",)}))  # type: ignore[arg-type]
    worker.submit_store(1, None, None)
    assert worker.get_finished() == []
    worker.wait({1})
    assert [r.job_id for r in worker.get_finished()] == [1]


def test_worker_metadata_merges_failed_loads_of_every_worker() -> None:
    from kvclaims.vllm_binding.connector import ClaimWorkerMetadata, FailedLoad

    def failed(job: int) -> FailedLoad:
        return FailedLoad(job, f"r{job}", ("claim:A",), (job,), True, 1)

    left = ClaimWorkerMetadata(completed_jobs={1: 1}, failed_loads={1: failed(1)})
    right = ClaimWorkerMetadata(completed_jobs={1: 1, 2: 1}, failed_loads={2: failed(2)})
    merged = left.aggregate(right)
    assert merged.completed_jobs == {1: 2, 2: 1} and sorted(merged.failed_loads) == [1, 2]
