"""The capacity proof of DESIGN 2.2 and refinement rule 3, as pure arithmetic, in one place.

    protected_resident_blocks + active_live_blocks_required = resident_plus_active_blocks
    capacity_shortfall_blocks = max(0, resident_plus_active_blocks - usable_blocks)

Runtimes (the MicroRuntime, the vLLM binding) build a `CapacityProof` from what they measured;
checkers (refinement, the MicroRuntime's fuzzing machine) ask `capacity_problem` whether a recorded
refusal's numbers are consistent. The Z3 model (`kvclaims.solver.capacity_model`) encodes the
same equations and a test compares the two.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvclaims.spec.tables import CAPACITY_PROOF_FIELDS


@dataclass(frozen=True)
class CapacityProof:
    """The numbers a refusal or deferral carries; `claims_block` iff resident and active KV
    cannot coexist in the pool, so an explicit action is owed."""

    protected_resident_blocks: int
    active_live_blocks_required: int
    usable_blocks: int

    def __post_init__(self) -> None:
        if (
            self.protected_resident_blocks < 0
            or self.active_live_blocks_required < 0
            or self.usable_blocks <= 0
        ):
            raise ValueError(f"impossible pool measurement: {self}")

    @property
    def resident_plus_active_blocks(self) -> int:
        return self.protected_resident_blocks + self.active_live_blocks_required

    @property
    def capacity_shortfall_blocks(self) -> int:
        return max(0, self.resident_plus_active_blocks - self.usable_blocks)

    @property
    def claims_block(self) -> bool:
        return self.capacity_shortfall_blocks > 0

    def fields(self) -> dict[str, int]:
        """The proof as trace v1 event fields (`CAPACITY_PROOF_FIELDS` order)."""
        return {
            "protected_resident_blocks": self.protected_resident_blocks,
            "active_live_blocks_required": self.active_live_blocks_required,
            "resident_plus_active_blocks": self.resident_plus_active_blocks,
            "usable_blocks": self.usable_blocks,
            "capacity_shortfall_blocks": self.capacity_shortfall_blocks,
        }


@dataclass(frozen=True)
class CapacityProblem:
    """Why recorded numbers break rule 3, and the equation the model required instead."""

    message: str
    required: str


def capacity_problem(
    protected: int,
    active: int,
    total: int,
    usable: int,
    shortfall: int,
    *,
    capacity_reason: bool,
    header_usable: int | None,
) -> CapacityProblem | None:
    """The first rule-3 equation the recorded numbers break, or None when they all hold.

    `capacity_reason`: the conflict claims to be about capacity, so it needs a positive
    shortfall. `header_usable`: the trace header's pool, which every proof must quote.
    """
    if total != protected + active:
        return CapacityProblem(
            f"resident_plus_active_blocks is {total}, but protected_resident_blocks + "
            f"active_live_blocks_required = {protected} + {active} = {protected + active}",
            f"resident_plus_active_blocks == {protected + active}",
        )
    if shortfall != max(0, total - usable):
        return CapacityProblem(
            f"capacity_shortfall_blocks is {shortfall}, but max(0, resident_plus_active_blocks - "
            f"usable_blocks) = max(0, {total} - {usable}) = {max(0, total - usable)}",
            f"capacity_shortfall_blocks == {max(0, total - usable)}",
        )
    if header_usable is not None and usable != header_usable:
        return CapacityProblem(
            f"usable_blocks is {usable}, but the trace header says {header_usable}",
            f"usable_blocks == {header_usable}",
        )
    if capacity_reason and shortfall <= 0:
        return CapacityProblem(
            f"a capacity conflict needs a positive shortfall; {total} blocks fit in {usable}",
            "capacity_shortfall_blocks > 0",
        )
    return None


def recorded_capacity_problem(event: Mapping[str, Any], header_usable: int | None) -> CapacityProblem | None:
    """`capacity_problem` for a refusal or deferral given as a trace v1 event dict carrying all
    five numbers."""
    return capacity_problem(
        *(event[name] for name in CAPACITY_PROOF_FIELDS),
        capacity_reason=event.get("reason") == "capacity",
        header_usable=header_usable,
    )
