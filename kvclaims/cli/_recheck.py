"""Re-check every local trace the loaded descriptors cite, before they are lowered (`kvclaims
lower`, `matrix`, `report`): each reading (`kvclaims.refinement.evidence.read_trace`) is
attached to its anchor, and the lowering counts the anchor only for what the trace shows.

A cited trace is a local trace anchor's file, or a local artifact anchor's file when its item's
scope says a trace shows it (`conformance_trace`, `litmus_trace`: a run's trace by another
name is re-checked as one). It is re-checked only when its anchor otherwise counts (its file
exists and its digest, when given, matches: a tampered trace is refused by its digest before
anything reads it).
Readings are cached by what decides them: the trace's sha256, the format it is read in, the
claim registry's sha256, and the digest of the code that judges it (refinement, the state
machine, the spec). In memory for the process, and as JSON in the user's cache directory
(`kvclaims.userdirs.cache_directory() / "trace-readings"`, never in the checkout); an entry
that cannot be read or parsed is a miss, and a cache that cannot be written is skipped.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from kvclaims import userdirs
from kvclaims.cli._output import note_skipped_descriptor
from kvclaims.refinement.evidence import file_sha256, read_trace
from kvclaims.refinement.sources import AUTO
from kvclaims.spec.descriptor import Descriptor, load_descriptors
from kvclaims.spec.evidence import Anchor, TraceReading
from kvclaims.spec.vocabulary import AnchorKind, EvidenceScope

_FORMAT = "kvclaims-trace-reading/1"
_DECIDING_PACKAGES = ("refinement", "statemachine", "spec")

TRACE_SCOPES = frozenset({EvidenceScope.conformance_trace, EvidenceScope.litmus_trace})
"""Scopes whose evidence is a run's trace, whatever its anchor's kind."""

_READINGS: dict[str, TraceReading] = {}
"""This process's readings, by cache key."""


def cache_directory() -> Path:
    return userdirs.cache_directory() / "trace-readings"


@functools.cache
def code_digest() -> str:
    """The digest of every module that can change a reading."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(_FORMAT.encode())
    for package in _DECIDING_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(f"\0{path.relative_to(root)}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def load_rechecked(targets: Iterable[str | Path]) -> list[tuple[Path, Descriptor]]:
    """`load_descriptors(targets)` as the commands load them, each cited trace re-checked."""
    loaded = load_descriptors(targets, on_skip=note_skipped_descriptor)
    recheck_cited_traces(descriptor for _, descriptor in loaded)
    return loaded


def recheck_cited_traces(descriptors: Iterable[Descriptor]) -> None:
    """Attach a reading to every cited trace's anchor of `descriptors` (see the module docstring)."""
    for descriptor in descriptors:
        for anchor in _cited_traces(descriptor):
            anchor.attach_reading(_reading(anchor))


def _cited_traces(descriptor: Descriptor) -> Iterator[Anchor]:
    listed = [
        *descriptor.native,
        *(i for a in descriptor.adapters for i in a.evidence),
        *descriptor.observations,
    ]
    for item in listed:
        anchor = item.anchor
        if anchor is None or not anchor.local or anchor.resolved is None or not anchor.counts:
            continue
        if anchor.kind is AnchorKind.trace or (
            anchor.kind is AnchorKind.artifact and item.scope in TRACE_SCOPES
        ):
            yield anchor


def _reading(anchor: Anchor) -> TraceReading:
    assert anchor.resolved is not None
    trace, registry = anchor.resolved, anchor.registry_file
    fmt = str(anchor.format) if anchor.format else AUTO
    try:
        parts = [code_digest(), file_sha256(trace), fmt, file_sha256(registry) if registry else ""]
    except OSError as error:
        return TraceReading("unreadable", f"could not be re-checked: {error}", fmt, {}, {}, {})
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    found = _READINGS.get(key) or _read(cache_directory() / f"{key}.json")
    if found is None:
        found = read_trace(trace, format=fmt, registry=registry)
        _write(cache_directory() / f"{key}.json", found)
    _READINGS[key] = found
    return found


def _read(entry: Path) -> TraceReading | None:
    try:
        document = json.loads(entry.read_text(encoding="utf-8"))
        if document.get("format") != _FORMAT:
            return None
        return TraceReading.from_json(document["reading"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write(entry: Path, reading: TraceReading) -> None:
    text = json.dumps({"format": _FORMAT, "reading": reading.to_json()})
    with contextlib.suppress(OSError):
        entry.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as sink:
            sink.write(text)
        os.replace(temporary, entry)
