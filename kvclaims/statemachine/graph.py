"""The lifecycle's transition graph, derived from `lifecycle.TRANSITIONS` (never drawn by hand).

One networkx `DiGraph` per claim profile: nodes are phases, an edge `u -> v` carries the events
that move a claim with that profile from u to v (self-loops are events that keep the phase).
The union graph labels each event with the guard it needs. These graphs answer reachability (no
dead or vacuous phase), measure fuzzer coverage, and render the diagram `kvclaims lifecycle`
prints.
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from kvclaims.statemachine.lifecycle import (
    ALL_PROFILES,
    INITIAL,
    TRANSITIONS,
    ClaimProfile,
    Event,
    Guard,
    Phase,
)

Edge = tuple[Phase, Event, Phase]
"""One transition: source phase, event, target phase (a stay repeats the source)."""


def transitions(profile: ClaimProfile) -> frozenset[Edge]:
    """Every transition a claim with `profile` can take."""
    return frozenset(
        (t.source, t.event, t.source if t.target is None else t.target)
        for t in TRANSITIONS
        if profile.admits(t.guard)
    )


def all_transitions() -> frozenset[Edge]:
    """Every transition some real profile can take."""
    return frozenset().union(*(transitions(p) for p in ALL_PROFILES))


def lifecycle_graph(profile: ClaimProfile) -> nx.DiGraph:
    """The phases and transitions of one profile; edge attribute `events` (sorted tuple)."""
    graph = nx.DiGraph(profile=profile)
    graph.add_nodes_from(Phase)
    for source, event, target in sorted(transitions(profile)):
        if graph.has_edge(source, target):
            graph.edges[source, target]["events"] += (event,)
        else:
            graph.add_edge(source, target, events=(event,))
    return graph


def union_graph() -> nx.DiGraph:
    """All profiles at once; edge attribute `labels`: (event, guard) pairs."""
    graph = nx.DiGraph()
    graph.add_nodes_from(Phase)
    for t in TRANSITIONS:
        target = t.source if t.target is None else t.target
        label = (t.event, t.guard)
        if graph.has_edge(t.source, target):
            graph.edges[t.source, target]["labels"] += (label,)
        else:
            graph.add_edge(t.source, target, labels=(label,))
    return graph


def reachable_phases(profile: ClaimProfile) -> frozenset[Phase]:
    """Phases a claim with `profile` can reach from `absent`."""
    graph = lifecycle_graph(profile)
    return frozenset({INITIAL} | nx.descendants(graph, INITIAL))


def dead_phases() -> frozenset[Phase]:
    """Phases no real profile can reach: each would be a vacuous part of the contract."""
    reached: set[Phase] = set()
    for profile in ALL_PROFILES:
        reached |= reachable_phases(profile)
    return frozenset(set(Phase) - reached)


def profile_name(profile: ClaimProfile) -> str:
    traits = [
        "preserving" if profile.preserving else "observational",
        *(["offloadable"] if profile.offloadable else []),
        *(["two-key"] if profile.two_key else []),
    ]
    return ", ".join(traits)


def _edge_labels(graph: nx.DiGraph, source: Phase, target: Phase) -> list[str]:
    data = graph.edges[source, target]
    if "events" in data:
        return [str(event) for event in data["events"]]
    return [str(event) if guard is Guard.always else f"{event} [{guard}]" for event, guard in data["labels"]]


def _sorted_edges(graph: nx.DiGraph) -> Iterable[tuple[Phase, Phase]]:
    order = {phase: index for index, phase in enumerate(Phase)}
    return sorted(graph.edges, key=lambda edge: (order[edge[0]], order[edge[1]]))


def to_mermaid(graph: nx.DiGraph) -> str:
    """A Mermaid `stateDiagram-v2` (renders on GitHub)."""
    lines = ["stateDiagram-v2", f"    [*] --> {INITIAL}"]
    for source, target in _sorted_edges(graph):
        lines.append(f"    {source} --> {target}: {', '.join(_edge_labels(graph, source, target))}")
    return "\n".join(lines) + "\n"


def to_dot(graph: nx.DiGraph) -> str:
    """A Graphviz digraph."""
    lines = ["digraph lifecycle {", "    rankdir=LR;", f'    "{INITIAL}" [shape=doublecircle];']
    for source, target in _sorted_edges(graph):
        label = "\\n".join(_edge_labels(graph, source, target))
        lines.append(f'    "{source}" -> "{target}" [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def transition_rows(graph: nx.DiGraph) -> list[tuple[str, str, str]]:
    """(source, events, target) rows, for a table."""
    return [
        (str(source), ", ".join(_edge_labels(graph, source, target)), str(target))
        for source, target in _sorted_edges(graph)
    ]
