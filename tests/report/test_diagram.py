from __future__ import annotations

from pathlib import Path

import networkx as nx

from kvclaims.report.diagram import layers, positions, render_lifecycle_diagram, shared_events
from kvclaims.statemachine.graph import union_graph
from kvclaims.statemachine.lifecycle import INITIAL, TRANSITIONS, Phase
from tests.report.png import png_size


def test_every_phase_gets_a_distinct_place() -> None:
    graph = union_graph()
    column = layers(graph)
    assert set(column) == set(Phase) and column[INITIAL] == 0
    where = positions(graph, column)
    assert len(set(where.values())) == len(Phase)


def test_every_transition_is_drawn_or_listed() -> None:
    graph = union_graph()
    shared = shared_events(graph)
    for t in TRANSITIONS:
        target = t.source if t.target is None else t.target
        assert graph.has_edge(t.source, target)
    # the shared-event box names real transitions only
    for event, (target, sources) in shared.items():
        assert all(any(str(e) == event for e, _ in graph.edges[s, target]["labels"]) for s in sources)
    assert nx.is_weakly_connected(graph)


def test_diagram_is_a_png(tmp_path: Path) -> None:
    width, height = png_size(render_lifecycle_diagram(tmp_path / "diagram.png"))
    assert width > 1500 and height > 800
