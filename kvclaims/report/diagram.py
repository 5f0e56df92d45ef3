"""The claim lifecycle state diagram, drawn from the machine itself.

The graph is `kvclaims.statemachine.graph.union_graph()`, which is derived from
`lifecycle.TRANSITIONS`; no transition is written here. Phases are laid out left to right by
their longest distance from `absent` over forward edges (an edge is forward unless, in the
order `TRANSITIONS` lists them, it would close a cycle), so the usual life of a claim reads
left to right and the edges that go back (a restoration refused, a restore completed) curve
back. Self-loops (events
that keep the phase) are listed under their phase rather than drawn.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from kvclaims.report.figure import pyplot, save
from kvclaims.statemachine.graph import union_graph
from kvclaims.statemachine.lifecycle import INITIAL, Guard, Phase

HARM_COLOUR = "#d73027"
FORWARD_COLOUR = "#2b5d8a"
BACK_COLOUR = "#984ea3"


def layers(graph: nx.DiGraph) -> dict[Phase, int]:
    """Each phase's column: its longest distance from `INITIAL` over the forward edges, where
    an edge is forward unless, taken in the machine's own order, it would close a cycle."""
    forward = nx.DiGraph()
    forward.add_nodes_from(graph.nodes)
    for source, target in graph.edges:
        if source != target and not nx.has_path(forward, target, source):
            forward.add_edge(source, target)
    column: dict[Phase, int] = {}
    for node in nx.topological_sort(forward):
        column[node] = max((column[u] + 1 for u in forward.predecessors(node)), default=0)
    return column


def positions(graph: nx.DiGraph, column: dict[Phase, int]) -> dict[Phase, tuple[float, float]]:
    """x from the column; within a column, phases ordered by the mean height of their
    predecessors (one barycentre pass, which keeps most edges from crossing). A lone phase in
    a column sits on the other side of the middle from its predecessors."""
    placed: dict[Phase, tuple[float, float]] = {}
    order = {phase: index for index, phase in enumerate(Phase)}
    for layer in range(max(column.values()) + 1):
        members = [p for p in graph if column[p] == layer]

        def height(phase: Phase) -> tuple[float, int]:
            known = [placed[u][1] for u in graph.predecessors(phase) if u in placed]
            return (sum(known) / len(known) if known else 0.0, order[phase])

        members.sort(key=height)
        # A lone phase sits on the other side of the middle from its predecessors, so long
        # edges do not run through the phases between their ends.
        for index, phase in enumerate(members):
            y = (index - (len(members) - 1) / 2) * 2.2
            if len(members) == 1 and layer > 1:
                y = -1.1 if height(phase)[0] > 0 else 1.1
            placed[phase] = (layer * 3.8, y)
    return placed


def shared_events(graph: nx.DiGraph, sources: int = 3) -> dict[str, tuple[Phase, list[Phase]]]:
    """Events that lead from at least `sources` phases into one phase (demote, expire, release,
    harm): drawn as thin unlabelled arrows and listed once in a box instead."""
    into: dict[tuple[str, Phase], list[Phase]] = {}
    for source, target in graph.edges:
        if source != target:
            for event, _ in graph.edges[source, target]["labels"]:
                into.setdefault((str(event), target), []).append(source)
    return {event: (target, found) for (event, target), found in into.items() if len(found) >= sources}


def _label(graph: nx.DiGraph, source: Phase, target: Phase, hidden: set[str]) -> str:
    return "\n".join(
        str(event) if guard is Guard.always else f"{event} [{guard}]"
        for event, guard in graph.edges[source, target]["labels"]
        if str(event) not in hidden
    )


def render_lifecycle_diagram(target: Path) -> Path:
    """Draw the union lifecycle graph (every profile; a guard in brackets names the profiles an
    edge exists for) into the PNG `target`."""
    plt = pyplot()
    graph = union_graph()
    column = layers(graph)
    where = positions(graph, column)
    shared = shared_events(graph)
    hidden = set(shared)
    figure, axes = plt.subplots(figsize=(22, 11))
    loops = [u for u, v in graph.edges if u == v]
    moves = [(u, v) for u, v in graph.edges if u != v]
    labelled = {e: _label(graph, *e, hidden) for e in moves}
    thin = [e for e in moves if not labelled[e]]
    back = [e for e in moves if labelled[e] and column[e[0]] >= column[e[1]]]
    forward = [e for e in moves if labelled[e] and e not in back]
    node_size = 4200
    groups = (
        (thin, "#b0b0b0", 0.05, 1.0),
        (forward, FORWARD_COLOUR, 0.08, 1.8),
        (back, BACK_COLOUR, 0.3, 1.8),
    )
    for edges, colour, rad, width in groups:
        style = f"arc3,rad={rad}"
        nx.draw_networkx_edges(
            graph,
            where,
            edgelist=edges,
            ax=axes,
            edge_color=colour,
            width=width,
            arrowsize=18,
            node_size=node_size,
            connectionstyle=style,
        )
        if colour != "#b0b0b0":
            nx.draw_networkx_edge_labels(
                graph,
                where,
                edge_labels={e: labelled[e] for e in edges},
                ax=axes,
                font_size=10,
                font_color=colour,
                connectionstyle=style,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.9, "pad": 0.6},
            )
    colours = [
        "#fde0dd" if node is Phase.harmed else "#e5f5e0" if node is INITIAL else "#deebf7" for node in graph
    ]
    nx.draw_networkx_nodes(
        graph, where, ax=axes, node_size=node_size, node_color=colours, edgecolors="#333333"
    )
    nx.draw_networkx_labels(graph, where, ax=axes, font_size=11, font_weight="bold")
    for node in loops:
        events = sorted({str(event) for event, _ in graph.edges[node, node]["labels"]})
        lines = [", ".join(events[i : i + 2]) for i in range(0, len(events), 2)]
        axes.annotate(
            "stays on: " + "\n".join(lines),
            where[node],
            xytext=(0, -40),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=8.5,
            color="#555555",
        )
    box = "\n".join(
        f"{event}: {', '.join(str(s) for s in sources)} -> {into}"
        for event, (into, sources) in shared.items()
    )
    axes.text(
        0.0,
        0.0,
        "thin grey arrows (events from many phases):\n" + box,
        transform=axes.transAxes,
        fontsize=10,
        va="bottom",
        bbox={"facecolor": "#f7f7f7", "edgecolor": "#999999"},
    )
    axes.plot([], [], color=FORWARD_COLOUR, lw=2, label="transition (forward)")
    axes.plot(
        [], [], color=BACK_COLOUR, lw=2, label="transition back (restore done, restoration refused, ...)"
    )
    axes.plot([], [], color="#b0b0b0", lw=1, label="shared event (see box)")
    axes.legend(loc="upper left", fontsize=11)
    axes.set_title(
        f"Claim lifecycle drawn from lifecycle.TRANSITIONS: {len(graph)} phases, {len(moves)} transitions "
        f"between phases, {len(loops)} phases with self-loops\n"
        "[guard]: only for claims whose profile is preserving / observational / offloadable / "
        "one_key / two_key",
        fontsize=14,
    )
    axes.margins(0.08)
    axes.axis("off")
    figure.tight_layout()
    return save(figure, target)
