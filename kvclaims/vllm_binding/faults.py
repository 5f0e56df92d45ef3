"""Claim-filtered failure injection for the offload worker's jobs (tests and failure-injection lanes).

A `LoadFaultPlan` says which restorations the offload worker fails. It is off unless
`enabled`; it fails loads (CPU->GPU), or with `stores` only stores; a load restoring a claim fails
only if the plan targets that claim (or every claim, when `target_claim` is unset); a load that
restores no claim fails only with the separate `unclaimed` switch. `max_failures` bounds how
many loads fail (a transient fault); unset, every selected load fails (a persistent fault).
With `stores` the plan selects stores (GPU->CPU copies of the targeted claims' host chunks; a
store writing no claim's chunk is never selected) instead of loads. With `late_by` a selected
transfer is not failed: it runs, and its completion reaches vLLM `late_by` worker reports late
(a slow worker; bounded: it is always released then, or at once when vLLM waits for it).

The plan travels as plain data: `kv_connector_extra_config["kvclaims_load_faults"]` at start-up,
or `set_load_fault_plan` through `LLM.collective_rpc` while the engine runs. No vLLM import.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

EXTRA_CONFIG_KEY = "kvclaims_load_faults"
"""Key of `kv_connector_extra_config` holding a `LoadFaultPlan` as a mapping."""


@dataclass(frozen=True)
class LoadFaultPlan:
    """Which CPU->GPU loads (with `stores`: GPU->CPU stores) fail or report late. Invariants:
    disabled selects nothing; a claimed job is selected only if `target_claim` is unset or among
    its claims; an unclaimed load only with `unclaimed`; an unclaimed store never."""

    enabled: bool = False
    target_claim: str | None = None
    unclaimed: bool = False
    max_failures: int | None = None
    stores: bool = False
    late_by: int | None = None

    def __post_init__(self) -> None:
        if self.late_by is not None and self.late_by < 1:
            raise ValueError("late_by must be at least 1 worker report (or unset for a failure)")
        if self.max_failures is not None and self.max_failures < 1:
            raise ValueError("max_failures must be at least 1 (or unset for a persistent fault)")
        if self.target_claim is not None and not self.target_claim:
            raise ValueError("target_claim must be a non-empty claim id (or unset)")

    def selects(self, claim_ids: Collection[str]) -> bool:
        """Would a load restoring `claim_ids` (empty: an unclaimed load) be failed?"""
        if not self.enabled:
            return False
        if not claim_ids:
            return self.unclaimed
        return self.target_claim is None or self.target_claim in claim_ids

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_mapping(cls, data: object) -> LoadFaultPlan:
        """A plan from operator/test configuration; anything malformed raises `ValueError`."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValueError(f"{EXTRA_CONFIG_KEY} must be a mapping, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"{EXTRA_CONFIG_KEY}: unknown keys {unknown}")
        enabled, unclaimed = data.get("enabled", False), data.get("unclaimed", False)
        target, limit = data.get("target_claim"), data.get("max_failures")
        if target is not None and not isinstance(target, str):
            raise ValueError(f"{EXTRA_CONFIG_KEY}: target_claim must be a string")
        stores, late = data.get("stores", False), data.get("late_by")
        if type(enabled) is not bool or type(unclaimed) is not bool or type(stores) is not bool:
            raise ValueError(f"{EXTRA_CONFIG_KEY}: enabled, unclaimed and stores must be booleans")
        if any(v is not None and type(v) is not int for v in (limit, late)):
            raise ValueError(f"{EXTRA_CONFIG_KEY}: max_failures and late_by must be integers")
        return cls(
            enabled=enabled,
            target_claim=target,
            unclaimed=unclaimed,
            max_failures=limit,
            stores=stores,
            late_by=late,
        )


class LoadFaultInjector:
    """Applies a plan to loads as they are submitted, counting the failures it caused."""

    def __init__(self, plan: LoadFaultPlan | None = None) -> None:
        self.plan = plan or LoadFaultPlan()
        self.failures = 0

    def set_plan(self, plan: LoadFaultPlan) -> None:
        """Replace the plan and restart its failure count."""
        self.plan = plan
        self.failures = 0

    def should_fail(self, claim_ids: Collection[str], *, store: bool = False) -> bool:
        """Decide (and count) one load restoring `claim_ids` (a store writing their host
        copies, with `store`)."""
        plan = self.plan
        if plan.stores is not store or (store and not claim_ids) or not plan.selects(claim_ids):
            return False
        if plan.max_failures is not None and self.failures >= plan.max_failures:
            return False
        self.failures += 1
        return True
