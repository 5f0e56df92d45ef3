"""Which CPU->GPU loads restore which claims for which requests, and how often each failed.

Pure bookkeeping (no vLLM import) for the arbiter. A load job is booked when the connector
schedules it, with the claims whose offloaded prefix blocks it carries (its claim tags). The
first job of a request that carries claim C opens the restoration (C, request): exactly one
`restore_required` per pair, however many attempts follow. Each job then ends once:

- succeeded: every open restoration it carries is restored;
- failed: each open restoration it carries has used one more attempt; a restoration that has
  used `max_attempts` is exhausted (its claim-scoped outcome is due), the others are retried
  by vLLM (`kv_load_failure_policy=recompute`) under the same open restoration.

Loads of a request that restore no claim are counted too (`unclaimed_attempts`), so that a
persistent fault on an unclaimed load can be capped instead of livelocking the request.
Invariants: a pair is open from its first job until restored, exhausted or forgotten; attempts
of an open pair never exceed `max_attempts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class LoadJob:
    """One scheduled CPU->GPU load: its request and the claims it would restore."""

    job_id: int
    request_id: str
    claim_ids: tuple[str, ...]
    first_block: int
    num_blocks: int


class FailureVerdict(NamedTuple):
    """What one failed load means for each restoration it carried (a named tuple: built on the
    failure-to-outcome path)."""

    exhausted: tuple[str, ...] = ()
    """Claims whose restoration for this request has used every attempt: outcome due."""
    retried: tuple[str, ...] = ()
    """Claims whose restoration stays open and is retried."""
    attempts: int = 0
    """Attempts used so far by this request's restorations (or its unclaimed load)."""


@dataclass
class RestorationLedger:
    """Open restorations, in-flight jobs, and attempt counts."""

    jobs: dict[int, LoadJob] = field(default_factory=dict)
    open: dict[tuple[str, str], int] = field(default_factory=dict)
    """(claim id, request id) -> failed attempts so far."""
    unclaimed_attempts: dict[str, int] = field(default_factory=dict)
    _new: list[LoadJob] = field(default_factory=list)

    def book(self, job: LoadJob) -> None:
        """A load was scheduled (reported to the arbiter by the connector)."""
        self.jobs[job.job_id] = job
        self._new.append(job)

    def take_new(self) -> list[LoadJob]:
        """Jobs booked since the last call, in booking order."""
        new, self._new = self._new, []
        return new

    def open_restoration(self, claim_id: str, request_id: str) -> bool:
        """Open (claim, request); False when it is already open (a retry)."""
        key = (claim_id, request_id)
        if key in self.open:
            return False
        self.open[key] = 0
        return True

    def is_open(self, claim_id: str, request_id: str) -> bool:
        return (claim_id, request_id) in self.open

    def open_claims(self, job: LoadJob) -> tuple[str, ...]:
        """The claims `job` carries whose restoration for its request is open."""
        return tuple(c for c in job.claim_ids if (c, job.request_id) in self.open)

    def succeeded(self, job_id: int) -> tuple[LoadJob | None, tuple[str, ...]]:
        """The job and the claims it restored (their restorations close)."""
        job = self.jobs.pop(job_id, None)
        if job is None:
            return None, ()
        restored = self.open_claims(job)
        for claim_id in restored:
            del self.open[(claim_id, job.request_id)]
        self.unclaimed_attempts.pop(job.request_id, None)
        return job, restored

    def failed(self, job_id: int, max_attempts: int) -> tuple[LoadJob | None, FailureVerdict]:
        """Count one failed attempt for every restoration the job carried."""
        job = self.jobs.pop(job_id, None)
        if job is None:
            return None, FailureVerdict()
        carried = self.open_claims(job)
        if not carried:
            attempts = self.unclaimed_attempts.get(job.request_id, 0) + 1
            self.unclaimed_attempts[job.request_id] = attempts
            return job, FailureVerdict(attempts=attempts)
        exhausted, retried, attempts = [], [], 0
        for claim_id in carried:
            key = (claim_id, job.request_id)
            self.open[key] += 1
            attempts = max(attempts, self.open[key])
            if self.open[key] >= max_attempts:
                del self.open[key]
                exhausted.append(claim_id)
            else:
                retried.append(claim_id)
        return job, FailureVerdict(tuple(exhausted), tuple(retried), attempts)

    def close_request(self, request_id: str) -> tuple[str, ...]:
        """Forget a finished request; returns the claims whose restoration was still open."""
        still_open = tuple(c for (c, r) in self.open if r == request_id)
        for claim_id in still_open:
            del self.open[(claim_id, request_id)]
        self.unclaimed_attempts.pop(request_id, None)
        return still_open

    def close_claim(self, claim_id: str) -> tuple[str, ...]:
        """A claim left responsibility: its open restorations end; returns their requests."""
        requests = tuple(r for (c, r) in self.open if c == claim_id)
        for request_id in requests:
            del self.open[(claim_id, request_id)]
        return requests
