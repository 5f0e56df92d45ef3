"""Hypothesis state machines over the MicroRuntime, for kvclaims' CI and for runtime authors.

`MicroRuntimeMachine` drives a MicroRuntime with rules that only generate legal successors
(submit / accept / reject through the policy, materialize, active requests, eviction pressure,
demote, expire, offload, restore, failed restores, checkpoint corruption, reuse, release, and
soft terms: capped durations and extensions, DESIGN 6.3) and
checks, after every step, invariants named after the property they guard:

- `block_conservation`: free + resident + active = usable, from a recount of the pool;
- `no_unreported_predicate_loss`: a claim the runtime still calls materialized really has its
  leading prefix in the pool (an accepted hard claim never loses its predicate silently);
- `blocking_ids_name_holding_hard_claims`: refusals and deferrals for capacity name only
  accepted claims with a preservation obligation that hold blocks;
- `no_harm_after_release`: no harm is reported for a claim after its release;
- `capacity_proof_arithmetic`: every refusal's and deferral's numbers add up against the pool;
- `victim_exclusion_before_violation`: a preserving claim is harmed only after an injected fault
  (the runtime itself never evicts a protected block);
- `emitted_trace_accepted`: every event so far is accepted by the refinement checker
  (`kvclaims.refinement.checker.Checker`, fed event by event as the runtime emits them).

It lives in the lab, not in `kvclaims.microruntime`, because that invariant needs the
refinement checker and only the lab (and the layers above it) may import refinement.

`FleetMachine` runs several MicroRuntime pools behind a router: claims kept on one engine,
reuses routed to any with a predicted hit, the router stream judged by the routing model
(`kvclaims.statemachine.routing`) after every step; `MisattributingFleetMachine` plants a hook
that reports predictions as deliveries, which the CI profile must find.

Subclass it to fuzz your own runtime: set `runtime_class` (a `MicroRuntime` subclass) and/or
`policy`. Coverage of lifecycle phases and transitions accumulates on the class, so a test can
assert that a profile reached every phase. The `ci` settings profile is deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count
from typing import Any, ClassVar
from unittest.mock import patch

import msgspec
from hypothesis import seed as hypothesis_seed
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvclaims.lab.fuzz_settings import batches, bounded
from kvclaims.microruntime.inputs import ClaimSpec, RequestKind, RequestSpec
from kvclaims.microruntime.policies import POLICIES, Policy
from kvclaims.microruntime.runtime import FaultKind, MicroClaim, MicroRuntime
from kvclaims.microruntime.tracing import TraceBuffer
from kvclaims.refinement.checker import Checker, Rejection, Undecidable
from kvclaims.refinement.decoding import convert_event
from kvclaims.spec.capacity import recorded_capacity_problem
from kvclaims.spec.errors import InputError
from kvclaims.spec.tables import PRESERVING_MODES
from kvclaims.spec.trace import (
    EVENT_MODELS,
    RestorationOutcome,
    RouteDecided,
    RouteOutcome,
    RouteReuseReported,
)
from kvclaims.spec.vocabulary import NS_PER_MS, ProtectionMode
from kvclaims.statemachine import routing
from kvclaims.statemachine.lifecycle import RESPONSIBLE, Event, Phase
from kvclaims.statemachine.requests import RequestEvent, RequestPhase
from kvclaims.statemachine.system import Violation

settings.register_profile("ci", bounded(max_examples=600, stateful_step_count=50))
"""Bounded, seeded per commit under pytest: kvclaims' own CI runs this profile."""

OBJECTS: dict[str, int] = {"doc-a": 4, "doc-b": 8, "doc-c": 12, "doc-d": 20}
"""Reusable prefix objects the machine's claims and requests name (length in blocks)."""

MIN_USABLE_BLOCKS = max(OBJECTS.values())
"""The smallest pool a machine may fuzz: every object's whole prefix fits once."""

CLAIM_MODES = tuple(ProtectionMode)

_NOT_REUSABLE = frozenset({Phase.absent, Phase.submitted, Phase.rejected, Phase.released})
"""Phases in which no request may name the claim it reuses."""


def _resumable_in_place(claim: MicroClaim) -> bool:
    return claim.spec.two_key and claim.phase is Phase.materialized and claim.checkpoint is not None


JOBS = 3
JOB_TURN_BLOCKS = (5, 9, 18, 25, 32)
"""An agent job's context per turn (seed 003 4.2), capped at the largest object's size."""


class EmittedTraceCheck:
    """The refinement checker fed a runtime's trace v1 events as they are emitted.

    `feed` returns None while the trace so far is accepted, else why not (a decoding error, a
    `seq` that does not increase, a rejection, an undecidable step, an unknown event type);
    after the first failure it checks nothing more (the checker's state is no longer the
    trace's). `finish` checks what the trace owes at its end.
    """

    def __init__(self, header: dict[str, Any]) -> None:
        self.checker = Checker(usable_blocks=header.get("usable_blocks"), block_size=header.get("block_size"))
        self.failure: str | None = None
        self._index = 0
        self._last_seq = -1

    def feed(self, event: dict[str, Any]) -> str | None:
        """Check one emitted event (line numbers count the header as line 1)."""
        if self.failure is None:
            seq = event.get("seq")
            if not isinstance(seq, int) or seq <= self._last_seq:
                self.failure = f"seq {seq} does not increase past {self._last_seq}"
                return self.failure
            self._last_seq = seq
            self._run(lambda: self.checker.feed(convert_event(event), self._index + 2, self._index))
            self._index += 1
        return self.failure

    def finish(self) -> str | None:
        """Check the end of the trace: owed outcomes, and anything left undecided."""
        if self.failure is None:
            self._run(self.checker.finish)
        if self.failure is None:
            undecided = self.checker.first_unknown or next(iter(self.checker.undecided), None)
            if undecided is not None:
                self.failure = f"inconclusive: {undecided.message}"
        return self.failure

    def _run(self, check: Callable[[], None]) -> None:
        try:
            check()
        except Rejection as rejection:
            found = rejection.counterexample
            self.failure = f"[{found.rule.value}] line {found.line} ({found.event}): {found.message}"
        except Undecidable as undecidable:
            self.failure = f"inconclusive: {undecidable.finding.message}"
        except msgspec.ValidationError as error:
            self.failure = f"not a trace v1 event: {error}"


class InvariantBroken(AssertionError):
    """An invariant of the contract failed; the message starts with the invariant's name."""


@dataclass
class Coverage:
    """Lifecycle phases and transitions a machine's runtimes reached, across examples."""

    phases: set[Phase] = field(default_factory=set)
    transitions: set[tuple[Phase, Event, Phase]] = field(default_factory=set)
    request_transitions: set[tuple[RequestPhase, RequestEvent, RequestPhase]] = field(default_factory=set)
    examples: int = 0
    steps: int = 0
    events: int = 0

    def absorb(self, runtime: MicroRuntime, steps: int) -> None:
        self.phases |= runtime.phases_reached
        self.transitions |= runtime.transitions_taken
        self.request_transitions |= runtime.request_transitions
        self.examples += 1
        self.steps += steps
        self.events += runtime.events_emitted


class MicroRuntimeMachine(RuleBasedStateMachine):
    """Fuzz a MicroRuntime. Override `runtime_class`, `policy` or `usable_blocks` (at least
    `MIN_USABLE_BLOCKS`; active requests never ask for more than the pool) to fuzz a variant;
    `coverage` (per class) records what the examples reached."""

    runtime_class: ClassVar[Callable[..., MicroRuntime]] = MicroRuntime
    policy: ClassVar[Policy] = POLICIES["full_arbiter"]
    usable_blocks: ClassVar[int] = 48
    coverage: ClassVar[Coverage] = Coverage()

    def __init__(self) -> None:
        if self.usable_blocks < MIN_USABLE_BLOCKS:
            raise ValueError(
                f"{type(self).__name__}.usable_blocks is {self.usable_blocks}; the machine's largest "
                f"prefix object needs {MIN_USABLE_BLOCKS} (MIN_USABLE_BLOCKS)"
            )
        super().__init__()
        self.buffer = TraceBuffer()
        self.runtime = type(self).runtime_class(
            self.usable_blocks,
            policy=self.policy,
            sink=self.buffer.append,
            source="kvclaims-fuzz",
            wall_clock=True,
        )
        for object_id, blocks in OBJECTS.items():
            self.runtime.register_object(object_id, blocks)
        self.clock_started: dict[str, int] = {}
        """Per `duration_ms` claim, the `t_ns` its trace says its clock (re)started at."""
        self.clock_decided: dict[str, int] = {}
        self.clock_cap_ns: dict[str, int] = {}
        self.clock_extended: dict[str, int] = {}
        """Per `duration_ms` claim, from its trace: the `t_ns` of its acceptance, its cap's
        `max_duration_ms` in ns (if capped) and the latest end an extension granted."""
        self.job_turns: dict[str, int] = {}
        self.job_pins: dict[str, str] = {}
        """Per agent job, its next turn and its live pin claim (Continuum as claims)."""
        self.trace_check = EmittedTraceCheck(self.runtime.header)
        self.holding: dict[str, set[int]] = {}
        """Per claim, the positions its emitted block events say it holds."""
        self.findings: dict[str, list[str]] = {}
        self.released: set[str] = set()
        self.faulted: set[str] = set()
        self._seen = 0
        self._ids = count()
        self._steps = 0

    # ------------------------------------------------------------------ helpers

    def _next(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    def _claims(self, predicate: Callable[[MicroClaim], bool]) -> list[MicroClaim]:
        return [c for c in self.runtime.claims.values() if predicate(c)]

    def _allowing(self, event: Event) -> list[MicroClaim]:
        return self._claims(lambda c: self.runtime.allows(c.spec.claim_id, event))

    @staticmethod
    def _pick(candidates: list[MicroClaim], index: int) -> MicroClaim:
        return candidates[index % len(candidates)]

    def _run(self, spec: RequestSpec, *, hold: bool = False) -> None:
        self.runtime.submit_request(spec)
        if not hold and self.runtime.requests[spec.request_id].phase is RequestPhase.admitted:
            self.runtime.finish_request(spec.request_id)

    def _finding(self, invariant_name: str, message: str) -> None:
        self.findings.setdefault(invariant_name, []).append(message)

    def _check(self, invariant_name: str) -> None:
        self._observe()
        found = self.findings.get(invariant_name)
        if found:
            raise InvariantBroken(f"{invariant_name}: {found[0]}")

    def _observe(self) -> None:
        """Feed new events to the refinement checker and to the trace-level invariants, once each."""
        events = self.buffer.events
        usable = self.runtime.pool.usable
        while self._seen < len(events):
            event = events[self._seen]
            self._seen += 1
            name, claim_id = event["event"], event.get("claim_id")
            if name == "fault_injected" and claim_id:
                self.faulted.add(claim_id)
            if name == "resident_claim_released":
                self.released.add(claim_id)
            harmed = name == "resident_claim_harmed" or (
                name == "resident_claim_restoration_failed" and event["outcome"] == "harm"
            )
            if harmed and claim_id in self.released:
                self._finding(
                    "no_harm_after_release", f"{claim_id} harmed after its release (seq {event['seq']})"
                )
            if harmed and claim_id not in self.faulted:
                self._finding(
                    "victim_exclusion_before_violation",
                    f"{claim_id} harmed with no fault injected (seq {event['seq']}): a protected block "
                    "was a victim",
                )
            if name in ("active_request_refused", "active_request_deferred"):
                self._conflict(event, usable)
            self._track_clock(name, event)
            self._track_blocks(name, event)
            failure = self.trace_check.feed(event)
            if failure is not None:
                self._finding("emitted_trace_accepted", failure)

    def _track_clock(self, name: str, event: dict[str, Any]) -> None:
        claim_id = event.get("claim_id")
        if name == "resident_claim_accepted" and event.get("duration_ms"):
            self.clock_started[claim_id] = self.clock_decided[claim_id] = event["t_ns"]
            if event.get("max_duration_ms"):
                self.clock_cap_ns[claim_id] = event["max_duration_ms"] * NS_PER_MS
        elif name == "resident_claim_extended" and event.get("duration_ms"):
            end = event["t_ns"] + event["duration_ms"] * NS_PER_MS
            self.clock_extended[claim_id] = max(end, self.clock_extended.get(claim_id, end))
        elif name == "request_reused" and event["predicate_satisfied"] and claim_id in self.clock_started:
            claim = self.runtime.claims.get(claim_id)
            if claim is not None and claim.spec.refresh_on_hit:
                self.clock_started[claim_id] = event["t_ns"]

    def _track_blocks(self, name: str, event: dict[str, Any]) -> None:
        claim_id, position = event.get("claim_id"), event.get("position")
        if claim_id is None or not isinstance(position, int):
            return
        if name == "block_stored":
            self.holding.setdefault(claim_id, set()).add(position)
        elif name == "block_removed":
            self.holding.get(claim_id, set()).discard(position)

    def _conflict(self, event: dict[str, Any], usable: int) -> None:
        problem = recorded_capacity_problem(event, usable)
        if problem is not None:
            self._finding("capacity_proof_arithmetic", f"seq {event['seq']}: {problem.message}")
        if event["reason"] != "capacity":
            return
        for claim_id in event["blocking_claim_ids"]:
            claim = self.runtime.claims.get(claim_id)
            if claim is None or claim.spec.mode not in PRESERVING_MODES or not self.holding.get(claim_id):
                self._finding(
                    "blocking_ids_name_holding_hard_claims",
                    f"seq {event['seq']} names {claim_id}: it holds no blocks under a preservation "
                    "obligation",
                )

    # ------------------------------------------------------------------ rules

    @rule(
        mode=st.sampled_from(CLAIM_MODES),
        object_id=st.sampled_from(sorted(OBJECTS)),
        footprint_cut=st.integers(0, 3),
        required_cut=st.integers(0, 3),
        two_key=st.booleans(),
        duration=st.integers(1, 5),
        cap=st.none() | st.integers(0, 2),
    )
    def submit_claim(
        self,
        mode: ProtectionMode,
        object_id: str,
        footprint_cut: int,
        required_cut: int,
        two_key: bool,
        duration: int,
        cap: int | None = None,
    ) -> None:
        """Submit a claim; the policy accepts or rejects it (both are legal successors). An
        expiring one lasts `duration` engine steps, capped `cap` steps beyond that if given."""
        expiring = mode is ProtectionMode.expiring
        steps_cap = cap if expiring else None
        footprint = max(1, OBJECTS[object_id] - footprint_cut)
        required = max(1, footprint - required_cut)
        spec = ClaimSpec(
            self._next("claim-"),
            object_id,
            mode,
            footprint,
            required,
            owner_scope=f"tenant-{footprint_cut}",
            duration_steps=duration if expiring else None,
            max_duration_steps=None if steps_cap is None else duration + steps_cap,
            two_key=two_key,
        )
        self.runtime.submit_claim(spec)

    @rule(object_id=st.sampled_from(sorted(OBJECTS)), duration=st.integers(1, 5))
    def submit_two_key_claim(self, object_id: str, duration: int) -> None:
        """A hybrid two-key claim (seed 002): offloadable, with a checkpoint at its boundary."""
        blocks = OBJECTS[object_id]
        spec = ClaimSpec(
            self._next("claim-"), object_id, ProtectionMode.offloadable, blocks, blocks, two_key=True
        )
        self.runtime.submit_claim(spec)

    @rule(
        object_id=st.sampled_from(sorted(OBJECTS)),
        duration_ms=st.integers(1, 400),
        refresh_on_hit=st.booleans(),
        cap_ms=st.none() | st.integers(0, 150),
    )
    def submit_timed_claim(
        self, object_id: str, duration_ms: int, refresh_on_hit: bool, cap_ms: int | None = None
    ) -> None:
        """A wall-clock claim (TTL style): expires `duration_ms` after acceptance, or after its
        last satisfied reuse with `refresh_on_hit`; with `cap_ms`, never later than
        `duration_ms + cap_ms` after acceptance (a capped TTL)."""
        blocks = OBJECTS[object_id]
        spec = ClaimSpec(
            self._next("claim-"),
            object_id,
            ProtectionMode.expiring,
            blocks,
            blocks,
            duration_ms=duration_ms,
            refresh_on_hit=refresh_on_hit,
            max_duration_ms=None if cap_ms is None else duration_ms + cap_ms,
        )
        self.runtime.submit_claim(spec)

    def _extendable(self) -> list[MicroClaim]:
        return self._claims(
            lambda c: (
                (c.spec.duration_steps is not None or c.spec.duration_ms is not None)
                and self.runtime.allows(c.spec.claim_id, Event.extend)
            )
        )

    @precondition(lambda self: self._extendable())
    @rule(index=st.integers(0, 63), length=st.integers(1, 500))
    def extend(self, index: int, length: int) -> None:
        """An owner asks to lengthen a timed claim's term (extend-only deadlines, DESIGN 6.3) by
        `length` ms, or `1 + length % 6` engine steps: granted, clipped to its cap or refused,
        and only a grant emits an event. One request in four names the clock the claim lacks:
        an input error that emits nothing."""
        steps, ms, wrong_clock = 1 + length % 6, length, length % 4 == 0
        claim = self._pick(self._extendable(), index)
        claim_id = claim.spec.claim_id
        on_steps = (claim.spec.duration_steps is not None) != wrong_clock
        request = {"duration_steps": steps} if on_steps else {"duration_ms": ms}
        before = len(self.buffer.events)
        if wrong_clock:
            try:
                self.runtime.extend_claim(claim_id, **request)
            except InputError:
                expected = 0
            else:
                raise InvariantBroken(f"extensions_emit_only_grants: {claim_id} extended on a clock it lacks")
        else:
            result = self.runtime.extend_claim(claim_id, reason="fuzz", **request)
            expected = 1 if result.granted else 0
        emitted = len(self.buffer.events) - before
        if emitted != expected:
            raise InvariantBroken(
                f"extensions_emit_only_grants: extending {claim_id} by {request} emitted {emitted} events"
            )

    @rule(ms=st.integers(1, 300))
    def advance_clock(self, ms: int) -> None:
        """Wall-clock time passes with no engine step: timed claims whose duration ended expire."""
        self.runtime.advance_clock(ms)

    def _timed_responsible(self) -> list[MicroClaim]:
        """Responsible `duration_ms` claims whose acceptance the trace has shown."""
        self._observe()  # the trace so far, whether or not an invariant has read it yet
        shown = self.clock_started
        return self._claims(
            lambda c: c.phase in RESPONSIBLE and c.spec.duration_ms is not None and c.spec.claim_id in shown
        )

    def _traced_end_ns(self, claim: MicroClaim) -> int:
        """The `t_ns` a timed claim's term ends at, read from its trace (not the runtime's own
        arithmetic): `min(max(start + duration, latest extension), acceptance + cap)`."""
        claim_id = claim.spec.claim_id
        assert claim.spec.duration_ms is not None
        end = max(
            self.clock_started[claim_id] + claim.spec.duration_ms * NS_PER_MS,
            self.clock_extended.get(claim_id, 0),
        )
        if claim_id in self.clock_cap_ns:
            end = min(end, self.clock_decided[claim_id] + self.clock_cap_ns[claim_id])
        return end

    @precondition(lambda self: self._timed_responsible())
    @rule(index=st.integers(0, 63), offset_ms=st.sampled_from((-1, 0, 1)))
    def advance_clock_to_a_term_end(self, index: int, offset_ms: int) -> None:
        """Wall-clock time passes to one millisecond before, at or after a timed claim's term
        end: the instants where an off-by-one deadline shows (random advances rarely land on
        them)."""
        claim = self._pick(self._timed_responsible(), index)
        ms = (self._traced_end_ns(claim) - self.runtime.now_ns) // NS_PER_MS + offset_ms
        if ms > 0:
            self.runtime.advance_clock(ms)

    @rule(job=st.integers(0, JOBS - 1), last=st.booleans(), pin_ms=st.integers(1, 400))
    def job_turn(self, job: int, last: bool, pin_ms: int) -> None:
        """Seed 003's agent turn, with Continuum's pin kept as a claim: the turn reuses its
        job's pin (its context grew), the old pin is released when the turn finishes, and a
        non-last turn pins its context as an expiring `duration_ms` claim. Under a stock TTL
        pin policy the runtime pins the finished turn itself (the claims are then rejected)."""
        job_id = f"job-{job}"
        turn = self.job_turns.get(job_id, 0)
        blocks = min(JOB_TURN_BLOCKS[min(turn, len(JOB_TURN_BLOCKS) - 1)], MIN_USABLE_BLOCKS)
        self.runtime.register_object(job_id, blocks)
        pin = self.job_pins.pop(job_id, None)
        live = self._claims(lambda c: c.spec.claim_id == pin and c.phase not in _NOT_REUSABLE)
        spec = RequestSpec(
            self._next(f"{job_id}-t{turn}-"),
            job_id,
            blocks,
            reuse_claim=pin if live else None,
            job_id=job_id,
            last_turn=last,
        )
        self._run(spec)
        if live and self.runtime.allows(pin, Event.release):
            self.runtime.release(pin, "superseded by the job's next turn")
        if last:
            self.job_turns.pop(job_id, None)
            return
        self.job_turns[job_id] = turn + 1
        claim_id = self._next(f"pin-{job_id}-")
        plan = self.runtime.submit_claim(
            ClaimSpec(
                claim_id,
                job_id,
                ProtectionMode.expiring,
                blocks,
                blocks,
                owner_scope=job_id,
                duration_ms=pin_ms,
            )
        )
        if plan.accepted:
            self.job_pins[job_id] = claim_id

    @precondition(lambda self: self._claims(lambda c: c.phase is Phase.accepted))
    @rule(index=st.integers(0, 63))
    def materialize(self, index: int) -> None:
        """Compute an accepted claim's prefix so that it materializes."""
        claim = self._pick(self._claims(lambda c: c.phase is Phase.accepted), index)
        spec = RequestSpec(
            self._next("prefill-"),
            claim.spec.object_id,
            claim.spec.footprint_blocks,
            kind=RequestKind.resident,
        )
        self._run(spec)

    @rule(object_id=st.sampled_from(sorted(OBJECTS)), cut=st.integers(0, 4))
    def prefill(self, object_id: str, cut: int) -> None:
        """Compute (part of) a prefix: claims on it materialize when their predicate holds."""
        blocks = max(1, OBJECTS[object_id] - cut)
        self._run(RequestSpec(self._next("prefill-"), object_id, blocks, kind=RequestKind.resident))

    @rule(blocks=st.integers(1, 48), chunks=st.integers(1, 4), hold=st.booleans())
    def active_request(self, blocks: int, chunks: int, hold: bool) -> None:
        """Active pressure on the pool: evictions, or a conflict the arbiter must resolve."""
        blocks = min(blocks, self.usable_blocks)  # larger than the pool is invalid input, not pressure
        sizes = None
        if chunks > 1 and blocks >= chunks:
            base = blocks // chunks
            sizes = (*([base] * (chunks - 1)), blocks - base * (chunks - 1))
        request_id = self._next("active-")
        self._run(RequestSpec(request_id, f"bulk-{request_id}", blocks, chunks=sizes), hold=hold)

    @precondition(lambda self: any(r.phase is RequestPhase.admitted for r in self.runtime.requests.values()))
    @rule()
    def finish_running(self) -> None:
        for request_id, record in list(self.runtime.requests.items()):
            if record.phase is RequestPhase.admitted:
                self.runtime.finish_request(request_id)

    @precondition(lambda self: self._claims(lambda c: c.phase not in _NOT_REUSABLE))
    @rule(index=st.integers(0, 63))
    def reuse(self, index: int) -> None:
        """A request returns to a claim's object (restoring it first: from the host tier if it
        was offloaded, a materialized two-key claim's checkpoint in place)."""
        claim = self._pick(self._claims(lambda c: c.phase not in _NOT_REUSABLE), index)
        blocks = self.runtime.objects[claim.spec.object_id]
        self._run(
            RequestSpec(self._next("reuse-"), claim.spec.object_id, blocks, reuse_claim=claim.spec.claim_id)
        )

    @precondition(lambda self: self._claims(lambda c: c.phase is Phase.offloaded))
    @rule(index=st.integers(0, 63))
    def restore_offloaded(self, index: int) -> None:
        """Reuse an offloaded claim: restore before reuse (or a claim-scoped failure)."""
        claim = self._pick(self._claims(lambda c: c.phase is Phase.offloaded), index)
        spec = claim.spec
        self._run(
            RequestSpec(
                self._next("reuse-"), spec.object_id, spec.footprint_blocks, reuse_claim=spec.claim_id
            )
        )

    @precondition(lambda self: self._claims(_resumable_in_place))
    @rule(index=st.integers(0, 63))
    def resume_in_place(self, index: int) -> None:
        """Reuse a materialized two-key claim: its checkpoint is restored in place (seed 002),
        a mismatch if `corrupt_checkpoint` changed its meaning. Targeted like `restore_offloaded`:
        a general `reuse` picks among every live claim and seldom lands here."""
        claim = self._pick(self._claims(_resumable_in_place), index)
        spec = claim.spec
        self._run(
            RequestSpec(
                self._next("reuse-"), spec.object_id, spec.footprint_blocks, reuse_claim=spec.claim_id
            )
        )

    @precondition(lambda self: self._allowing(Event.demote))
    @rule(index=st.integers(0, 63))
    def demote(self, index: int) -> None:
        self.runtime.demote(self._pick(self._allowing(Event.demote), index).spec.claim_id)

    @precondition(lambda self: self._allowing(Event.release))
    @rule(index=st.integers(0, 63))
    def release(self, index: int) -> None:
        self.runtime.release(self._pick(self._allowing(Event.release), index).spec.claim_id)

    @precondition(lambda self: self._allowing(Event.offload))
    @rule(index=st.integers(0, 63))
    def offload(self, index: int) -> None:
        self.runtime.offload(self._pick(self._allowing(Event.offload), index).spec.claim_id)

    @rule(steps=st.integers(1, 3))
    def tick(self, steps: int) -> None:
        """Time passes: expiring claims expire, deferred and waiting requests retry."""
        self.runtime.tick(steps)

    @precondition(lambda self: self._claims(lambda c: c.held_count > 0))
    @rule(index=st.integers(0, 63))
    def fail_kv_load(self, index: int) -> None:
        """An invalid KV load drops a cached block, even a pinned one (harm if it breaks a
        preserving claim's predicate: the runtime must report it)."""
        claim = self._pick(self._claims(lambda c: c.held_count > 0), index)
        self.runtime.inject_fault(FaultKind.invalid_kv_load, claim.spec.claim_id)

    @precondition(lambda self: self._claims(lambda c: c.phase is Phase.offloaded))
    @rule(index=st.integers(0, 63), outcome=st.sampled_from(tuple(RestorationOutcome)))
    def fail_restore(self, index: int, outcome: RestorationOutcome) -> None:
        """The next restore of an offloaded claim fails with this claim-scoped outcome."""
        claim = self._pick(self._claims(lambda c: c.phase is Phase.offloaded), index)
        if outcome is RestorationOutcome.harm and not claim.profile.preserving:
            outcome = RestorationOutcome.refusal
        self.runtime.inject_fault(FaultKind.restore_failure, claim.spec.claim_id, outcome=outcome)

    @precondition(lambda self: self._claims(lambda c: c.checkpoint is not None))
    @rule(index=st.integers(0, 63))
    def corrupt_checkpoint(self, index: int) -> None:
        """Seed 002's bug: a two-key checkpoint's meaning changes in place, bytes unchanged."""
        claim = self._pick(self._claims(lambda c: c.checkpoint is not None), index)
        self.runtime.inject_fault(FaultKind.checkpoint_in_place_mutation, claim.spec.claim_id)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def block_conservation(self) -> None:
        census = self.runtime.pool.census()
        if not census.conserved:
            raise InvariantBroken(f"block_conservation: {census}")

    @invariant()
    def no_unreported_predicate_loss(self) -> None:
        for claim in self._claims(lambda c: c.phase is Phase.materialized):
            _, leading = self.runtime.residency(claim.spec.object_id, claim.spec.footprint_blocks)
            if leading < claim.required_blocks:
                raise InvariantBroken(
                    f"no_unreported_predicate_loss: {claim.spec.claim_id} is materialized, its pool prefix "
                    f"has {leading} leading blocks of {claim.required_blocks}"
                )

    @invariant()
    def timed_claims_expire_on_time(self) -> None:
        """A `duration_ms` claim still responsible has not outlived its term on the runtime's
        clock: `min(max(start + duration, latest extension), acceptance + cap)`, all read from
        its trace (early expiry is the refinement checker's `duration` rule)."""
        self._observe()
        now = self.runtime.now_ns
        for claim in self._timed_responsible():
            claim_id = claim.spec.claim_id
            started, end = self.clock_started[claim_id], self._traced_end_ns(claim)
            if now >= end:
                raise InvariantBroken(
                    f"timed_claims_expire_on_time: {claim_id} is {claim.phase} "
                    f"{(now - started) / NS_PER_MS:g} ms after its clock started; its term ended "
                    f"{(end - started) / NS_PER_MS:g} ms after it"
                )

    @invariant()
    def ttl_pins_lapse_on_time(self) -> None:
        """A stock TTL pin (seed 003) is dropped once its engine-step TTL ends."""
        late = [job for job, (until, _) in self.runtime._ttl_pins.items() if until <= self.runtime.step]
        if late:
            raise InvariantBroken(f"ttl_pins_lapse_on_time: pins of {late} outlived their TTL")

    @invariant()
    def blocking_ids_name_holding_hard_claims(self) -> None:
        self._check("blocking_ids_name_holding_hard_claims")

    @invariant()
    def no_harm_after_release(self) -> None:
        self._check("no_harm_after_release")

    @invariant()
    def capacity_proof_arithmetic(self) -> None:
        self._check("capacity_proof_arithmetic")

    @invariant()
    def victim_exclusion_before_violation(self) -> None:
        self._check("victim_exclusion_before_violation")

    @invariant()
    def emitted_trace_accepted(self) -> None:
        self._check("emitted_trace_accepted")
        self._steps += 1

    def teardown(self) -> None:
        self._observe()
        try:
            failure = self.trace_check.finish()
            if failure is not None:
                raise InvariantBroken(f"emitted_trace_accepted: {failure}")
            self.runtime.close()
        finally:
            type(self).coverage.absorb(self.runtime, self._steps)


def fresh_machine(
    base: type[MicroRuntimeMachine] = MicroRuntimeMachine, **overrides: Any
) -> type[MicroRuntimeMachine]:
    """A subclass of `base` with its own empty coverage (and any class attributes replaced)."""
    return type(f"{base.__name__}Run", (base,), {"coverage": Coverage(), **overrides})


def run_machine(machine: type[MicroRuntimeMachine], run_settings: settings) -> Coverage:
    """Run a machine under `run_settings`; a broken invariant propagates (after shrinking)."""
    run_state_machine_as_test(machine, settings=run_settings)
    return machine.coverage


@dataclass
class FuzzReport:
    """What a timed fuzzing run did: coverage, volume, and the first failure if any."""

    coverage: Coverage
    seconds: float
    batches: int
    failure: str | None = None
    example: list[str] = field(default_factory=list)
    """The shrunk failing example as rule calls (invariant checks left out)."""


def failing_example(failure: BaseException) -> list[str]:
    """The rule calls of the minimal failing example Hypothesis attached to `failure` as notes
    (invariant checks left out), ready to replay on a fresh machine."""
    notes: Iterable[str] = getattr(failure, "__notes__", ())
    invariants = {
        name
        for name, value in vars(MicroRuntimeMachine).items()
        if hasattr(value, "hypothesis_stateful_invariant")
    }
    lines = [line for note in notes for line in str(note).splitlines()]
    return [
        line
        for line in lines
        if line.startswith("state") and line.split("(")[0].removeprefix("state.") not in invariants
    ]


def fuzz(
    machine: type[MicroRuntimeMachine],
    *,
    seconds: float,
    batch_examples: int = 50,
    on_batch: Callable[[FuzzReport], None] | None = None,
) -> FuzzReport:
    """Run random (not derandomized) batches of `machine` until `seconds` have passed or an
    invariant breaks; Hypothesis shrinks the failure and prints the minimal rule sequence."""
    batch_settings = batches(batch_examples, stateful_step_count=50)
    start = time.monotonic()
    report = FuzzReport(machine.coverage, 0.0, 0)
    while report.seconds < seconds and report.failure is None:
        report.failure, report.example = _run_batch(machine, batch_settings)
        report.batches += 1
        report.seconds = time.monotonic() - start
        if on_batch is not None:
            on_batch(report)
    return report


def _run_batch(machine: type[MicroRuntimeMachine], batch_settings: settings) -> tuple[str | None, list[str]]:
    """Run one batch of `machine`: the first failure (shrunk) and its example, or (None, [])."""
    try:
        run_state_machine_as_test(machine, settings=batch_settings)
    except Exception as failure:  # any crash of the runtime under test is a finding
        return f"{type(failure).__name__}: {failure}", failing_example(failure)
    return None, []


@dataclass(frozen=True)
class SeedOutcome:
    """What one seeded batch did: its coverage and its failure (shrunk), if any."""

    seed: int
    coverage: Coverage
    failure: str | None
    example: list[str]

    def to_json(self) -> dict[str, Any]:
        cov = self.coverage
        return {
            "seed": self.seed,
            "examples": cov.examples,
            "rule_steps": cov.steps,
            "trace_events": cov.events,
            "phases": sorted(p.value for p in cov.phases),
            "lifecycle_transitions": len(cov.transitions),
            "request_transitions": len(cov.request_transitions),
            "failure": self.failure,
            "minimal_failing_example": self.example,
        }


@dataclass(frozen=True)
class SeededBatch:
    """One batch of `examples` examples of a fresh machine (`planted_bug`: `PlantedBugMachine`,
    under `policy`) with Hypothesis seeded by the seed it is called with: the same seed gives the
    same outcome in any process, so seeds can run anywhere (a pool, a Ray cluster) and in any
    order. A picklable unit of work (the machine class is made where it runs)."""

    policy: str
    planted_bug: bool = False
    examples: int = 50

    def __call__(self, seed: int) -> SeedOutcome:
        base = PlantedBugMachine if self.planted_bug else MicroRuntimeMachine
        machine = hypothesis_seed(seed)(fresh_machine(base, policy=POLICIES[self.policy]))
        with _no_local_constants():
            failure, example = _run_batch(machine, batches(self.examples, stateful_step_count=50))
        return SeedOutcome(seed, machine.coverage, failure, example)


@contextmanager
def _no_local_constants() -> Iterator[None]:
    """Hypothesis mixes the literals of every non-installed module imported into this process
    into what it draws, so a seed's data would depend on what the process imported before (a
    CLI, a pool worker and a Ray worker import different modules). Within a seeded batch that
    pool is empty (and so is the cache of pools drawn from): the outcome is a function of the
    seed alone. Hypothesis internals (6.170): tests/lab/test_micro_fuzzing.py checks that a seed's
    outcome is the same in a fresh process."""
    with (
        patch.object(providers, "_get_local_constants", return_value=providers.Constants()),
        patch.object(providers, "CONSTANTS_CACHE", {}),
    ):
        yield


def merged_coverage(outcomes: Iterable[SeedOutcome]) -> Coverage:
    """The coverage of several batches together."""
    total = Coverage()
    for outcome in outcomes:
        cov = outcome.coverage
        total.phases |= cov.phases
        total.transitions |= cov.transitions
        total.request_transitions |= cov.request_transitions
        total.examples += cov.examples
        total.steps += cov.steps
        total.events += cov.events
    return total


class OffByOneVictimExclusion(MicroRuntime):
    """A planted bug for the fuzzer's self-test: victim exclusion protects one block fewer than
    the claim's footprint, so a hard claim's tail block can be evicted."""

    def pin_limit(self, claim: MicroClaim) -> int:
        return max(0, claim.protected_blocks - 1)


class PlantedBugMachine(MicroRuntimeMachine):
    """The machine over the planted-bug runtime: the CI profile must find the violation."""

    runtime_class = OffByOneVictimExclusion
    coverage = Coverage()


FLEET_ENGINES = ("A", "B")
"""The pools of `FleetMachine`: one MicroRuntime each."""

ROUTED_MODES = (ProtectionMode.hard_protected, ProtectionMode.best_effort, ProtectionMode.demotable)
"""Modes `FleetMachine` submits (routing needs no mode of its own; these keep or lose the claim)."""


class FleetMachine(RuleBasedStateMachine):
    """Several MicroRuntime pools behind a router: claims kept on one engine, reuses routed to
    any engine with a predicted hit, and the router stream a correct routing hook writes.

    The hook reports what the chosen engine answered (its `request_reused`, the analogue of the
    binding's stop reason and cached-token count): delivered when the engine holds the claim,
    its predicate held and it served at least the predicted blocks; else missed. Invariants:

    - `engine_traces_accepted`: each engine's own stream is accepted by refinement;
    - `routed_reuse_attributed_to_holder` / `predicted_miss_reported`: the routing model
      (`kvclaims.statemachine.routing`) accepts the engines' streams and the router stream so
      far, with nothing undecided, and owes nothing at the end.

    `report` is the hook; a subclass that overrides it plants a routing bug the CI profile must
    find (`MisattributingFleetMachine`)."""

    usable_blocks: ClassVar[int] = 48

    def __init__(self) -> None:
        super().__init__()
        self.buffers = {engine: TraceBuffer() for engine in FLEET_ENGINES}
        self.runtimes = {
            engine: MicroRuntime(self.usable_blocks, sink=buffer.append, source=f"kvclaims-fleet-{engine}")
            for engine, buffer in self.buffers.items()
        }
        for runtime in self.runtimes.values():
            for object_id, blocks in OBJECTS.items():
                runtime.register_object(object_id, blocks)
        self.checks = {engine: EmittedTraceCheck(runtime.header) for engine, runtime in self.runtimes.items()}
        self.fleet = routing.init(FLEET_ENGINES)
        self.router_seq = count()
        self.failure: str | None = None
        self._seen = dict.fromkeys(FLEET_ENGINES, 0)
        self._ids = count()

    def _observe(self) -> None:
        """Feed each engine's new events to its refinement check and to the routing model."""
        for engine, buffer in self.buffers.items():
            while self._seen[engine] < len(buffer.events):
                event = buffer.events[self._seen[engine]]
                self._seen[engine] += 1
                problem = self.checks[engine].feed(event)
                if problem is not None and self.failure is None:
                    self.failure = f"engine_traces_accepted: engine {engine}: {problem}"
                model = EVENT_MODELS[event["event"]].model_validate(event)
                self._judge(routing.engine_step(self.fleet, engine, model, event["seq"]))

    def _judge(self, found: object) -> None:
        if isinstance(found, Violation) and self.failure is None:
            self.failure = f"[{found.rule.value}] {found.message}"

    def _route(self, model: Any) -> None:
        self._judge(routing.route_step(self.fleet, model, model.seq))

    @rule(
        engine=st.sampled_from(FLEET_ENGINES),
        object_id=st.sampled_from(sorted(OBJECTS)),
        mode=st.sampled_from(ROUTED_MODES),
        cut=st.integers(0, 3),
    )
    def keep_claim(self, engine: str, object_id: str, mode: ProtectionMode, cut: int) -> None:
        """Submit a claim on one engine and compute its prefix there."""
        claim_id = f"claim-{next(self._ids)}"
        footprint = max(1, OBJECTS[object_id] - cut)
        runtime = self.runtimes[engine]
        runtime.submit_claim(ClaimSpec(claim_id, object_id, mode, footprint, footprint))
        request_id = f"prefill-{next(self._ids)}"
        runtime.submit_request(RequestSpec(request_id, object_id, footprint, kind=RequestKind.resident))
        if runtime.requests[request_id].phase is RequestPhase.admitted:
            runtime.finish_request(request_id)

    @rule(engine=st.sampled_from(FLEET_ENGINES), blocks=st.integers(1, 48))
    def pressure(self, engine: str, blocks: int) -> None:
        """An unrelated request on one engine (evictions of unprotected claims, conflicts)."""
        request_id = f"active-{next(self._ids)}"
        runtime = self.runtimes[engine]
        runtime.submit_request(RequestSpec(request_id, f"bulk-{request_id}", min(blocks, self.usable_blocks)))
        if runtime.requests[request_id].phase is RequestPhase.admitted:
            runtime.finish_request(request_id)

    @precondition(lambda self: self.fleet.holder)
    @rule(index=st.integers(0, 63), chosen=st.sampled_from(FLEET_ENGINES), predicted=st.integers(0, 20))
    def routed_reuse(self, index: int, chosen: str, predicted: int) -> None:
        """The router sends a reuse of a claim some engine accepted to `chosen`, predicting
        `predicted` blocks there (a route for a claim no engine accepted is undecided)."""
        claim_id = sorted(self.fleet.holder)[index % len(self.fleet.holder)]
        runtime = self.runtimes[chosen]
        request_id = f"routed-{next(self._ids)}"
        claim = runtime.claims.get(claim_id)
        held = claim is not None and claim.phase not in (
            Phase.absent,
            Phase.submitted,
            Phase.rejected,
            Phase.released,
        )
        object_id = claim.spec.object_id if held and claim is not None else f"elsewhere-{claim_id}"
        blocks = OBJECTS.get(object_id, 1)
        self._route(
            RouteDecided(
                seq=next(self.router_seq),
                request_id=request_id,
                claim_id=claim_id,
                candidate_engines=list(FLEET_ENGINES),
                chosen_engine=chosen,
                predicted_hit_blocks=predicted,
            )
        )
        start = len(self.buffers[chosen].events)
        runtime.submit_request(
            RequestSpec(request_id, object_id, blocks, reuse_claim=claim_id if held else None)
        )
        if runtime.requests[request_id].phase is RequestPhase.admitted:
            runtime.finish_request(request_id)
        answer = next(
            (
                e
                for e in self.buffers[chosen].events[start:]
                if e["event"] == "request_reused" and e["request_id"] == request_id
            ),
            None,
        )
        self._observe()
        delivered, outcome = self.report(predicted, answer)
        self._route(
            RouteReuseReported(
                seq=next(self.router_seq),
                request_id=request_id,
                claim_id=claim_id,
                engine=chosen,
                delivered_blocks=delivered,
                outcome=outcome,
            )
        )

    def report(self, predicted: int, answer: dict[str, Any] | None) -> tuple[int, RouteOutcome]:
        """The correct hook: the delivered blocks and outcome of a routed reuse, from what the
        chosen engine answered (its `request_reused` for the request, if any)."""
        served = 0 if answer is None else answer["cached_blocks"]
        hit = answer is not None and answer["predicate_satisfied"] and served >= predicted
        return served, RouteOutcome.delivered if hit else RouteOutcome.missed

    @invariant()
    def engine_traces_accepted(self) -> None:
        self._observe()
        if self.failure is not None and self.failure.startswith("engine_traces_accepted"):
            raise InvariantBroken(self.failure)

    @invariant()
    def routed_reuse_attributed_to_holder(self) -> None:
        self._observe()
        if self.failure is not None and not self.failure.startswith("engine_traces_accepted"):
            raise InvariantBroken(f"routed_reuse_attributed_to_holder: {self.failure}")
        if self.fleet.undecided:
            raise InvariantBroken(
                f"routed_reuse_attributed_to_holder: undecided: {self.fleet.undecided[0].message}"
            )

    def teardown(self) -> None:
        self._observe()
        found = routing.finish(self.fleet)
        if found is not None:
            raise InvariantBroken(f"predicted_miss_reported: {found.message}")
        for engine, check in self.checks.items():
            failure = check.finish()
            if failure is not None:
                raise InvariantBroken(f"engine_traces_accepted: engine {engine}: {failure}")


class MisattributingFleetMachine(FleetMachine):
    """A planted routing bug: the hook reports every routed reuse as delivered with the
    predicted blocks (the router's prediction, never the engine's answer)."""

    def report(self, predicted: int, answer: dict[str, Any] | None) -> tuple[int, RouteOutcome]:
        return predicted, RouteOutcome.delivered


TestMicroRuntime = MicroRuntimeMachine.TestCase
"""For users: `from kvclaims.testing import MicroRuntimeMachine` and its `TestCase` run under pytest."""
