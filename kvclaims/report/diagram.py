"""The claim lifecycle state diagrams, one small diagram per claim profile, drawn from the
machine itself.

Each graph is `kvclaims.statemachine.graph.lifecycle_graph(profile)` (derived from
`lifecycle.TRANSITIONS`; no transition is written here), cut to the phases the profile can
reach; profiles with the same graph share one diagram. Phases are laid out left to right by
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
from kvclaims.statemachine.graph import lifecycle_graph, profile_name, reachable_phases
from kvclaims.statemachine.lifecycle import ALL_PROFILES, INITIAL, ClaimProfile, Phase

# Okabe-Ito colours (safe for colour-blind readers)
HARM_COLOUR = "#D55E00"
FORWARD_COLOUR = "#0072B2"
BACK_COLOUR = "#CC79A7"
SHARED_COLOUR = "#999999"
LABEL_NUDGES = 60
"""How many places (alternating above and below, further each time) a label may try before it
is left where it overlaps least."""


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
            for event in edge_events(graph, source, target):
                into.setdefault((str(event), target), []).append(source)
    return {event: (target, found) for (event, target), found in into.items() if len(found) >= sources}


def edge_events(graph: nx.DiGraph, source: Phase, target: Phase) -> list[str]:
    """The event names on an edge of a profile graph (`events`) or the union graph (`labels`)."""
    data = graph.edges[source, target]
    if "events" in data:
        return [str(e) for e in data["events"]]
    return [str(event) for event, _ in data["labels"]]


def profile_graph(profile: ClaimProfile) -> nx.DiGraph:
    """The lifecycle graph of `profile`, cut to the phases it can reach."""
    graph = lifecycle_graph(profile)
    graph.remove_nodes_from([p for p in list(graph) if p not in reachable_phases(profile)])
    return graph


def profile_groups() -> list[tuple[list[str], nx.DiGraph]]:
    """(profile names, graph) with the profiles that have exactly the same graph together."""
    groups: dict[frozenset, tuple[list[str], nx.DiGraph]] = {}
    for profile in ALL_PROFILES:
        graph = profile_graph(profile)
        key = frozenset((u, v, tuple(edge_events(graph, u, v))) for u, v in graph.edges)
        groups.setdefault(key, ([], graph))[0].append(profile_name(profile))
    return list(groups.values())


def render_lifecycle_diagrams(folder: Path) -> list[Path]:
    """One PNG per group of `profile_groups()` in `folder`, named after its first profile."""
    written = []
    for names, graph in profile_groups():
        figure = draw_profile(graph, names)
        slug = names[0].replace(", ", "-")
        written.append(save(figure, folder / f"lifecycle-{slug}.png"))
    return written


def draw_profile(graph: nx.DiGraph, names: list[str]) -> object:
    """The figure of one profile's lifecycle: phases as boxes left to right in the order a
    claim lives them, each transition an arrow with its events, events that many phases share
    (release, harm) as thin grey arrows listed once, and self-loops listed under their phase.
    Labels that would overlap are moved apart (checked with matplotlib's own text extents)."""
    plt = pyplot()
    column = layers(graph)
    where = positions(graph, column)
    shared = shared_events(graph)
    columns = max(column.values()) + 1
    rows = max(sum(1 for p in graph if column[p] == c) for c in range(columns))
    figure, axes = plt.subplots(figsize=(2.6 * columns + 1.5, 1.9 * rows + 3.0))
    boxes = {}
    for phase, (x, y) in where.items():
        colour = "#FBE3D6" if phase is Phase.harmed else "#E3F1DC" if phase is INITIAL else "#DCEAF7"
        boxes[phase] = axes.text(
            x,
            y,
            str(phase),
            ha="center",
            va="center",
            fontsize=11,
            fontweight="bold",
            zorder=3,
            bbox={"boxstyle": "round,pad=0.5", "facecolor": colour, "edgecolor": "#333333"},
        )
    labels = []
    for source, target in graph.edges:
        if source == target:
            continue
        events = [e for e in edge_events(graph, source, target) if e not in shared]
        back = column[source] >= column[target]
        span = abs(column[target] - column[source])
        # long arrows bend further, so they pass beside the phases between their ends
        rad = 0.35 if back else 0.12 if span <= 1 else 0.22 if span == 2 else 0.3
        colour = SHARED_COLOUR if not events else BACK_COLOUR if back else FORWARD_COLOUR
        axes.annotate(
            "",
            xy=where[target],
            xytext=where[source],
            zorder=1,
            arrowprops={
                "arrowstyle": "-|>",
                "connectionstyle": f"arc3,rad={rad}",
                "mutation_scale": 16,
                "color": colour,
                "lw": 1.0 if not events else 1.6,
                "patchA": boxes[source].get_bbox_patch(),
                "patchB": boxes[target].get_bbox_patch(),
            },
        )
        if events:
            label = axes.text(
                0,
                0,
                "\n".join(events),
                ha="center",
                va="center",
                fontsize=9,
                color=colour,
                zorder=4,
                bbox={"facecolor": "white", "edgecolor": colour, "alpha": 0.95, "pad": 2.0},
            )
            labels.append((label, _along_arc(where[source], where[target], rad)))
    notes = []
    for phase in graph:
        if graph.has_edge(phase, phase):
            stays = ", ".join(edge_events(graph, phase, phase))
            notes.append(f"{phase} stays {phase} on: {stays}")
    shared_lines = [
        f"{event}: from {', '.join(str(s) for s in sources)} to {into}"
        for event, (into, sources) in shared.items()
    ]
    note = "\n".join(
        (["grey arrows (events many phases share):", *shared_lines, ""] if shared_lines else [])
        + ["events that keep the phase:", *notes]
    )
    xs = [x for x, _ in where.values()]
    ys = [y for _, y in where.values()]
    axes.set_xlim(min(xs) - 1.8, max(xs) + 1.8)
    axes.set_ylim(min(ys) - 2.2, max(ys) + 1.6)
    axes.axis("off")
    backwards = any(column[u] >= column[v] for u, v in graph.edges if u != v)
    axes.set_title(
        f"Claim lifecycle: {' / '.join(names)} claims\n"
        + ("blue: forward; pink: back to an earlier phase" if backwards else "arrows: forward"),
        fontsize=12,
    )
    footnote = figure.text(0.01, 0.01, note, fontsize=8, va="bottom", ha="left", color="#444444", wrap=True)
    figure.tight_layout(rect=(0, 0.02 + 0.022 * note.count("\n"), 1, 1))
    separate(figure, list(boxes.values()), labels)
    _freeze_wrap(footnote)
    return figure


def _freeze_wrap(text: object) -> None:
    """Keep the line breaks matplotlib chose for a wrapped `text` at its last draw: it measures
    the text word by word again at every draw (twice more in a tight `savefig`), the largest
    share of drawing a diagram; the saved picture is the same byte for byte."""
    text.set_text(text._get_wrapped_text())  # type: ignore[attr-defined]
    text.set_wrap(False)  # type: ignore[attr-defined]


def text_box(figure: object, text: object) -> object:
    """A text's box on the canvas (its background patch when it has one), in pixels."""
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    patch = text.get_bbox_patch()  # type: ignore[attr-defined]
    if patch is not None:
        text.update_bbox_position_size(renderer)  # type: ignore[attr-defined] # else stale until drawn
    return patch.get_window_extent(renderer) if patch is not None else text.get_window_extent(renderer)  # type: ignore[attr-defined]


ALONG = (0.5, 0.4, 0.6, 0.3, 0.7, 0.22, 0.78, 0.15, 0.85)
"""Where on its arrow a label may sit (fraction of the way), in the order tried."""
SIDEWAYS = (0.0, 0.35, -0.35, 0.7, -0.7, 1.05, -1.05)
"""Vertical offsets (data units) tried at each place along the arrow."""


def _along_arc(start: tuple[float, float], end: tuple[float, float], rad: float) -> list[tuple[float, float]]:
    """Candidate label places on matplotlib's arc3 curve from `start` to `end` (a quadratic
    Bezier whose control point is the chord's midpoint pushed sideways by rad x chord)."""
    (x1, y1), (x2, y2) = start, end
    cx, cy = (x1 + x2) / 2 + rad * (y2 - y1), (y1 + y2) / 2 - rad * (x2 - x1)
    places = []
    for t in ALONG:
        x = (1 - t) ** 2 * x1 + 2 * (1 - t) * t * cx + t**2 * x2
        y = (1 - t) ** 2 * y1 + 2 * (1 - t) * t * cy + t**2 * y2
        places += [(x, y + dy) for dy in SIDEWAYS]
    return places


def separate(figure: object, fixed: list, movable: list) -> None:
    """Put each label of `movable` ((text, candidate places), in order) at the first candidate
    where its box overlaps no box of `fixed` nor of a label placed before it; when every
    candidate overlaps, at the one overlapping least."""
    figure.draw_without_rendering()  # type: ignore[attr-defined] # lays text out; extents need no pixels
    placed = [text_box(figure, t) for t in fixed]
    for label, places in movable:
        best, best_overlap = places[0], float("inf")
        for place in places:
            label.set_position(place)
            box = text_box(figure, label)
            overlap = sum(_area(box, other) for other in placed)
            if overlap < best_overlap:
                best, best_overlap = place, overlap
            if overlap == 0:
                break
        label.set_position(best)
        placed.append(text_box(figure, label))


def _area(a: object, b: object) -> float:
    """The area two pixel boxes share."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)  # type: ignore[attr-defined]
    height = min(a.y1, b.y1) - max(a.y0, b.y0)  # type: ignore[attr-defined]
    return max(0.0, width) * max(0.0, height)
