"""The active/resident arbiter's pure part: the capacity proof and the actions a pool lacks.

When an active request does not fit, the runtime measures two numbers from its pool (blocks
pinned by accepted preserving claims, and the live blocks the request needs beyond those it
shares with them) and this module turns them into the proof of DESIGN 2.2:

    protected_resident_blocks + active_live_blocks_required = resident_plus_active_blocks
    capacity_shortfall_blocks = max(0, resident_plus_active_blocks - usable_blocks)

A positive shortfall means the claims, not other active work, stand in the way: the arbiter
must choose an explicit action (seed 001 table 5). A zero shortfall means the request only
waits for running requests to finish, which is not attributed to any claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvclaims.statemachine.policies import ConflictAction


@dataclass(frozen=True)
class CapacityProof:
    """The arithmetic a refusal or deferral carries. Built only by `measure`."""

    protected_resident_blocks: int
    active_live_blocks_required: int
    usable_blocks: int

    @classmethod
    def measure(cls, protected: int, required: int, usable: int) -> CapacityProof:
        if protected < 0 or required < 0 or usable <= 0:
            raise ValueError(f"impossible pool measurement: {protected=}, {required=}, {usable=}")
        return cls(protected, required, usable)

    @property
    def resident_plus_active_blocks(self) -> int:
        return self.protected_resident_blocks + self.active_live_blocks_required

    @property
    def capacity_shortfall_blocks(self) -> int:
        return max(0, self.resident_plus_active_blocks - self.usable_blocks)

    @property
    def claims_block(self) -> bool:
        """Protected resident and active live KV cannot both fit: an explicit action is owed."""
        return self.capacity_shortfall_blocks > 0

    def fields(self) -> dict[str, int]:
        """The trace fields of `active_request_refused` / `_deferred`."""
        return {
            "protected_resident_blocks": self.protected_resident_blocks,
            "active_live_blocks_required": self.active_live_blocks_required,
            "resident_plus_active_blocks": self.resident_plus_active_blocks,
            "usable_blocks": self.usable_blocks,
            "capacity_shortfall_blocks": self.capacity_shortfall_blocks,
        }


def capacity_proof_holds(event: dict[str, Any], header_usable: int | None) -> str | None:
    """Why a refusal/deferral's numbers are inconsistent (DESIGN 4 rule 3), or None if they hold."""
    total = event["protected_resident_blocks"] + event["active_live_blocks_required"]
    if event["resident_plus_active_blocks"] != total:
        return (
            f"resident_plus_active_blocks {event['resident_plus_active_blocks']} != "
            f"{event['protected_resident_blocks']} + {event['active_live_blocks_required']}"
        )
    shortfall = max(0, total - event["usable_blocks"])
    if event["capacity_shortfall_blocks"] != shortfall:
        return (
            f"capacity_shortfall_blocks {event['capacity_shortfall_blocks']} != "
            f"max(0, {total} - {event['usable_blocks']}) = {shortfall}"
        )
    if header_usable is not None and event["usable_blocks"] != header_usable:
        return f"usable_blocks {event['usable_blocks']} differs from the header's {header_usable}"
    if event.get("reason") == "capacity" and shortfall <= 0:
        return "a capacity refusal or deferral needs a positive shortfall"
    return None


def unavailable_reason(action: ConflictAction, usable_blocks: int) -> str | None:
    """Why a single fixed pool cannot take `action` at all, or None if it can."""
    if action is ConflictAction.route_elsewhere:
        return "route elsewhere: a single-pool MicroRuntime has no other worker with headroom"
    if action is ConflictAction.add_capacity:
        return f"add capacity: the pool is fixed at {usable_blocks} usable blocks"
    return None
