"""A verdict as plain text: what `kvclaims check` prints for one trace and what `assert_refines`
puts in its AssertionError, from one function so the two never drift apart.

For a rejection the text names the rule, the offending event (1-based event number and line),
the abstract state of its subject before it, what the model allowed there instead, the
surrounding lines of a text trace, and the lines of the minimal prefix that is rejected on its
own, in trace order (in both, the offending line is marked `>`).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import IO

from kvclaims.refinement.verdict import Counterexample, TraceVerdict

CONTEXT_LINES = 2
"""Lines shown on each side of the offending event."""

LINE_LIMIT = 160
"""Surrounding lines longer than this are shortened."""

OFFENDING_MARKER = ">"


def verdict_lines(verdict: TraceVerdict, *, source: str | Path | bytes | None = None) -> list[str]:
    """The verdict as lines of plain text; the first line starts with the outcome's name.

    `source` is where the surrounding events are read from: the trace's bytes, or a path
    (default: `verdict.path`, when that is a file). Context is shown only for text traces."""
    lines = [
        f"{verdict.outcome.value} {verdict.path} "
        f"({verdict.format}, {verdict.events} events, {verdict.steps} model steps)",
        f"  {verdict.reason}",
    ]
    c = verdict.counterexample
    if c is not None:
        lines.append(f"  rule: {c.rule}   about: {c.subject}   {_position(c)}")
        lines.append(f"  {c.subject} before it: {c.state_before}")
        lines.append(
            f"  the model allowed instead: {', '.join(c.allowed) or '(nothing: a data check failed)'}"
        )
        context = surrounding_lines(_opener(verdict, source), c.line)
        if context:
            lines.append("  surrounding events:")
            lines.extend(_numbered(number, text, number == c.line) for number, text in context)
        lines.extend(prefix_lines(c))
    lines.extend(f"  note: {note}" for note in verdict.notes)
    if verdict.witnesses:
        lines.append("  exercised: " + ", ".join(w.kind.value for w in verdict.witnesses))
    return lines


def prefix_lines(c: Counterexample) -> list[str]:
    """The counterexample's minimal prefix as lines (none when it has none)."""
    if not c.minimal_prefix:
        return []
    return [
        "  the lines that show the violation (rejected on their own, by the same rule):",
        *(_numbered(event.line, event.summary, event.line == c.line) for event in c.minimal_prefix),
    ]


def _position(c: Counterexample) -> str:
    """Where the offending event is, 1-based like the line numbers beside it."""
    return f"event {c.event_index + 1} (line {c.line})" if c.event_index >= 0 else "at the end of the trace"


def _numbered(number: int, text: str, offending: bool) -> str:
    marker = OFFENDING_MARKER if offending else " "
    return f"  {marker} {number:>6} | {text}"


def render_verdict(verdict: TraceVerdict, *, source: str | Path | bytes | None = None) -> str:
    """`verdict_lines` joined into one text (no trailing newline)."""
    return "\n".join(verdict_lines(verdict, source=source))


Opener = Callable[[], IO[bytes]]


def _opener(verdict: TraceVerdict, source: str | Path | bytes | None) -> Opener | None:
    if isinstance(source, bytes):
        return lambda: io.BytesIO(source)
    path = Path(source if source is not None else verdict.path)
    return (lambda: path.open("rb")) if path.is_file() else None


def surrounding_lines(opener: Opener | None, line: int) -> list[tuple[int, str]]:
    """Lines `line - CONTEXT_LINES .. line + CONTEXT_LINES` of a text trace, shortened; none
    for a binary capture (its minimal prefix shows the steps instead) or an unreadable one."""
    if opener is None or line <= 0:
        return []
    found = []
    try:
        with opener() as handle:
            for number, raw in enumerate(handle, start=1):
                if number > line + CONTEXT_LINES:
                    break
                if number >= line - CONTEXT_LINES:
                    text = raw[: LINE_LIMIT * 4].decode("utf-8", errors="replace").rstrip("\n")
                    found.append((number, text if len(text) <= LINE_LIMIT else text[: LINE_LIMIT - 1] + "…"))
    except OSError:
        return []
    if not all(text.lstrip().startswith("{") for _, text in found):
        return []
    return found
