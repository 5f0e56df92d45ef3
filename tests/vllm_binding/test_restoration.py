"""The restoration ledger: one open restoration per (claim, request), attempts capped."""

from __future__ import annotations

from kvclaims.vllm_binding.restoration import LoadJob, RestorationLedger


def job(job_id: int, request: str = "r1", claims: tuple[str, ...] = ("A",)) -> LoadJob:
    return LoadJob(job_id, request, claims, first_block=0, num_blocks=4)


def test_a_restoration_opens_once_however_many_jobs_carry_it() -> None:
    ledger = RestorationLedger()
    ledger.book(job(1))
    assert [j.job_id for j in ledger.take_new()] == [1] and ledger.take_new() == []
    assert ledger.open_restoration("A", "r1") and not ledger.open_restoration("A", "r1")
    assert ledger.open_claims(job(1)) == ("A",)


def test_a_successful_load_restores_and_closes() -> None:
    ledger = RestorationLedger()
    ledger.book(job(1))
    ledger.open_restoration("A", "r1")
    found, restored = ledger.succeeded(1)
    assert found is not None and restored == ("A",)
    assert not ledger.is_open("A", "r1") and ledger.succeeded(1) == (None, ())


def test_failed_attempts_are_retried_until_the_cap_then_exhausted() -> None:
    ledger = RestorationLedger()
    ledger.open_restoration("A", "r1")
    verdicts = []
    for job_id in (1, 2, 3):
        ledger.book(job(job_id))
        verdicts.append(ledger.failed(job_id, max_attempts=3)[1])
    assert [v.retried for v in verdicts] == [("A",), ("A",), ()]
    assert [v.exhausted for v in verdicts] == [(), (), ("A",)]
    assert [v.attempts for v in verdicts] == [1, 2, 3]
    assert not ledger.is_open("A", "r1")


def test_under_fail_the_first_failure_exhausts() -> None:
    ledger = RestorationLedger()
    ledger.open_restoration("A", "r1")
    ledger.book(job(1))
    assert ledger.failed(1, max_attempts=1)[1].exhausted == ("A",)


def test_a_load_that_restores_no_open_claim_counts_unclaimed_attempts() -> None:
    ledger = RestorationLedger()
    for job_id in (1, 2):
        ledger.book(job(job_id, claims=()))
        verdict = ledger.failed(job_id, max_attempts=3)[1]
    assert verdict.exhausted == () and verdict.retried == () and verdict.attempts == 2
    ledger.book(job(3, claims=()))
    ledger.succeeded(3)
    assert "r1" not in ledger.unclaimed_attempts


def test_only_the_claims_a_job_carries_are_charged() -> None:
    ledger = RestorationLedger()
    ledger.open_restoration("A", "r1")
    ledger.open_restoration("B", "r2")
    ledger.book(job(1, "r1", ("A", "B")))
    verdict = ledger.failed(1, max_attempts=1)[1]
    assert verdict.exhausted == ("A",) and ledger.is_open("B", "r2")


def test_closing_a_request_or_a_claim_ends_its_open_restorations() -> None:
    ledger = RestorationLedger()
    ledger.open_restoration("A", "r1")
    ledger.open_restoration("B", "r1")
    ledger.open_restoration("A", "r2")
    assert sorted(ledger.close_request("r1")) == ["A", "B"]
    assert ledger.close_claim("A") == ("r2",) and not ledger.open
