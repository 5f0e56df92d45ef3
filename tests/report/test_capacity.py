from __future__ import annotations

from pathlib import Path

from kvclaims.report.capacity import outcome_kind, refusal_threshold, render_capacity_sweep, sweep
from tests.report.png import png_size

# Seed 001 section 2.3: a 60-block resident prefix and a 70-block active request need
# 60 + 70 = 130 usable blocks to coexist.
SEED_RESIDENT, SEED_ACTIVE = 60, 70


def test_hard_claim_refusal_threshold_is_the_seeds_sum() -> None:
    points = sweep()
    assert refusal_threshold(points, "hard_protected") == SEED_RESIDENT + SEED_ACTIVE


def test_refusal_shortfall_is_what_the_runtime_proved() -> None:
    hard = {p.usable_blocks: p for p in sweep(range(80, 131, 10), ("hard_protected",))}
    assert hard[80].active_outcome == "refused" and hard[80].shortfall_blocks == 130 - 80
    assert hard[120].shortfall_blocks == 10
    assert hard[130].active_outcome == "admitted" and hard[130].shortfall_blocks is None
    assert all(p.resident_blocks_cached == SEED_RESIDENT for p in hard.values())


def test_unprotected_policies_lose_residents_and_say_how() -> None:
    points = {
        (p.policy, p.usable_blocks): p
        for p in sweep(range(80, 81), ("native_lru", "demotable", "offloadable"))
    }
    # 80 usable: the 70-block request leaves room for 10 of the 60 resident blocks.
    assert {p.resident_blocks_cached for p in points.values()} == {80 - SEED_ACTIVE}
    assert points["native_lru", 80].claim_phase == "rejected"
    assert outcome_kind(points["demotable", 80]) == "admitted after demoting the claim"
    assert outcome_kind(points["offloadable", 80]) == "admitted after offloading the claim"


def test_capacity_picture_is_a_png(tmp_path: Path) -> None:
    width, height = png_size(render_capacity_sweep(sweep(), tmp_path / "capacity.png"))
    assert width > 800 and height > 600
