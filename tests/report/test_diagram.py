from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest

from kvclaims.report.diagram import (
    draw_profile,
    edge_events,
    layers,
    positions,
    profile_groups,
    render_lifecycle_diagrams,
    shared_events,
)
from kvclaims.report.figure import pyplot
from kvclaims.statemachine.graph import union_graph
from kvclaims.statemachine.lifecycle import ALL_PROFILES, INITIAL, TRANSITIONS, Phase
from tests.report.png import png_size


def test_every_phase_gets_a_distinct_place() -> None:
    graph = union_graph()
    column = layers(graph)
    assert set(column) == set(Phase) and column[INITIAL] == 0
    where = positions(graph, column)
    assert len(set(where.values())) == len(Phase)


def test_every_transition_is_in_the_union_graph_and_shared_events_are_real() -> None:
    graph = union_graph()
    shared = shared_events(graph)
    for t in TRANSITIONS:
        target = t.source if t.target is None else t.target
        assert graph.has_edge(t.source, target)
    for event, (target, sources) in shared.items():
        assert all(event in edge_events(graph, s, target) for s in sources)
    assert nx.is_weakly_connected(graph)


def test_every_profile_has_a_diagram_and_profiles_share_one_only_when_equal() -> None:
    groups = profile_groups()
    names = [name for found, _ in groups for name in found]
    assert len(names) == len(ALL_PROFILES) == len(set(names))
    graphs = [frozenset(g.edges) for _, g in groups]
    assert len(graphs) == len(set(graphs)) or len(groups) > 1


def _texts(figure):  # type: ignore[no-untyped-def]
    """Every visible text of the figure with its box on the canvas (matplotlib's renderer)."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    found = []
    candidates = [t for axes in figure.axes for t in (*axes.texts, axes.title)] + list(figure.texts)
    for text in candidates:
        if not text.get_visible() or not text.get_text().strip():
            continue
        patch = text.get_bbox_patch()
        box = patch.get_window_extent(renderer) if patch is not None else text.get_window_extent(renderer)
        found.append((text.get_text(), box))
    return found


@pytest.mark.parametrize("group", range(len(profile_groups())))
def test_a_profile_diagram_names_every_event_and_no_two_texts_overlap(group: int) -> None:
    names, graph = profile_groups()[group]
    figure = draw_profile(graph, names)
    try:
        texts = _texts(figure)
        shown = "\n".join(text for text, _ in texts)
        for source, target in graph.edges:
            for event in edge_events(graph, source, target):
                assert event in shown, (source, target, event)
        for phase in graph:
            assert str(phase) in shown
        canvas = figure.bbox
        for index, (text, box) in enumerate(texts):
            assert canvas.x0 - 1 <= box.x0 and box.x1 <= canvas.x1 + 1, f"{text!r} leaves the picture"
            for other, other_box in texts[index + 1 :]:
                assert not box.overlaps(other_box), (text, other)
    finally:
        pyplot().close(figure)


def test_diagrams_are_pngs(tmp_path: Path) -> None:
    written = render_lifecycle_diagrams(tmp_path)
    assert len(written) == len(profile_groups())
    for path in written:
        width, height = png_size(path)
        assert width > 800 and height > 400
