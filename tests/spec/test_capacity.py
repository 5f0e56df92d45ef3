"""The capacity proof and rule 3, on the seed's own numbers."""

from __future__ import annotations

import pytest

from kvclaims.spec.capacity import CapacityProof, capacity_problem, recorded_capacity_problem


def test_the_60_70_80_proof() -> None:
    proof = CapacityProof(60, 70, 80)
    assert (proof.resident_plus_active_blocks, proof.capacity_shortfall_blocks, proof.claims_block) == (
        130,
        50,
        True,
    )
    assert recorded_capacity_problem({**proof.fields(), "reason": "capacity"}, 80) is None


def test_the_live_pressure_trace_shortfall_is_caught() -> None:
    """Seed 001 table 10's live trace records 40 + 46 = 86 with usable 68 and shortfall 19."""
    problem = capacity_problem(40, 46, 86, 68, 19, capacity_reason=True, header_usable=None)
    assert problem is not None and problem.required == "capacity_shortfall_blocks == 18"


@pytest.mark.parametrize(
    ("numbers", "header", "required"),
    [
        ((60, 70, 120, 80, 40), None, "resident_plus_active_blocks == 130"),
        ((60, 70, 130, 80, 50), 90, "usable_blocks == 90"),
        ((60, 10, 70, 80, 0), None, "capacity_shortfall_blocks > 0"),
    ],
)
def test_each_equation_of_rule_3(numbers, header, required) -> None:
    problem = capacity_problem(*numbers, capacity_reason=True, header_usable=header)
    assert problem is not None and problem.required == required


def test_a_fitting_request_blocks_nothing() -> None:
    assert not CapacityProof(60, 20, 80).claims_block
    with pytest.raises(ValueError, match="impossible"):
        CapacityProof(-1, 20, 80)
