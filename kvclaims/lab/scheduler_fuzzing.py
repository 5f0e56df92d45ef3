"""Fuzzing vLLM's real scheduler with the binding: a Hypothesis RuleBasedStateMachine.

Each example builds a `SchedulerLane` (real `Scheduler` or `AsyncScheduler` with the claim
mixin, a random pool and claim policy) and applies random rules: claim submissions in every
supported mode, plain and reusing requests of random lengths, hostile metadata, owner
operations from the right and the wrong owner, engine steps, client aborts, vLLM's
hash-stripping eviction primitive on claimed blocks, and prefix-cache resets. After every
rule it checks the invariants below against vLLM's own state; at teardown it drains the
engine (liveness), then checks the trace with refinement (`accepted`, nothing less).

Invariants:
- pool accounting: free blocks + referenced blocks == usable blocks (vLLM's own books);
- pins are extra references: every pinned block has ref_cnt >= its pins and is not the null
  block, and it still carries the claim's cache key;
- distinct protected blocks <= the global cap, each owner's <= the owner cap;
- a materialized preserving claim still holds a leading run meeting its predicate;
- deferred requests are still queued (never dropped), and no request is both running and
  waiting;
- every request finishes once new input stops (no starvation, no livelock).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvclaims.lab.fuzz_settings import bounded
from kvclaims.lab.virtual_clock import VirtualClock
from kvclaims.vllm_binding.config import BindingConfig, ContinuumSettings
from kvclaims.vllm_binding.continuum import ContinuumJobs

OBJECTS: dict[str, int] = {"doc-a": 4, "doc-b": 10, "doc-c": 20, "doc-d": 36}
"""Reusable prefix objects (length in blocks) that claims and requests share."""

CLAIM_MODES = ("hard_protected", "demotable", "expiring", "best_effort", "soft_priority")
OWNERS = ("alice", "bob")
HOSTILE = (
    {"kvclaims_claim_id": "h", "kvclaims_mode": "hard_protected", "kvclaims_footprint_blocks": "3"},
    {"kvclaims_claim_id": "h", "kvclaims_mode": "no-such-mode", "kvclaims_footprint_blocks": 3},
    {"kvclaims_claim_id": "h", "kvclaims_mode": "hard_protected", "kvclaims_footprint_blocks": -3},
    {"kvclaims_claim_id": "h", "kvclaims_mode": "hard_protected", "kvclaims_footprint_blocks": 2**63 - 1},
    {"kvclaims_claim_id": "z" * 5000, "kvclaims_mode": "hard_protected", "kvclaims_footprint_blocks": 3},
    {"kvclaims_claim_id": ["x"], "kvclaims_op": "release"},
    {"kvclaims_claim_id": "h", "kvclaims_op": "steal"},
    {"kvclaims_claim_id": "h", "kvclaims_mode": "routed_reuse", "kvclaims_footprint_blocks": 3},
)
MAX_DRAIN_STEPS = 3000
BLOCK = 16
MS_PER_STEP = 10
"""Virtual milliseconds per engine step."""
JOBS = 3
JOB_TURN_BLOCKS = (5, 9, 18, 25, 32)
"""An agent job's context per turn (seed 003 4.2), capped at half the pool."""

CI_SETTINGS = bounded(max_examples=100, stateful_step_count=40)
"""The bounded, deterministic profile CI runs (`tests/lab/test_scheduler_fuzzing.py`)."""

COVERED_EVENTS = (
    "active_request_refused",
    "active_request_deferred",
    "resident_claim_demoted",
    "resident_claim_expired",
    "resident_claim_released",
)
"""Outcomes the CI profile must reach at least once."""


@dataclass
class FuzzStats:
    """What the machine reached, across examples."""

    examples: int = 0
    steps: int = 0
    engine_steps: int = 0
    states: set[tuple[Any, ...]] = field(default_factory=set)
    events: Counter[str] = field(default_factory=Counter)
    verdicts: Counter[str] = field(default_factory=Counter)
    accepted_kinds: Counter[str] = field(default_factory=Counter)
    """Accepted claims by kind: `continuum_pin` (the compatibility mode's), `duration_ms`."""

    def summary(self) -> dict[str, Any]:
        return {
            "accepted_kinds": dict(self.accepted_kinds),
            "examples": self.examples,
            "rule_steps": self.steps,
            "engine_steps": self.engine_steps,
            "distinct_states": len(self.states),
            "verdicts": dict(self.verdicts),
            "events": dict(sorted(self.events.items())),
        }


STATS = FuzzStats()
"""Accumulated over every example run in this process (reset with `STATS.__init__()`)."""


class SchedulerFuzz(RuleBasedStateMachine):
    """Random claims, requests, pressure, aborts, demotions, expiries and faults on vLLM."""

    trace_dir: Path | None = None
    on_example: Callable[[], None] | None = None
    """Called when an example starts (the CLI's progress bar)."""

    def __init__(self) -> None:
        super().__init__()
        self.lane: Any = None
        self.trace_path: Path | None = None
        self.counter = 0
        self.claims: dict[str, str] = {}  # claim id -> owner
        self.clock = VirtualClock()
        self.job_turns: Counter[str] = Counter()

    # -- set-up ---------------------------------------------------------------------------

    @initialize(
        usable=st.sampled_from([40, 64, 96]),
        async_scheduling=st.booleans(),
        hard_action=st.sampled_from(["refuse", "defer"]),
        demotable_action=st.sampled_from(["demote", "defer", "refuse"]),
        fraction=st.sampled_from([0.5, 0.75]),
        continuum=st.sampled_from([None, "demotable", "expiring"]),
        pin_ms=st.integers(20, 400),
    )
    def start(
        self,
        usable: int,
        async_scheduling: bool,
        hard_action: str,
        demotable_action: str,
        fraction: float,
        continuum: str | None,
        pin_ms: int,
    ) -> None:
        from kvclaims.lab.scheduler_lane import LaneSpec, SchedulerLane

        directory = SchedulerFuzz.trace_dir or Path(tempfile.mkdtemp(prefix="kvclaims-fuzz-"))
        STATS.examples += 1
        if SchedulerFuzz.on_example is not None:
            SchedulerFuzz.on_example()
        self.trace_path = directory / f"example-{STATS.examples}.ndjson"
        binding = BindingConfig(
            trace_path=str(self.trace_path),
            protected_fraction=fraction,
            owner_protected_fraction=fraction,
            conflict_actions={"hard_protected": hard_action, "demotable": demotable_action},
            max_deferral_steps=6,
            continuum=None if continuum is None else ContinuumSettings(pin_ms=pin_ms, mode=continuum),
        )
        self.lane = SchedulerLane(
            LaneSpec(
                usable_blocks=usable,
                max_num_seqs=4,
                max_num_batched_tokens=128,
                # A request may grow to the whole pool, never beyond: vLLM checks this at
                # start-up for real engines (and rejects longer prompts before scheduling).
                max_model_len=usable * BLOCK,
                async_scheduling=async_scheduling,
                binding=binding,
            )
        )
        self.lane.arbiter.clock = self.clock

    def _request_id(self) -> str:
        self.counter += 1
        return f"r{self.counter}"

    def _prompt(self, obj: str | None, blocks: int, suffix_tokens: int) -> list[int]:
        """`blocks` blocks of a shared object, then fresh tokens no other request shares."""
        from kvclaims.lab.scheduler_lane import prompt_tokens

        head = prompt_tokens(obj, blocks * BLOCK) if obj and blocks else []
        tail = prompt_tokens(f"fresh-{self.counter}", suffix_tokens) if suffix_tokens else []
        return head + tail or prompt_tokens(f"fresh-{self.counter}", 1)

    # -- rules ----------------------------------------------------------------------------

    @rule(
        obj=st.sampled_from(sorted(OBJECTS)),
        mode=st.sampled_from(CLAIM_MODES),
        owner=st.sampled_from(OWNERS),
        share=st.floats(0.2, 1.0),
        suffix=st.integers(0, 40),
        max_tokens=st.integers(1, 12),
        duration=st.integers(1, 25),
    )
    def submit_claim(
        self, obj: str, mode: str, owner: str, share: float, suffix: int, max_tokens: int, duration: int
    ) -> None:
        request_id = self._request_id()
        footprint = max(1, int(OBJECTS[obj] * share))
        claim_id = f"{obj}:{request_id}"
        extra: dict[str, Any] = {
            "kvclaims_claim_id": claim_id,
            "kvclaims_mode": mode,
            "kvclaims_footprint_blocks": footprint,
            "kvclaims_owner": owner,
        }
        if mode == "expiring":
            extra["kvclaims_duration_steps"] = duration
        self.claims[claim_id] = owner
        self.lane.add(
            request_id, self._prompt(obj, OBJECTS[obj], suffix), max_tokens=max_tokens, extra_args=extra
        )

    @rule(
        obj=st.one_of(st.none(), st.sampled_from(sorted(OBJECTS))),
        blocks=st.integers(1, 30),
        suffix=st.integers(0, 30),
        max_tokens=st.integers(1, 40),
        attach=st.booleans(),
        owner=st.sampled_from(OWNERS),
    )
    def plain_request(
        self, obj: str | None, blocks: int, suffix: int, max_tokens: int, attach: bool, owner: str
    ) -> None:
        request_id = self._request_id()
        head_blocks = min(blocks, OBJECTS[obj]) if obj else 0
        prompt = self._prompt(obj, head_blocks, suffix + (0 if obj else blocks * BLOCK))
        extra = None
        candidates = [c for c in self.claims if obj and c.startswith(obj)]
        if attach and candidates:
            extra = {"kvclaims_claim_id": candidates[-1], "kvclaims_owner": owner}
        self.lane.add(request_id, prompt, max_tokens=max_tokens, extra_args=extra)

    @precondition(lambda self: self.lane is not None and self.lane.arbiter.registry.protected_blocks > 0)
    @rule(excess=st.integers(1, 12), max_tokens=st.integers(1, 8))
    def pressure_request(self, excess: int, max_tokens: int) -> None:
        """A fresh request sized to collide with the protected blocks (P + live > usable)
        while fitting the pool on its own: the arbiter must refuse, defer or demote."""
        usable = self.lane.spec.usable_blocks
        live = min(usable, usable - self.lane.arbiter.registry.protected_blocks + excess)
        # prompt + max_tokens == live blocks of tokens <= max_model_len (vLLM's own limit);
        # its KV (all but the last sampled token) then needs exactly `live` blocks.
        tokens = live * BLOCK - max_tokens
        request_id = self._request_id()
        self.lane.add(request_id, self._prompt(None, 0, tokens), max_tokens=max_tokens)

    @rule(metadata=st.sampled_from(HOSTILE))
    def hostile_request(self, metadata: dict[str, Any]) -> None:
        self.lane.add(self._request_id(), self._prompt(None, 0, 40), max_tokens=2, extra_args=dict(metadata))

    @precondition(lambda self: bool(self.claims))
    @rule(data=st.data(), op=st.sampled_from(["release", "demote"]), rightful=st.booleans())
    def owner_operation(self, data: st.DataObject, op: str, rightful: bool) -> None:
        claim_id = data.draw(st.sampled_from(sorted(self.claims)))
        owner = self.claims[claim_id] if rightful else next(o for o in OWNERS if o != self.claims[claim_id])
        extra = {"kvclaims_op": op, "kvclaims_claim_id": claim_id, "kvclaims_owner": owner}
        self.lane.add(self._request_id(), self._prompt(None, 0, 8), extra_args=extra)

    @rule(
        obj=st.sampled_from(sorted(OBJECTS)),
        owner=st.sampled_from(OWNERS),
        duration_ms=st.integers(1, 300),
        refresh_on_hit=st.booleans(),
        max_tokens=st.integers(1, 12),
    )
    def timed_claim(
        self, obj: str, owner: str, duration_ms: int, refresh_on_hit: bool, max_tokens: int
    ) -> None:
        """A wall-clock claim (expires `duration_ms` after acceptance or, with
        `refresh_on_hit`, after its last satisfied reuse)."""
        request_id = self._request_id()
        claim_id = f"{obj}:{request_id}"
        extra = {
            "kvclaims_claim_id": claim_id,
            "kvclaims_mode": "expiring",
            "kvclaims_footprint_blocks": OBJECTS[obj],
            "kvclaims_owner": owner,
            "kvclaims_duration_ms": duration_ms,
            "kvclaims_refresh_on_hit": refresh_on_hit,
        }
        self.claims[claim_id] = owner
        self.lane.add(request_id, self._prompt(obj, OBJECTS[obj], 5), max_tokens=max_tokens, extra_args=extra)

    @rule(job=st.integers(0, JOBS - 1), last=st.booleans(), max_tokens=st.integers(1, 12))
    def job_turn(self, job: int, last: bool, max_tokens: int) -> None:
        """Seed 003's agent turn: `job_id` / `is_last_step` keys on a prompt that grows by turn
        (kept as pin claims with the Continuum mode on, ignored with it off)."""
        job_id = f"job-{job}"
        turn = self.job_turns[job_id]
        self.job_turns[job_id] = 0 if last else turn + 1
        blocks = min(JOB_TURN_BLOCKS[min(turn, len(JOB_TURN_BLOCKS) - 1)], self.lane.spec.usable_blocks // 2)
        from kvclaims.lab.scheduler_lane import prompt_tokens

        prompt = prompt_tokens(job_id, blocks * BLOCK + 3)
        extra = {"job_id": job_id, "is_last_step": last}
        self.lane.add(self._request_id(), prompt, max_tokens=max_tokens, extra_args=extra)

    @rule(ms=st.integers(1, 250))
    def advance_clock(self, ms: int) -> None:
        """Wall-clock time passes (timed claims and pins are due at the next engine step)."""
        self.clock.advance(ms)

    @rule(count=st.integers(1, 6))
    def step(self, count: int) -> None:
        for _ in range(count):
            if self.lane.idle():
                break
            self.lane.step()
            self.clock.advance(MS_PER_STEP)
            self._observe()

    @precondition(lambda self: self.lane is not None and bool(self.lane.scheduler.requests))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        request_id = data.draw(st.sampled_from(sorted(self.lane.scheduler.requests)))
        self.lane.abort(request_id)

    @precondition(lambda self: self.lane is not None and bool(self.lane.arbiter.pinned_blocks()))
    @rule(data=st.data())
    def evict_claimed_block(self, data: st.DataObject) -> None:
        """vLLM's `evict_blocks` (what the invalid-KV-load `fail` path calls) on a pinned block."""
        block_id = data.draw(st.sampled_from(sorted(self.lane.arbiter.pinned_blocks())))
        arbiter = self.lane.arbiter
        with arbiter.entry():
            arbiter.note_fault("evict_blocks")
            self.lane.scheduler.kv_cache_manager.evict_blocks({block_id})
            arbiter.check_blocks()

    @rule(reset_running=st.booleans())
    def reset_prefix_cache(self, reset_running: bool) -> None:
        try:
            self.lane.scheduler.reset_prefix_cache(reset_running_requests=reset_running)
        except RuntimeError as error:
            # vLLM raises when a request is mid remote-KV load; the scheduler lane has none.
            raise AssertionError(f"reset_prefix_cache raised: {error}") from error

    # -- invariants -----------------------------------------------------------------------

    def _observe(self) -> None:
        STATS.engine_steps += 1
        arbiter = self.lane.arbiter
        states = tuple(sorted(Counter(str(s) for s in arbiter.claim_states().values()).items()))
        scheduler = self.lane.scheduler
        STATS.states.add(
            (
                self.lane.spec.usable_blocks,
                states,
                min(len(scheduler.waiting), 6),
                len(scheduler.running),
                len(arbiter.deferred_request_ids()),
                len(arbiter.pinned_blocks()) // 4,
            )
        )

    @invariant()
    def tally(self) -> None:
        """Counts rule applications (invariants run after each one)."""
        STATS.steps += 1

    @invariant()
    def pool_accounting(self) -> None:
        if self.lane is None:
            return
        pool = self.lane.block_pool
        referenced = sum(1 for b in pool.blocks if not b.is_null and b.ref_cnt > 0)
        assert pool.get_num_free_blocks() + referenced == self.lane.spec.usable_blocks

    @invariant()
    def pins_are_references_on_claimed_blocks(self) -> None:
        if self.lane is None:
            return
        arbiter = self.lane.arbiter
        pool = self.lane.block_pool
        for block_id, pins in arbiter.pinned_blocks().items():
            block = pool.blocks[block_id]
            assert not block.is_null and block.ref_cnt >= pins
        for record in arbiter.registry.protected():
            for position, block in record.held():
                assert block.block_hash == record.keys[position], (record.claim_id, position)

    @invariant()
    def budgets_hold(self) -> None:
        if self.lane is None:
            return
        registry = self.lane.arbiter.registry
        assert registry.protected_blocks <= registry.protected_cap
        for owner in (*OWNERS, *(ContinuumJobs.owner(f"job-{j}") for j in range(JOBS))):
            assert registry.owner_protected_blocks(owner) <= registry.owner_protected_cap

    @invariant()
    def one_responsible_pin_per_job(self) -> None:
        """Continuum keeps at most one pin per job: a turn's pin supersedes the last one."""
        if self.lane is None or self.lane.arbiter.continuum is None:
            return
        arbiter = self.lane.arbiter
        jobs = Counter(arbiter.continuum.job_of(r) for r in arbiter.registry.claims.values() if r.responsible)
        jobs.pop(None, None)
        assert all(n == 1 for n in jobs.values()), jobs

    @invariant()
    def materialized_claims_meet_their_predicate(self) -> None:
        if self.lane is None:
            return
        for record in self.lane.arbiter.registry.claims.values():
            if record.preserving and str(record.state) == "materialized":
                assert record.leading_blocks >= record.required_blocks, record.claim_id

    @invariant()
    def queues_are_consistent(self) -> None:
        if self.lane is None:
            return
        scheduler = self.lane.scheduler
        waiting = {r.request_id for r in scheduler.waiting} | {
            r.request_id for r in scheduler.kv_holding_waiting
        }
        running = {r.request_id for r in scheduler.running}
        assert not waiting & running
        assert self.lane.arbiter.deferred_request_ids() <= waiting

    def teardown(self) -> None:
        if self.lane is None:
            return
        from kvclaims.lab.scheduler_scenarios import read_events
        from kvclaims.refinement import check_trace

        taken = self.lane.run(MAX_DRAIN_STEPS)
        STATS.engine_steps += taken
        drained = self.lane.idle()
        self.lane.close()
        assert self.trace_path is not None
        events = read_events(self.trace_path)
        for event in events:
            STATS.events[event.event] += 1
            if event.event == "resident_claim_accepted":
                STATS.accepted_kinds["continuum_pin"] += event.claim_id.startswith("continuum-pin:")
                STATS.accepted_kinds["duration_ms"] += event.duration_ms is not None
        assert drained, f"engine not idle after {MAX_DRAIN_STEPS} steps: starvation or livelock"
        if all(event.event == "trace_closed" for event in events):
            # Nothing happened (e.g. only steps on an empty engine): refinement rightly calls
            # a trace without a model step inconclusive; there is nothing to check.
            STATS.verdicts["empty"] += 1
            return
        verdict = check_trace(self.trace_path)
        STATS.verdicts[str(verdict.outcome)] += 1
        assert verdict.outcome == "accepted", f"{self.trace_path}: {verdict.outcome}: {verdict.reason}"
