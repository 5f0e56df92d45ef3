"""The claim mixin inside vLLM 0.32's real Scheduler / AsyncScheduler (scheduler lane).

Every test here drives vLLM's own scheduler stack on CPU; numbers are read back from vLLM's
block pool and request outputs, and every trace is checked by refinement.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvclaims.refinement import check_trace
from kvclaims.vllm_binding.config import SCHEDULER_CLS, BindingConfig

pytestmark = pytest.mark.vllm

BLOCK = 16


def lane(tmp_path: Path, usable: int = 80, *, trace: bool = True, **spec: Any) -> Any:
    from kvclaims.lab.scheduler_lane import LaneSpec, SchedulerLane

    binding = spec.pop("binding", None) or BindingConfig(
        trace_path=str(tmp_path / "trace.ndjson") if trace else None,
        **spec.pop("config", {}),
    )
    return SchedulerLane(LaneSpec(usable_blocks=usable, binding=binding, **spec))


def tokens(tag: str, blocks: int, extra: int = 0) -> list[int]:
    from kvclaims.lab.scheduler_lane import prompt_tokens

    return prompt_tokens(tag, blocks * BLOCK + extra)


def claim(claim_id: str, mode: str, footprint: int, **extra: Any) -> dict[str, Any]:
    return {
        "kvclaims_claim_id": claim_id,
        "kvclaims_mode": mode,
        "kvclaims_footprint_blocks": footprint,
        **{f"kvclaims_{k}": v for k, v in extra.items()},
    }


def accepted(path: Path) -> None:
    verdict = check_trace(path)
    assert verdict.outcome == "accepted", verdict.reason


# -- extension points -------------------------------------------------------------------------


def test_the_one_flag_resolves_through_vllms_own_config() -> None:
    from vllm.config import SchedulerConfig

    from kvclaims.vllm_binding.scheduler import ClaimScheduler

    config = SchedulerConfig(scheduler_cls=SCHEDULER_CLS, max_model_len=1024, is_encoder_decoder=False)
    assert config.get_scheduler_cls() is ClaimScheduler


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_one_class_becomes_the_sync_or_async_scheduler(tmp_path: Path, async_scheduling: bool) -> None:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    from kvclaims.vllm_binding.scheduler import ClaimAsyncScheduler, ClaimScheduler, ClaimSchedulerMixin

    running = lane(tmp_path, async_scheduling=async_scheduling)
    scheduler = running.scheduler
    assert isinstance(scheduler, ClaimScheduler)
    assert isinstance(scheduler, AsyncScheduler) is async_scheduling
    assert isinstance(scheduler, ClaimAsyncScheduler) is async_scheduling
    assert type(scheduler).__mro__.count(ClaimSchedulerMixin) == 1
    running.close()


# -- pins ---------------------------------------------------------------------------------------


def test_pins_are_one_extra_reference_on_the_claimed_blocks(tmp_path: Path) -> None:
    running = lane(tmp_path)
    prefix = tokens("sys", 20)
    running.add("source", prefix + tokens("tail", 0, 5), extra_args=claim("c", "hard_protected", 20))
    running.run()
    pool = running.block_pool
    pins = running.arbiter.pinned_blocks()
    assert len(pins) == 20 and set(pins.values()) == {1}
    record = running.arbiter.registry.claims["c"]
    for position, block in record.held():
        assert not block.is_null and block.block_id != pool.null_block.block_id
        assert block.ref_cnt == 1  # the source finished; only the pin holds it
        assert block.block_hash == record.keys[position]
    assert pool.get_num_free_blocks() == 80 - 20
    assert running.cached_leading_blocks(prefix) == 20
    running.close()
    accepted(tmp_path / "trace.ndjson")


def test_claims_on_one_prefix_pin_one_copy_of_each_block(tmp_path: Path) -> None:
    """A prompt that is exactly a cached prefix recomputes its last block (vLLM leaves one
    token to compute), so vLLM caches a second copy under that block's hash. The protected term
    counts a hash once, so a claim must pin the copy vLLM's prefix cache serves: pinning the
    request's own copy held 21 blocks where the capacity proofs said 20 (found by the scheduler
    fuzzer: blocking claims held more blocks than protected_resident_blocks)."""
    running = lane(tmp_path)
    prefix = tokens("sys", 20)
    running.add("a", prefix + tokens("tail-a", 0, 5), extra_args=claim("ca", "hard_protected", 20))
    running.run()
    running.add("b", prefix, extra_args=claim("cb", "hard_protected", 20))
    running.run()
    pool = running.block_pool
    pins = running.arbiter.pinned_blocks()
    a, b = (running.arbiter.registry.claims[c] for c in ("ca", "cb"))
    assert [block.block_id for _, block in a.held()] == [block.block_id for _, block in b.held()]
    assert len(pins) == 20 and set(pins.values()) == {2}
    assert running.arbiter.registry.protected_blocks == 20
    assert pool.get_num_free_blocks() == 80 - 20  # both requests finished: only the pins hold blocks
    running.close()
    accepted(tmp_path / "trace.ndjson")


def test_release_returns_the_blocks_to_the_free_queue(tmp_path: Path) -> None:
    running = lane(tmp_path)
    running.add("source", tokens("sys", 10), extra_args=claim("c", "hard_protected", 10))
    running.run()
    running.add("op", tokens("op", 1), extra_args={"kvclaims_op": "release", "kvclaims_claim_id": "c"})
    running.run()
    assert running.arbiter.pinned_blocks() == {}
    assert running.block_pool.get_num_free_blocks() == 80
    running.close()
    accepted(tmp_path / "trace.ndjson")


# -- feasibility --------------------------------------------------------------------------------


def test_refusal_reaches_the_caller_as_abort_with_the_blocking_claims(tmp_path: Path) -> None:
    from vllm.v1.engine import FinishReason

    running = lane(tmp_path, config={"protected_fraction": 0.75, "owner_protected_fraction": 0.75})
    running.add("resident", tokens("r", 60), extra_args=claim("claim:r", "hard_protected", 60))
    running.run()
    running.add("active", tokens("a", 70))
    running.step()
    output = running.records["active"].finished
    assert output is not None
    assert output.finish_reason is FinishReason.ABORT  # not ERROR: vLLM 0.32 maps that to HTTP 500
    assert output.stop_reason == (
        "kvclaims:refused:capacity:claim:r;others=0;protected_resident_blocks=60;active_live_blocks_required=70;"
        "resident_plus_active_blocks=130;usable_blocks=80;capacity_shortfall_blocks=50"
    )
    assert output.new_token_ids == []
    assert "active" not in running.scheduler.requests
    running.close()
    accepted(tmp_path / "trace.ndjson")


def test_soft_priority_claims_never_block_admission(tmp_path: Path) -> None:
    """Two soft claims cover 60 of 80 blocks; a 70-block request is admitted at once (a hard
    claim would refuse it), the low-priority claim's blocks go first (though cached last), and
    both are reported lost, never harmed."""
    running = lane(tmp_path, scheduling_policy="priority")
    running.add("high", tokens("h", 30), extra_args=claim("claim:h", "soft_priority", 30), priority=0)
    running.run()
    running.add("low", tokens("l", 30), extra_args=claim("claim:l", "soft_priority", 30), priority=10)
    running.run()
    running.add("active", tokens("a", 70))
    running.step()
    assert running.records["active"].request.num_computed_tokens > 0
    running.run()
    # LRU alone would evict `high` (cached first) first; priority makes `low` go first
    assert running.cached_blocks(tokens("h", 30)) > running.cached_blocks(tokens("l", 30)) == 0
    running.close()
    events = (tmp_path / "trace.ndjson").read_text(encoding="utf-8")
    assert "resident_claim_lost" in events and "resident_claim_harmed" not in events
    assert "active_request_refused" not in events and "active_request_deferred" not in events
    accepted(tmp_path / "trace.ndjson")


def test_stock_vllm_waits_forever_where_the_binding_refuses(tmp_path: Path) -> None:
    """Without the feasibility check, pinned blocks make the 70-block prefill unschedulable:
    vLLM keeps it waiting with no output (here: pins taken by hand on a stock scheduler)."""
    from kvclaims.lab.scheduler_lane import LaneSpec, SchedulerLane

    stock = SchedulerLane(LaneSpec(usable_blocks=80))
    resident = tokens("r", 60)
    stock.add("resident", resident)
    stock.run()
    pool = stock.block_pool
    probe = stock.records["resident"].request
    pool.touch([pool.get_cached_block(h, [0])[0] for h in probe.block_hashes])
    stock.add("active", tokens("a", 70))
    for _ in range(50):
        stock.step()
    assert stock.records["active"].outputs == []
    assert [r.request_id for r in stock.scheduler.waiting] == ["active"]


def test_deferred_requests_keep_their_queue_position(tmp_path: Path) -> None:
    """Queue [big, deferred, small]: `big` fits the claims but not the pool right now (vLLM
    stops at it), `deferred` conflicts with an expiring claim. After a step the queue is
    exactly as before; a naive re-insertion would put `deferred` first."""
    running = lane(tmp_path, config={"protected_fraction": 0.5})
    running.add("source", tokens("exp", 20), extra_args=claim("e", "expiring", 20, duration_steps=40))
    running.run()
    running.add("long", tokens("long", 40), max_tokens=200)
    running.step()
    for request_id, blocks in (("big", 30), ("deferred", 65), ("small", 1)):
        running.add(request_id, tokens(request_id, blocks))
    running.step()
    assert [r.request_id for r in running.scheduler.waiting] == ["big", "deferred", "small"]
    assert running.arbiter.deferred_request_ids() == {"deferred"}
    running.run()
    running.close()
    accepted(tmp_path / "trace.ndjson")


def test_a_claim_is_refused_when_it_would_strand_an_admitted_request(tmp_path: Path) -> None:
    running = lane(tmp_path)
    running.add("long", tokens("long", 70), max_tokens=20)
    running.step()
    running.add("late", tokens("late", 20), extra_args=claim("late", "hard_protected", 20))
    running.run()
    assert "late" not in running.arbiter.claim_states()
    running.close()
    accepted(tmp_path / "trace.ndjson")
    lines = (tmp_path / "trace.ndjson").read_text()
    live = -(-(70 * BLOCK + 20 - 1) // BLOCK)  # prompt + all but the last of 20 sampled tokens
    assert live == 72
    assert f"admitted request long needs {live} live blocks" in lines


def test_a_claim_is_checked_against_admitted_requests_as_they_are_now(tmp_path: Path) -> None:
    """A request admitted while it shared a claim's pinned prefix needs more once that claim
    is released; a later claim must be judged against the request's present need (a stale
    figure let the fuzzer accept a claim that then forced an admitted request out)."""
    running = lane(tmp_path)
    prefix = tokens("shared", 30)
    running.add("source", prefix, extra_args=claim("c", "hard_protected", 30))
    running.run()
    running.add("reuser", prefix + tokens("own", 20), max_tokens=100, extra_args={"kvclaims_claim_id": "c"})
    running.step()
    running.add("op", tokens("op", 1), extra_args={"kvclaims_op": "release", "kvclaims_claim_id": "c"})
    running.step()
    running.add("late", tokens("late", 30), extra_args=claim("late", "hard_protected", 30))
    running.run()
    running.close()
    accepted(tmp_path / "trace.ndjson")
    peak = -(-(50 * BLOCK + 100 - 1) // BLOCK)  # 57 blocks, none of them shared any more
    assert 30 + peak > 80
    assert f"admitted request reuser needs {peak} live blocks" in (tmp_path / "trace.ndjson").read_text()


# -- traps --------------------------------------------------------------------------------------


def test_reset_prefix_cache_trap_stock_versus_binding(tmp_path: Path) -> None:
    from kvclaims.lab.scheduler_lane import LaneSpec, SchedulerLane

    stock = SchedulerLane(LaneSpec(usable_blocks=80))
    stock.add("r", tokens("sys", 10))
    stock.run()
    pool = stock.block_pool
    hashes = stock.records["r"].request.block_hashes
    pool.touch([pool.get_cached_block(h, [0])[0] for h in hashes])  # a naive pin
    assert stock.scheduler.reset_prefix_cache() is False
    with pytest.raises(RuntimeError, match="Failed to reset KV cache"):
        stock.scheduler.reset_prefix_cache(reset_running_requests=True)

    running = lane(tmp_path)
    running.add("r", tokens("sys", 10), extra_args=claim("c", "hard_protected", 10))
    running.run()
    assert running.scheduler.reset_prefix_cache(reset_running_requests=True) is True
    assert running.cached_leading_blocks(tokens("sys", 10)) == 0
    running.close()
    accepted(tmp_path / "trace.ndjson")


def test_reset_is_not_bought_with_demotion_when_requests_hold_blocks(tmp_path: Path) -> None:
    running = lane(tmp_path)
    running.add("r", tokens("sys", 10), extra_args=claim("c", "hard_protected", 10))
    running.run()
    running.add("busy", tokens("busy", 5), max_tokens=50)
    running.step()
    assert running.scheduler.reset_prefix_cache() is False
    assert str(running.arbiter.claim_states()["c"]) == "materialized"
    running.run()
    running.close()
    accepted(tmp_path / "trace.ndjson")


def test_recompute_policy_does_not_strip_pinned_blocks(tmp_path: Path) -> None:
    """Contrast to the `fail` policy (scenario kv-load-failure-harm): with vLLM's default
    `recompute` policy an invalid block is recomputed and the claim is unharmed."""
    running = lane(tmp_path)
    prefix = tokens("shared", 20)
    running.add("source", prefix, extra_args=claim("c", "hard_protected", 20))
    running.run()
    block = running.arbiter.registry.claims["c"].slots[5].block_id
    running.add("loader", prefix + tokens("l", 1), max_tokens=2, extra_args={"kvclaims_claim_id": "c"})
    running.inject_invalid_blocks([block])
    running.run()
    assert running.cached_leading_blocks(prefix) == 20
    assert str(running.arbiter.claim_states()["c"]) == "materialized"
    assert str(running.records["loader"].finished.finish_reason) == "length"
    running.close()
    accepted(tmp_path / "trace.ndjson")


# -- telemetry ----------------------------------------------------------------------------------


def test_without_a_trace_path_the_binding_enforces_the_same(tmp_path: Path) -> None:
    running = lane(
        tmp_path, trace=False, config={"protected_fraction": 0.75, "owner_protected_fraction": 0.75}
    )
    running.add("resident", tokens("r", 60), extra_args=claim("claim:r", "hard_protected", 60))
    running.run()
    running.add("active", tokens("a", 70))
    running.run()
    assert running.records["active"].finished.stop_reason.startswith(
        "kvclaims:refused:capacity:claim:r;others=0;"
    )
    running.close()
    assert not list(tmp_path.iterdir())


def test_the_harm_report_is_load_bearing(tmp_path: Path) -> None:
    """Drop the binding's `resident_claim_harmed` from a harm trace: refinement then rejects it
    for silent harm, so the block events carry enough to catch a binding that stays quiet."""
    from kvclaims.lab.scheduler_scenarios import run_scenario

    trace = tmp_path / "harm.ndjson"
    run_scenario("kv-load-failure-harm", trace)
    accepted(trace)
    silent = tmp_path / "silent.ndjson"
    silent.write_text(
        "".join(line + "\n" for line in trace.read_text().splitlines() if "resident_claim_harmed" not in line)
    )
    verdict = check_trace(silent)
    assert verdict.outcome == "rejected"
    assert "no_silent_harm" in verdict.reason


def test_layout_problems_are_reported_per_claim() -> None:
    from types import SimpleNamespace

    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    from kvclaims.vllm_binding.arbiter import layout_problem

    def scheduler(
        spec: Any, *, caching: bool = True, groups: int = 1, hash_block: int = 16, lookahead: int = 0
    ) -> Any:
        group = SimpleNamespace(kv_cache_spec=spec)
        return SimpleNamespace(
            num_hash_lookahead_tokens=lookahead,
            cache_config=SimpleNamespace(enable_prefix_caching=caching),
            kv_cache_config=SimpleNamespace(kv_cache_groups=[group] * groups),
            hash_block_size=hash_block,
            block_size=16,
            dcp_world_size=1,
            pcp_world_size=1,
        )

    full = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.float32)
    window = SlidingWindowSpec(
        block_size=16, num_kv_heads=1, head_size=64, dtype=torch.float32, sliding_window=128
    )
    assert layout_problem(scheduler(full)) is None
    assert "prefix caching" in (layout_problem(scheduler(full, caching=False)) or "")
    assert "2 KV cache groups" in (layout_problem(scheduler(full, groups=2)) or "")
    assert "SlidingWindowSpec" in (layout_problem(scheduler(window)) or "")
    assert "finer" in (layout_problem(scheduler(full, hash_block=8)) or "")
    assert "lookahead" in (layout_problem(scheduler(full, lookahead=3)) or "")


def test_a_long_request_id_gets_a_bounded_trace_id() -> None:
    from kvclaims.vllm_binding.arbiter import trace_request_id

    assert trace_request_id("cmpl-1") == "cmpl-1"
    long_id = trace_request_id("r" * 10_000)
    assert long_id.startswith("request-sha256-") and len(long_id) < 64


def test_a_request_id_reused_after_finish_is_a_new_lifetime_in_the_trace(tmp_path: Path) -> None:
    import json

    running = lane(tmp_path)
    running.add("again", tokens("a", 2))
    running.run()
    running.add("again", tokens("b", 2))  # vLLM allows a finished request's id again
    running.run()
    running.add("again", tokens("c", 2))
    running.run()
    running.close()
    path = tmp_path / "trace.ndjson"
    events = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    admitted = [e["request_id"] for e in events if e["event"] == "active_request_admitted"]
    assert admitted == ["again", "again#2", "again#3"]
    accepted(path)
    # the same history under one id is what the checker must still refuse
    merged = path.read_text().replace('"again#2"', '"again"').replace('"again#3"', '"again"')
    (tmp_path / "merged.ndjson").write_text(merged)
    assert check_trace(tmp_path / "merged.ndjson").outcome == "rejected"


def test_a_claim_operation_without_a_usable_id_says_so_plainly(tmp_path: Path) -> None:
    import json

    running = lane(tmp_path)
    running.add("r", tokens("r", 2), extra_args={"kvclaims_mode": "hard_protected"})
    running.run()
    running.close()
    lines = (tmp_path / "trace.ndjson").read_text().splitlines()
    rejected = [json.loads(x) for x in lines if '"resident_claim_rejected"' in x]
    assert [r["reason"] for r in rejected] == ["kvclaims_claim_id is required"]


def test_after_the_engines_stop_signal_the_trace_closes_once_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's engine core asks `has_requests()` after SIGTERM / SIGINT to decide whether to
    stop; the trace must not close while a request is still being drained, and must close (with
    the signal's name) as soon as none is left, before vLLM's teardown."""
    import json

    from kvclaims.spec.trace import CloseReason
    from kvclaims.vllm_binding import shutdown

    running = lane(tmp_path)
    running.add("r", tokens("a", 2))
    path = tmp_path / "trace.ndjson"
    assert running.scheduler.has_requests()  # no signal yet: nothing changes
    monkeypatch.setattr(shutdown._WATCH, "engine_stopping", True)
    monkeypatch.setattr(shutdown._WATCH, "signal", CloseReason.SIGTERM)
    assert running.scheduler.has_requests()  # draining: still open
    assert not running.scheduler.kvclaims.sink.closed
    running.run()
    assert not running.scheduler.has_requests()
    closing = json.loads(path.read_text().splitlines()[-1])
    assert closing["event"] == "trace_closed" and closing["reason"] == "SIGTERM"
    assert any(json.loads(line)["event"] == "request_finished" for line in path.read_text().splitlines()[1:])
    accepted(path)


def test_the_signal_handlers_early_close_acts_only_on_an_idle_engine_outside_the_binding(
    tmp_path: Path,
) -> None:
    """`stop_when_idle` also runs from the signal handler, between two bytecodes of the engine's
    thread: never while a request is queued, never inside a binding entry point (a half-written
    hand-over), at once otherwise."""
    arbiter_lane = lane(tmp_path)
    arbiter = arbiter_lane.scheduler.kvclaims
    arbiter_lane.add("r", tokens("a", 2))
    arbiter.stop_when_idle()
    assert not arbiter.sink.closed  # a request is waiting
    arbiter_lane.run()
    with arbiter.entry():
        arbiter.stop_when_idle()
        assert not arbiter.sink.closed  # inside the binding
    arbiter.stop_when_idle()
    assert arbiter.sink.closed
    accepted(tmp_path / "trace.ndjson")


def test_the_engine_id_names_the_stream_in_its_header(tmp_path: Path) -> None:
    import json

    running = lane(tmp_path, config={"engine_id": "engine-{dp_rank}"})
    running.close()
    header = json.loads((tmp_path / "trace.ndjson").read_text().splitlines()[0])
    assert header["engine_id"] == "engine-0"
