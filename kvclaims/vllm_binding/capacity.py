"""A request's live-block need, and (re-exported from `kvclaims.spec.capacity`) the capacity
proof of DESIGN 2.2 it feeds.

A request's live need is its peak KV footprint under full attention: every token whose KV is
ever written, i.e. the prompt plus all but the last sampled token (the last one is never fed
back), plus speculative lookahead slots, capped by the model length, in whole blocks.
"""

from __future__ import annotations

from kvclaims.spec.capacity import CapacityProof

__all__ = ["CapacityProof", "peak_live_blocks"]


def peak_live_blocks(
    *, prompt_tokens: int, max_tokens: int, block_size: int, max_model_len: int, lookahead_tokens: int = 0
) -> int:
    """Blocks a request holds at its largest: KV of prompt + max_tokens - 1 tokens (+ lookahead),
    never more than the model length allows."""
    tokens = min(prompt_tokens + max(max_tokens, 1) - 1 + lookahead_tokens, max_model_len)
    return -(-tokens // block_size)
