"""vLLM's scheduler may replace its KV cache manager after start-up (vLLM's own
`test_hisparse_admitted_async_loads_can_finish_with_nothing_running` does): the binding follows
the groups the scheduler holds now, with vLLM's real `KVCacheManager` (scheduler lane)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvclaims.refinement import check_trace
from kvclaims.vllm_binding.config import BindingConfig

pytestmark = pytest.mark.vllm

BLOCK = 16


def _two_group_manager(lane: Any, num_blocks: int) -> Any:
    """A real KVCacheManager with two full-attention groups (the lane started with one)."""
    import torch
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32)
    config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["a"], spec), KVCacheGroupSpec(["b"], spec)],
    )
    manager = KVCacheManager(
        config,
        max_model_len=lane.scheduler.max_model_len,
        scheduler_block_size=BLOCK,
        hash_block_size=BLOCK,
        enable_caching=True,
    )
    return manager, config


def _lane(tmp_path: Path) -> Any:
    from kvclaims.lab.scheduler_lane import LaneSpec, SchedulerLane

    binding = BindingConfig(trace_path=str(tmp_path / "trace.ndjson"))
    return SchedulerLane(LaneSpec(usable_blocks=80, binding=binding, block_size=BLOCK))


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_replaced_manager_with_more_groups_schedules_with_the_trace_on(tmp_path: Path) -> None:
    from kvclaims.lab.scheduler_lane import prompt_tokens

    running = _lane(tmp_path)
    manager, config = _two_group_manager(running, 41)
    running.scheduler.kv_cache_manager = manager
    running.scheduler.kv_cache_config = config
    running.add("after", prompt_tokens("after", 3 * BLOCK))
    running.run()
    live = running.records["after"].finished
    assert live is not None and live.finish_reason is not None
    running.close()
    # the admission counted both groups' blocks: the 3 prompt blocks in each group
    admitted = [e for e in _events(tmp_path / "trace.ndjson") if e.get("event") == "active_request_admitted"]
    assert [e["active_live_blocks"] for e in admitted] == [2 * 3]
    verdict = check_trace(tmp_path / "trace.ndjson")
    assert verdict.outcome == "accepted", verdict.reason


def test_claims_on_the_old_pool_end_before_their_blocks_go_and_new_ones_are_refused(tmp_path: Path) -> None:
    from kvclaims.lab.scheduler_lane import prompt_tokens

    running = _lane(tmp_path)
    claim = {"kvclaims_claim_id": "c", "kvclaims_mode": "hard_protected", "kvclaims_footprint_blocks": 4}
    running.add("source", prompt_tokens("sys", 4 * BLOCK + 3), extra_args=claim)
    running.run()
    assert len(running.arbiter.pinned_blocks()) == 4
    manager, config = _two_group_manager(running, 41)
    running.scheduler.kv_cache_manager = manager
    running.scheduler.kv_cache_config = config
    again = {"kvclaims_claim_id": "d", "kvclaims_mode": "hard_protected", "kvclaims_footprint_blocks": 2}
    running.add("next", prompt_tokens("next", 2 * BLOCK + 3), extra_args=again)
    running.run()
    assert running.arbiter.pinned_blocks() == {}
    assert "c" not in running.arbiter.registry.claims
    running.close()
    kinds = [e.get("event") for e in _events(tmp_path / "trace.ndjson")]
    demoted = kinds.index("resident_claim_demoted")
    assert kinds[demoted + 1 : demoted + 5] == ["block_removed"] * 4
    rejected = [e for e in _events(tmp_path / "trace.ndjson") if e.get("event") == "resident_claim_rejected"]
    assert [e["claim_id"] for e in rejected] == ["d"]
    assert "replaced its KV cache manager" in rejected[0]["reason"]
    verdict = check_trace(tmp_path / "trace.ndjson")
    assert verdict.outcome == "accepted", verdict.reason
