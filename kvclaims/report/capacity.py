"""The capacity sweep: seed 001's 60-block resident prefix and 70-block active request, run on
the MicroRuntime at every usable-pool size of a range, once per policy.

Every point is measured from a run (`sweep`), never computed: the resident blocks still cached
afterwards are read from the pool's hash index, the active request's outcome from the runtime,
and the shortfall from the refusal's capacity proof in the emitted trace. The seed's arithmetic
(60 + 70 = 130) is what the runs must reproduce, and the tests check it against the seed, not
against this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvclaims.lab.micro_scenarios import run_resident_active
from kvclaims.microruntime.policies import POLICIES
from kvclaims.report.figure import pyplot, save
from kvclaims.spec.vocabulary import ProtectionMode

RESIDENT_BLOCKS = 60
ACTIVE_BLOCKS = 70
POOLS = range(ACTIVE_BLOCKS, 161, 2)
"""Usable pools from the smallest that can hold the active request alone up to 160."""

SWEEP_POLICIES: dict[str, ProtectionMode] = {
    "native_lru": ProtectionMode.hard_protected,
    "hard_protected": ProtectionMode.hard_protected,
    "demotable": ProtectionMode.demotable,
    "offloadable": ProtectionMode.offloadable,
}
"""Policy -> the mode of the resident claim it is asked to honour (native LRU rejects it)."""

POLICY_STYLES = {
    "native_lru": ("#d73027", "o", "native LRU (claim rejected)"),
    "hard_protected": ("#1a9850", "s", "hard_protected claim"),
    "demotable": ("#4575b4", "^", "demotable claim"),
    "offloadable": ("#984ea3", "D", "offloadable claim"),
}


@dataclass(frozen=True)
class SweepPoint:
    """One run: `policy` at `usable_blocks`, and what it measured."""

    policy: str
    usable_blocks: int
    claim_phase: str
    """The resident claim's lifecycle phase at the end (e.g. rejected, materialized, demoted)."""
    resident_blocks_cached: int
    active_outcome: str
    """`admitted` or `refused`."""
    shortfall_blocks: int | None
    """From the refusal's capacity proof; None when nothing was refused."""
    events: int


OUTCOME_STYLES = {
    "refused (number: shortfall blocks)": ("#d73027", "X"),
    "admitted, residents intact": ("#1a9850", "o"),
    "admitted by evicting unclaimed residents": ("#fc8d59", "o"),
    "admitted after demoting the claim": ("#4575b4", "^"),
    "admitted after offloading the claim": ("#984ea3", "D"),
}


def outcome_kind(point: SweepPoint) -> str:
    """Which `OUTCOME_STYLES` entry a measured point is, from its outcome and claim phase."""
    if point.active_outcome != "admitted":
        return "refused (number: shortfall blocks)"
    if point.resident_blocks_cached == RESIDENT_BLOCKS:
        return "admitted, residents intact"
    return {
        "demoted": "admitted after demoting the claim",
        "offloaded": "admitted after offloading the claim",
    }.get(point.claim_phase, "admitted by evicting unclaimed residents")


def run_point(policy: str, usable_blocks: int) -> SweepPoint:
    """Run the 60 + 70 case once on a fresh MicroRuntime (the scenarios' own case) and read
    what happened."""
    run, numbers = run_resident_active(
        f"capacity-sweep/{policy}-{usable_blocks}", usable_blocks, POLICIES[policy], SWEEP_POLICIES[policy]
    )
    proof = numbers["capacity_proof"]
    return SweepPoint(
        policy=policy,
        usable_blocks=usable_blocks,
        claim_phase=numbers["claim_phase"],
        resident_blocks_cached=numbers["resident_blocks_remaining"],
        active_outcome=numbers["active_outcome"],
        shortfall_blocks=proof["capacity_shortfall_blocks"] if proof else None,
        events=len(run.events),
    )


def sweep(pools: range = POOLS, policies: tuple[str, ...] = tuple(SWEEP_POLICIES)) -> list[SweepPoint]:
    """Every policy at every pool size, in that order."""
    return [run_point(policy, pool) for policy in policies for pool in pools]


def refusal_threshold(points: list[SweepPoint], policy: str) -> int | None:
    """The smallest measured pool from which `policy` admits the active request at every larger
    measured pool too; None if it never does."""
    mine = sorted((p for p in points if p.policy == policy), key=lambda p: p.usable_blocks)
    threshold = None
    for point in reversed(mine):
        if point.active_outcome != "admitted":
            break
        threshold = point.usable_blocks
    return threshold


def render_capacity_sweep(points: list[SweepPoint], target: Path) -> Path:
    """Two panels over usable blocks: resident blocks still cached per policy, and the active
    request's outcome per policy with the shortfall each refusal proved."""
    plt = pyplot()
    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(13, 8.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    policies = list(dict.fromkeys(p.policy for p in points))
    offsets = {policy: (i - (len(policies) - 1) / 2) * 0.9 for i, policy in enumerate(policies)}
    for policy in policies:
        colour, marker, label = POLICY_STYLES[policy]
        mine = [p for p in points if p.policy == policy]
        top.plot(
            [p.usable_blocks + offsets[policy] * 0.3 for p in mine],
            [p.resident_blocks_cached for p in mine],
            color=colour,
            marker=marker,
            markersize=5,
            lw=1.8,
            label=label,
        )
    top.axhline(RESIDENT_BLOCKS, color="grey", ls=":", lw=1)
    top.set_ylabel("resident claim blocks still\ncached on device (of 60)")
    top.set_ylim(-3, RESIDENT_BLOCKS + 8)
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1), title="policy")
    top.text(
        0.45,
        0.12,
        "native LRU, demotable and offloadable lose the same\n"
        "device blocks below 130; they differ in what the\n"
        "claim says about it (lower panel)",
        transform=top.transAxes,
        fontsize=10,
        va="center",
        bbox={"facecolor": "white", "edgecolor": "grey", "alpha": 0.9},
    )
    top.set_title("Capacity sweep on the MicroRuntime: 60-block resident claim, then a 70-block request")
    top.grid(alpha=0.3)

    bottom.set_yticks(range(len(policies)), [POLICY_STYLES[p][2].split(" (")[0] for p in policies])
    shown: set[str] = set()
    for row, policy in enumerate(policies):
        for point in (p for p in points if p.policy == policy):
            kind = outcome_kind(point)
            colour, marker = OUTCOME_STYLES[kind]
            bottom.scatter(
                point.usable_blocks,
                row,
                marker=marker,
                color=colour,
                s=36,
                zorder=3,
                label=None if kind in shown else kind,
            )
            shown.add(kind)
            if point.shortfall_blocks is not None and point.usable_blocks % 10 == 0:
                bottom.annotate(
                    str(point.shortfall_blocks),
                    (point.usable_blocks, row),
                    textcoords="offset points",
                    xytext=(0, 8),
                    ha="center",
                    fontsize=9,
                    color="#d73027",
                )
    threshold = refusal_threshold(points, "hard_protected")
    if threshold is not None:
        for axes in (top, bottom):
            axes.axvline(threshold, color="black", ls="--", lw=1)
        top.annotate(
            f"measured: hard claim admits the request from {threshold} usable blocks",
            (threshold, RESIDENT_BLOCKS + 4),
            xytext=(-8, 0),
            textcoords="offset points",
            ha="right",
            va="center",
            fontsize=10,
        )
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9, title="what happened")
    bottom.set_ylim(-0.6, len(policies) - 0.3)
    bottom.set_xlabel("usable device blocks in the pool")
    bottom.set_title("Outcome of the 70-block request", fontsize=12)
    bottom.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    return save(figure, target)
