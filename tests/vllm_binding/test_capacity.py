"""The capacity proof (DESIGN 2.2) and a request's peak live blocks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvclaims.spec.capacity import CapacityProof
from kvclaims.vllm_binding.capacity import peak_live_blocks


def test_the_seed_case() -> None:
    proof = CapacityProof(60, 70, 80)
    assert proof.resident_plus_active_blocks == 130
    assert proof.capacity_shortfall_blocks == 50


def test_the_live_anchor_arithmetic_is_18_not_19() -> None:
    """Seed 001 recorded 40 + 46 = 86 against 68 usable with shortfall 19; it is 18."""
    assert CapacityProof(40, 46, 68).capacity_shortfall_blocks == 18


@settings(max_examples=200, derandomize=True, database=None)
@given(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(1, 10_000))
def test_proof_fields_satisfy_the_design_equations(protected: int, active: int, usable: int) -> None:
    fields = CapacityProof(protected, active, usable).fields()
    total = fields["resident_plus_active_blocks"]
    assert total == protected + active
    assert fields["capacity_shortfall_blocks"] == max(0, total - usable)


def test_peak_counts_prompt_plus_all_but_the_last_sampled_token() -> None:
    # 960 prompt tokens + 1 sampled token: KV for 960 tokens = 60 blocks of 16.
    assert peak_live_blocks(prompt_tokens=960, max_tokens=1, block_size=16, max_model_len=4096) == 60
    # one more sampled token writes KV for token 961: a 61st block.
    assert peak_live_blocks(prompt_tokens=960, max_tokens=2, block_size=16, max_model_len=4096) == 61
    assert peak_live_blocks(prompt_tokens=1, max_tokens=1, block_size=16, max_model_len=4096) == 1


def test_peak_is_capped_by_the_model_length_and_grows_with_lookahead() -> None:
    assert peak_live_blocks(prompt_tokens=100, max_tokens=10_000, block_size=16, max_model_len=512) == 32
    base = peak_live_blocks(prompt_tokens=16, max_tokens=1, block_size=16, max_model_len=512)
    assert (
        peak_live_blocks(prompt_tokens=16, max_tokens=1, block_size=16, max_model_len=512, lookahead_tokens=4)
        == base + 1
    )
