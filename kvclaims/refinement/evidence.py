"""Accepted traces as anchored evidence items, so a descriptor can cite a checked run.

Only an `accepted` verdict exports anything. Each obligation the trace evidences gets one
`EvidenceItem` (status supported, scope conformance_trace) whose trace anchor is filled
truthfully: the file's path and sha256, the event range and claim ids of the behaviour that
evidences it, how order was established and how events are tied to claims. Which obligations a
trace evidences is derived from what it exercised (`TraceWitness`) through the table
`WITNESS_OBLIGATIONS` in `kvclaims.spec.tables`, limited by the depth of the abstraction that
produced its steps; a trace never evidences more than it did.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kvclaims.refinement.verdict import Outcome, TraceVerdict
from kvclaims.spec.evidence import Anchor, EvidenceItem
from kvclaims.spec.tables import DEPTH_SUPPLIES, KV_EVENT_FORMATS, WITNESS_OBLIGATIONS
from kvclaims.spec.vocabulary import AdapterDepth, AnchorKind, EvidenceScope, EvidenceStatus, Obligation

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


def evidence_items(
    verdict: TraceVerdict, trace: Path, *, relative_to: Path, registry: Path | None = None
) -> list[EvidenceItem]:
    """The evidence an accepted trace supplies, one item per evidenced obligation, its anchor
    path relative to `relative_to` (the directory the evidence file is written to). A KV-event
    capture's anchor also says how it is re-checked: its format and the claim `registry` it was
    joined with (relative like the path, with its digest). Raises `ValueError` for a verdict
    that is not accepted."""
    if verdict.outcome is not Outcome.accepted:
        raise ValueError(f"only an accepted trace is evidence; this one is {verdict.outcome}")
    digest = file_sha256(trace)
    path = os.path.relpath(trace.resolve(), relative_to.resolve())
    recheck = _recheck(verdict.format, registry, relative_to)
    allowed = DEPTH_SUPPLIES[ABSTRACTION_DEPTH.get(verdict.format, AdapterDepth.none)]
    by_obligation: dict[Obligation, list] = {}
    for witness in verdict.witnesses:
        for obligation in WITNESS_OBLIGATIONS[witness.kind] & allowed:
            by_obligation.setdefault(obligation, []).append(witness)
    items = []
    for obligation in Obligation:
        witnesses = by_obligation.get(obligation)
        if not witnesses:
            continue
        lines = [line for w in witnesses for line in w.lines]
        claim_ids = sorted({c for w in witnesses for c in w.claim_ids})
        kinds = ", ".join(sorted({w.kind.value for w in witnesses}))
        anchor = Anchor(
            kind=AnchorKind.trace,
            path=path,
            sha256=digest,
            event_range=(min(lines), max(lines)) if lines else None,
            claim_ids=claim_ids,
            ordering=ORDERING.get(verdict.format, ORDERING["kvclaims-v1"])
            + "; event_range is [first line, last line] of the witnessing events",
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
