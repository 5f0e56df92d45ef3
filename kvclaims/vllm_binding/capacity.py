"""The capacity proof of DESIGN 2.2, and a request's live-block need, as pure arithmetic.

    protected_resident_blocks + active_live_blocks_required = resident_plus_active_blocks
    capacity_shortfall_blocks = max(0, resident_plus_active_blocks - usable_blocks)

A request's live need is its peak KV footprint under full attention: every token whose KV is
ever written, i.e. the prompt plus all but the last sampled token (the last one is never fed
back), plus speculative lookahead slots, capped by the model length, in whole blocks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CapacityProof:
    """The numbers a refusal or deferral carries; `shortfall > 0` iff the two cannot coexist."""

    protected_resident_blocks: int
    active_live_blocks_required: int
    usable_blocks: int

    @property
    def resident_plus_active_blocks(self) -> int:
        return self.protected_resident_blocks + self.active_live_blocks_required

    @property
    def capacity_shortfall_blocks(self) -> int:
        return max(0, self.resident_plus_active_blocks - self.usable_blocks)

    def fields(self) -> dict[str, int]:
        """The proof as trace v1 event fields."""
        return {
            "protected_resident_blocks": self.protected_resident_blocks,
            "active_live_blocks_required": self.active_live_blocks_required,
            "resident_plus_active_blocks": self.resident_plus_active_blocks,
            "usable_blocks": self.usable_blocks,
            "capacity_shortfall_blocks": self.capacity_shortfall_blocks,
        }


def peak_live_blocks(
    *, prompt_tokens: int, max_tokens: int, block_size: int, max_model_len: int, lookahead_tokens: int = 0
) -> int:
    """Blocks a request holds at its largest: KV of prompt + max_tokens - 1 tokens (+ lookahead),
    never more than the model length allows."""
    tokens = min(prompt_tokens + max(max_tokens, 1) - 1 + lookahead_tokens, max_model_len)
    return -(-tokens // block_size)
