"""What each sub-model declares about its rules, as data: the rule, where DESIGN states it, the
trace v1 event types and fields that reach the state it guards, and the Z3 obligations in
`kvclaims.solver` that prove it. `table` renders them as docs/rule-event-table.md."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvclaims.spec.vocabulary import ConformanceRule


@dataclass(frozen=True)
class Rule:
    """One rule of the model, enforced in one function (`enforced_by`)."""

    name: str
    rule: ConformanceRule
    design: str
    enforced_by: str
    reaches: Mapping[str, tuple[str, ...]]
    """Event type -> the fields of it that reach the rule's state."""
    proofs: tuple[str, ...]
    """Names of `kvclaims.solver` proof obligations that state the rule."""


TERMS_FIELDS = (
    "owner_scope",
    "object_id",
    "mode",
    "predicate",
    "footprint_blocks",
    "duration_steps",
    "duration_ms",
    "refresh_on_hit",
    "max_duration_steps",
    "max_duration_ms",
)
CLOCKS = ("engine_step", "t_ns")
PROOF_NUMBERS = (
    "usable_blocks",
    "protected_resident_blocks",
    "active_live_blocks_required",
    "resident_plus_active_blocks",
    "capacity_shortfall_blocks",
)
CLAIM_EVENTS = (
    "resident_claim_submitted",
    "resident_claim_accepted",
    "resident_claim_conditionally_accepted",
    "resident_claim_rejected",
    "resident_claim_extended",
    "resident_claim_materialized",
    "resident_claim_demoted",
    "resident_claim_expired",
    "resident_claim_released",
    "resident_claim_harmed",
    "resident_claim_lost",
    "resident_claim_offloaded",
    "resident_claim_restore_required",
    "resident_claim_restored",
    "resident_claim_restoration_failed",
    "resident_claim_checkpoint_restored",
)
