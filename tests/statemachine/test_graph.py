"""The lifecycle graph is derived from the transition table and has no dead or vacuous phase."""

from __future__ import annotations

import pytest

from kvclaims.statemachine.graph import (
    all_transitions,
    dead_phases,
    lifecycle_graph,
    reachable_phases,
    to_dot,
    to_mermaid,
    transition_rows,
    transitions,
    union_graph,
)
from kvclaims.statemachine.lifecycle import (
    ALL_PROFILES,
    IN_PLACE,
    INITIAL,
    ClaimProfile,
    Event,
    Phase,
    Violation,
    allowed_events,
    step,
)


@pytest.mark.parametrize("profile", ALL_PROFILES, ids=str)
def test_graph_edges_are_exactly_the_legal_steps(profile: ClaimProfile) -> None:
    legal = {
        (phase, event, result)
        for phase in Phase
        for event in Event
        if not isinstance(result := step(profile, phase, event), Violation)
    }
    assert transitions(profile) == legal
    graph = lifecycle_graph(profile)
    assert {(u, v) for u, _, v in legal} == set(graph.edges)


def test_every_phase_is_reachable_for_some_profile() -> None:
    assert dead_phases() == frozenset()


def test_the_fully_featured_profile_reaches_every_phase() -> None:
    assert reachable_phases(ClaimProfile(preserving=True, offloadable=True, two_key=True)) == set(Phase)


def test_observational_claims_can_never_be_harmed_or_breached() -> None:
    """Seed 001 table 4: loss of a best_effort / soft_priority claim is lost, not harm."""
    observational = [p for p in ALL_PROFILES if not p.preserving]
    for profile in observational:
        assert not {Phase.harmed, Phase.breached} & reachable_phases(profile)


def test_only_offloadable_claims_reach_the_offload_phases() -> None:
    for profile in ALL_PROFILES:
        offload_phases = {Phase.offloaded, Phase.restoring} & reachable_phases(profile)
        assert bool(offload_phases) == profile.offloadable


def test_only_two_key_claims_restore_in_place_and_never_refuse_back() -> None:
    """Seed 002: a hybrid resume restores the non-KV state in place; a materialized one-key
    claim has nothing to restore without an offload. A failed in-place restore has no other
    tier to return to, so refusal (back to offloaded) is never its outcome."""
    for profile in ALL_PROFILES:
        assert bool(IN_PLACE & reachable_phases(profile)) == profile.two_key
        for phase in IN_PLACE:
            assert Event.fail_restoration_refusal not in allowed_events(profile, phase)
    two_key = ClaimProfile(preserving=True, offloadable=False, two_key=True)
    assert union_graph().has_edge(Phase.materialized, Phase.restoring_in_place)
    assert not lifecycle_graph(two_key).has_edge(Phase.restoring_in_place, Phase.offloaded)


def test_harm_is_unreachable_after_release_demotion_or_expiry() -> None:
    graph = union_graph()
    for settled in (Phase.released, Phase.demoted, Phase.expired):
        assert not graph.has_edge(settled, Phase.harmed)


def test_every_real_transition_is_in_the_union() -> None:
    union_edges = set(union_graph().edges)
    assert {(u, v) for u, _, v in all_transitions()} == union_edges


def test_renderings_name_every_edge() -> None:
    graph = union_graph()
    mermaid, dot, rows = to_mermaid(graph), to_dot(graph), transition_rows(graph)
    assert mermaid.startswith("stateDiagram-v2\n") and f"[*] --> {INITIAL}" in mermaid
    assert dot.startswith("digraph lifecycle {")
    assert len(rows) == graph.number_of_edges()
    for source, target in graph.edges:
        assert f"    {source} --> {target}: " in mermaid
        assert f'"{source}" -> "{target}"' in dot
    assert any("harm [preserving]" in events for _, events, _ in rows)
