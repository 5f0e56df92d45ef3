"""The active/resident arbiter's pure part: the capacity proof and the actions a pool lacks.

When an active request does not fit, the runtime measures two numbers from its pool (blocks
pinned by accepted preserving claims, and the live blocks the request needs beyond those it
shares with them) and `kvclaims.spec.capacity.CapacityProof` turns them into the proof of
DESIGN 2.2:

    protected_resident_blocks + active_live_blocks_required = resident_plus_active_blocks
    capacity_shortfall_blocks = max(0, resident_plus_active_blocks - usable_blocks)

A positive shortfall means the claims, not other active work, stand in the way: the arbiter
must choose an explicit action (seed 001 table 5). A zero shortfall means the request only
waits for running requests to finish, which is not attributed to any claim.
"""

from __future__ import annotations

from kvclaims.spec.capacity import CapacityProof, recorded_capacity_problem
from kvclaims.statemachine.ledger import ConflictAction

__all__ = ["CapacityProof", "recorded_capacity_problem", "unavailable_reason"]


def unavailable_reason(action: ConflictAction, usable_blocks: int) -> str | None:
    """Why a single fixed pool cannot take `action` at all, or None if it can."""
    if action is ConflictAction.route_elsewhere:
        return "route elsewhere: a single-pool MicroRuntime has no other worker with headroom"
    if action is ConflictAction.add_capacity:
        return f"add capacity: the pool is fixed at {usable_blocks} usable blocks"
    return None
