"""Accepted traces as anchored evidence items, so a descriptor can cite a checked run; and
the re-check of a cited trace (`read_trace`), which finds what the export would say.

Only an `accepted` verdict exports anything. Each obligation the trace evidences gets one
`EvidenceItem` (status supported, scope conformance_trace) whose trace anchor is filled
truthfully: the file's path and sha256, the claim ids of the behaviour that evidences it, an
event range that spans every event naming those claims (from the first, their submission, to
the last, their outcome included: the model records where a behaviour was first shown, and a
claim listed after the first has its own lines), how order was established and how events are
tied to claims. Which obligations a trace evidences is derived from what it exercised
(`TraceWitness`) through the table `WITNESS_OBLIGATIONS` in `kvclaims.spec.tables`, limited by
the depth of the abstraction that produced its steps; a trace never evidences more than it did.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kvclaims.refinement.abstractions.kvclaims_v1 import FORMAT as KVCLAIMS_V1
from kvclaims.refinement.api import check_trace
from kvclaims.refinement.decoding import EVENT_STRUCTS
from kvclaims.refinement.reader import TraceInputError, TraceStream
from kvclaims.refinement.sources import AUTO, open_source
from kvclaims.refinement.verdict import Outcome, TraceVerdict, Witness
from kvclaims.spec.errors import InputError
from kvclaims.spec.evidence import Anchor, EvidenceItem, TraceReading
from kvclaims.spec.tables import DEPTH_SUPPLIES, KV_EVENT_FORMATS, WITNESS_OBLIGATIONS
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    AnchorKind,
    EvidenceScope,
    EvidenceStatus,
    Obligation,
    ProtectionMode,
)

ABSTRACTION_DEPTH: dict[str, AdapterDepth] = {name: AdapterDepth.telemetry_join for name in KV_EVENT_FORMATS}
"""Formats whose abstraction is itself an adapter of limited depth: a join of vLLM's block
events with an external registry is a telemetry join, so its traces evidence only what that
depth may supply (the registry, not the runtime, accepted the claims: no A, no L); SGLang's and
TensorRT-LLM's block events likewise. Every other
format is the runtime's own claim telemetry (native or backend patch): no depth limit."""

ORDERING: dict[str, str] = {
    "kvclaims-v1": "seq strictly increasing, checked event by event by kvclaims refinement",
    "blockpool": "file line order (the BlockPool lane has no sequence numbers), replayed in order",
    "offload-hook": "event_sequence strictly increasing, checked by kvclaims refinement",
    "pydev-connector": "event_sequence strictly increasing, checked by kvclaims refinement",
    "vllm-kv-events": "publisher batch seq contiguous and strictly increasing (gaps fail closed)",
    "sglang-kv-events": "publisher batch seq contiguous and strictly increasing (gaps fail closed)",
    "trtllm-kv-events": "event_id contiguous and strictly increasing (gaps fail closed)",
}
"""How each format's event order is established."""

CLAIM_SCOPE: dict[str, str] = {
    name: "blocks joined to pre-registered claims of the external claim registry by token "
    "map and parent hash; all nine telemetry_join preconditions held"
    for name in KV_EVENT_FORMATS
}
_DEFAULT_SCOPE = (
    "claim_id on every claim event, each resolved to a claim accepted earlier; blocking_claim_ids "
    "and restoration outcomes checked against the claim and request they name"
)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


EVENT_RANGE = (
    "event_range is [first line, last line] of every event naming the listed claims, their outcomes included"
)
"""What an exported anchor's event range spans (said in its `ordering`)."""


def _by_obligation(verdict: TraceVerdict) -> dict[Obligation, list[Witness]]:
    """The witnesses of each obligation the verdict's trace evidences, within its format's depth."""
    allowed = DEPTH_SUPPLIES[ABSTRACTION_DEPTH.get(verdict.format, AdapterDepth.none)]
    found: dict[Obligation, list[Witness]] = {}
    for witness in verdict.witnesses:
        for obligation in WITNESS_OBLIGATIONS[witness.kind] & allowed:
            found.setdefault(obligation, []).append(witness)
    return {o: found[o] for o in Obligation if o in found}


def evidence_items(
    verdict: TraceVerdict, trace: Path, *, relative_to: Path, registry: Path | None = None
) -> list[EvidenceItem]:
    """The evidence an accepted trace supplies, one item per evidenced obligation, its anchor
    path relative to `relative_to` (the directory the evidence file is written to). A KV-event
    capture's anchor also says how it is re-checked: its format and the claim `registry` it was
    joined with (relative like the path, with its digest), which it needs: the claims' events
    are read again to span them. Raises `ValueError` for a verdict that is not accepted, an
    open kvclaims-v1 prefix (no `trace_closed`), or a capture without its registry."""
    if verdict.outcome is not Outcome.accepted:
        raise ValueError(f"only an accepted trace is evidence; this one is {verdict.outcome}")
    if verdict.format in KV_EVENT_FORMATS and registry is None:
        raise ValueError(f"a {verdict.format} capture's evidence needs the claim registry it was joined with")
    digest = file_sha256(trace)
    path = os.path.relpath(trace.resolve(), relative_to.resolve())
    recheck = _recheck(verdict.format, registry, relative_to)
    by_obligation = _by_obligation(verdict)
    spans, _ = claim_spans(trace, verdict.format, registry, _claims_of(by_obligation))
    items = []
    for obligation, witnesses in by_obligation.items():
        claim_ids = sorted({c for w in witnesses for c in w.claim_ids})
        lines = [line for w in witnesses for line in w.lines]
        lines += [line for c in claim_ids if c in spans for line in spans[c]]
        kinds = ", ".join(sorted({w.kind.value for w in witnesses}))
        anchor = Anchor(
            kind=AnchorKind.trace,
            path=path,
            sha256=digest,
            event_range=(min(lines), max(lines)) if lines else None,
            claim_ids=claim_ids,
            ordering=ORDERING.get(verdict.format, ORDERING["kvclaims-v1"]) + "; " + EVENT_RANGE,
            claim_scope=CLAIM_SCOPE.get(verdict.format, _DEFAULT_SCOPE),
            note=f"kvclaims check accepted this {verdict.format} trace ({verdict.events} events); "
            f"witnessed: {kinds}",
            **recheck,
        )
        items.append(
            EvidenceItem(
                obligation=obligation,
                status=EvidenceStatus.supported,
                scope=EvidenceScope.conformance_trace,
                anchor=anchor,
                note=f"refinement-accepted trace exercising {kinds}",
            )
        )
    return items


def _recheck(fmt: str, registry: Path | None, relative_to: Path) -> dict[str, str]:
    """The anchor fields that say how a KV-event capture is re-checked (none for other formats,
    whose format is detected and who need no registry)."""
    if fmt not in KV_EVENT_FORMATS or registry is None:
        return {}
    return {
        "format": fmt,
        "registry": os.path.relpath(registry.resolve(), relative_to.resolve()),
        "registry_sha256": file_sha256(registry),
    }


_CLOSED = EVENT_STRUCTS["trace_closed"]


def _claims_of(by_obligation: dict[Obligation, list[Witness]]) -> frozenset[str]:
    return frozenset(c for witnesses in by_obligation.values() for w in witnesses for c in w.claim_ids)


class _ClaimLines:
    """A sink that notes, for the claims it is asked about only (so what it keeps is bounded by
    the witnesses, not by the trace), the first and last line of the steps that name each (as
    `claim_id` or among `blocking_claim_ids`) and the modes each was submitted or accepted with.
    Steps without a line (a registry's claims, an abstraction's end) have no line to span."""

    def __init__(self, claims: frozenset[str]) -> None:
        self.claims = claims
        self.spans: dict[str, tuple[int, int]] = {}
        self.modes: dict[str, set[ProtectionMode]] = {}
        self.closed = False
        """Whether the writer's `trace_closed` was read (kvclaims-v1's end)."""

    def feed(self, event: Any, line: int, index: int) -> None:
        self._note(event, line)

    def feed_run(self, events: list[Any], line: int, index: int) -> None:
        for offset, event in enumerate(events):
            self._note(event, line + offset)

    def unknown(self, name: str, line: int, index: int) -> None:
        """An unknown event names no claim the model judged (the trace was accepted)."""

    def _note(self, event: Any, line: int) -> None:
        if type(event) is _CLOSED:
            self.closed = True
        named = getattr(event, "claim_id", None)
        for claim in (named, *(getattr(event, "blocking_claim_ids", None) or ())):
            if claim not in self.claims:
                continue
            if line:
                first, last = self.spans.get(claim, (line, line))
                self.spans[claim] = (min(first, line), max(last, line))
            mode = getattr(event, "mode", None)
            if claim == named and mode is not None:
                self.modes.setdefault(claim, set()).add(ProtectionMode(mode))


def claim_spans(
    trace: Path, fmt: str, registry: Path | None, claims: Iterable[str]
) -> tuple[dict[str, tuple[int, int]], dict[str, frozenset[ProtectionMode]]]:
    """For each of `claims`: the [first, last] line of the events of `trace` (read in `fmt`,
    a concrete format) that name it, and the modes it was submitted or accepted with. Reads
    the trace once more without judging it: call it for a trace refinement accepted. Raises
    `ValueError` for a kvclaims-v1 trace its writer did not close (judged as an open prefix)."""
    recorder = _ClaimLines(frozenset(claims))
    with TraceStream(trace.open("rb")) as stream:
        open_source(stream, fmt, registry=registry).drive(recorder)
    if fmt == KVCLAIMS_V1 and not recorder.closed:
        raise ValueError(f"{trace} does not end with trace_closed: an open prefix is evidence of nothing")
    return recorder.spans, {c: frozenset(m) for c, m in recorder.modes.items()}


def read_trace(trace: Path, *, format: str = AUTO, registry: Path | None = None) -> TraceReading:
    """Re-check a cited trace: refinement's verdict on it (closed traces only: an open one is
    inconclusive), and for an accepted one what its evidence export shows, the claims each
    obligation is witnessed for, their spans and their modes (`TraceReading`). Never raises for
    a bad file or registry: that is a reading which evidences nothing, with the reason."""
    try:
        verdict = check_trace(trace, format=format, registry=registry)
        if verdict.outcome is not Outcome.accepted:
            reason = verdict.reason.replace(str(trace), trace.name)  # readings are cached: no machine paths
            return TraceReading(str(verdict.outcome), reason, verdict.format, {}, {}, {})
        by_obligation = _by_obligation(verdict)
        spans, modes = claim_spans(trace, verdict.format, registry, _claims_of(by_obligation))
    except (InputError, ValueError, OSError, TraceInputError) as error:
        reason = str(error).replace(str(trace), trace.name)
        return TraceReading("unreadable", f"could not be re-checked: {reason}", format, {}, {}, {})
    witnessed = {o: frozenset(c for w in ws for c in w.claim_ids) for o, ws in by_obligation.items()}
    return TraceReading(str(verdict.outcome), verdict.reason, verdict.format, witnessed, spans, modes)
