"""Evidence: anchored statements that a runtime (or an adapter on it) discharges an obligation.

An evidence item counts toward a lowering only if it is `supported`, anchored, of a scope its
obligation and depth allow, and not contradicted at its depth (`kvclaims.spec.lowering`). Here
are the shapes and the one local question an item can answer by itself: is its anchor real?
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field, PrivateAttr, model_validator

from kvclaims.spec._types import (
    Identifier,
    NonBlankText,
    NonNegativeInt,
    ObligationName,
    SpecModel,
    StrictBool,
    Text,
    is_blank,
)
from kvclaims.spec.tables import OBSERVING_ANCHOR_KINDS, RUNTIME_SCOPES, TELEMETRY_JOIN_PRECONDITIONS
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    AnchorKind,
    ApproximationSignal,
    EvidenceScope,
    EvidenceStatus,
    Obligation,
    ObservationAtom,
    ProtectionMode,
    TelemetryJoinPrecondition,
    TraceFormat,
)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DIGEST_CHUNK = 1 << 20


@dataclass(frozen=True)
class TraceReading:
    """What re-checking one cited trace found (`kvclaims.refinement.evidence.read_trace`):
    refinement's `outcome` and its one-line `reason`, the `format` it was read in, and for an
    accepted trace what its evidence export shows: the claims it `witnessed` each obligation for
    (limited to what the format can show), the `spans` of those claims (the first and last line of
    the events naming each, its outcome included) and the `modes` each was submitted or accepted
    with. Plain data, so that a re-check can be cached by the trace's digest."""

    outcome: str
    reason: str
    format: str
    witnessed: Mapping[Obligation, frozenset[str]]
    spans: Mapping[str, tuple[int, int]]
    modes: Mapping[str, frozenset[ProtectionMode]]

    @property
    def accepted(self) -> bool:
        return self.outcome == "accepted"

    def to_json(self) -> dict[str, object]:
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "format": self.format,
            "witnessed": {str(o): sorted(c) for o, c in self.witnessed.items()},
            "spans": {c: list(span) for c, span in self.spans.items()},
            "modes": {c: sorted(m) for c, m in self.modes.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> TraceReading:
        """The reading `to_json` wrote; raises `KeyError`, `TypeError` or `ValueError` for
        anything else (a cache entry that is not one is read afresh, never trusted)."""
        witnessed, spans, modes = data["witnessed"], data["spans"], data["modes"]
        if not (isinstance(witnessed, dict) and isinstance(spans, dict) and isinstance(modes, dict)):
            raise TypeError("not a trace reading")
        return cls(
            outcome=str(data["outcome"]),
            reason=str(data["reason"]),
            format=str(data["format"]),
            witnessed={Obligation(o): frozenset(map(str, c)) for o, c in witnessed.items()},
            spans={str(c): (int(first), int(last)) for c, (first, last) in spans.items()},
            modes={str(c): frozenset(map(ProtectionMode, m)) for c, m in modes.items()},
        )


class Anchor(SpecModel):
    """Where evidence can be checked: public docs, source at a commit, a trace, an artifact.

    An anchor counts only with a non-empty locator (`path` or `url`) and a non-empty `note`
    (a field of characters that render as nothing is empty: whitespace, format characters such
    as zero-width spaces and tag characters, combining marks with no base, variation selectors,
    Hangul fillers and every other default-ignorable code point; `kvclaims.spec.text`).
    A trace anchor must also say how order is preserved (`ordering`) and how events are tied to
    the claim (`claim_scope`), because a trace without order or claim scope proves nothing about
    a lifecycle. A local trace or artifact anchor whose file does not exist never counts, and an
    anchor with `sha256` counts only once its file was found and matched (`verify`); until then
    it is unverified, which fails closed.

    A trace anchor may also say how its file is re-checked (`kvclaims check`): its `format`
    (absent: detected), and the claim `registry` a KV-event capture is joined with, a file next
    to the descriptor like `path`, which must exist (and match `registry_sha256` when given) for
    the anchor to count. Whoever re-checks cited traces reads them from here
    (`kvclaims.report.verdicts.anchored_checks`).

    `kvclaims lower`, `matrix` and `report` re-check every local trace a descriptor cites: its
    digest, then its refinement verdict (only an accepted trace that its writer closed counts),
    then whether its evidence export witnesses the item's obligation for the claims the anchor
    names, one of them of the mode being lowered, with `event_range` (when given) spanning every
    event naming each of those claims, its outcome included. A trace read as a KV-event capture
    shows only what a telemetry join can show, wherever the item is listed.
    """

    kind: AnchorKind = Field(description="What the anchor points at.")
    path: Text = Field("", description="A file: in `repository` at `commit`, or next to the descriptor.")
    url: Text = Field("", description="A public address; this or `path` is required.")
    repository: Text = Field("", description="The public repository `path` is in (owner/name).")
    commit: Text = Field("", description="The commit `path` is read at.")
    section: Text = Field("", description="The section of a paper or document that reports it.")
    note: Text = Field("", description="What exactly the source shows; required.")
    ordering: Text = Field("", description="Trace anchors: how event order is preserved; required.")
    claim_scope: Text = Field("", description="Trace anchors: how events are tied to the claim; required.")
    sha256: Annotated[str, Field(pattern=_SHA256.pattern)] | None = Field(
        None, description="Digest of the local file at `path`; counts only when it matches."
    )
    event_range: tuple[NonNegativeInt, NonNegativeInt] | None = Field(
        None,
        description="[first, last] line of a trace the evidence is in: spans every event naming the "
        "listed claims, their outcomes included; absent: the whole trace.",
    )
    claim_ids: list[Identifier] = Field(
        [], description="The claims of a trace the evidence is about; a cited trace must witness each."
    )
    format: TraceFormat | None = Field(
        None, description="Trace anchors: the format to re-check the trace in; absent: detected."
    )
    registry: Text = Field(
        "",
        description="Trace anchors: the claim registry a KV-event capture is checked with, a file "
        "next to the descriptor like `path`; must exist.",
    )
    registry_sha256: Annotated[str, Field(pattern=_SHA256.pattern)] | None = Field(
        None, description="Digest of the file at `registry`; counts only when it matches."
    )

    _resolved: Path | None = PrivateAttr(default=None)
    _found: bool | None = PrivateAttr(default=None)
    _digest_verified: bool | None = PrivateAttr(default=None)
    _registry_resolved: Path | None = PrivateAttr(default=None)
    _registry_found: bool | None = PrivateAttr(default=None)
    _registry_digest_verified: bool | None = PrivateAttr(default=None)
    _reading: TraceReading | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _ordered_event_range(self) -> Anchor:
        if self.event_range is not None and self.event_range[0] > self.event_range[1]:
            raise ValueError("event_range must be [first, last] with first <= last")
        return self

    @model_validator(mode="after")
    def _recheck_fields_on_traces_only(self) -> Anchor:
        named = [
            name
            for name, given in (
                ("format", self.format is not None),
                ("registry", not is_blank(self.registry)),
                ("registry_sha256", self.registry_sha256 is not None),
            )
            if given
        ]
        if named and self.kind is not AnchorKind.trace:
            raise ValueError(f"{', '.join(named)}: only a trace anchor says how its trace is re-checked")
        if self.registry_sha256 is not None and is_blank(self.registry):
            raise ValueError("registry_sha256 without registry: a digest of no file")
        return self

    @property
    def resolved(self) -> Path | None:
        """The file at `path`, resolved next to the descriptor (set by `verify`)."""
        return self._resolved

    @property
    def registry_file(self) -> Path | None:
        """The claim registry's file, resolved next to the descriptor (set by `verify`)."""
        return self._registry_resolved

    @property
    def reading(self) -> TraceReading | None:
        """What re-checking the cited trace found (set by `attach_reading`); None until then."""
        return self._reading

    def attach_reading(self, reading: TraceReading) -> None:
        """Record the re-check of this trace anchor's file (`kvclaims lower`, `matrix` and
        `report` re-check every local trace a descriptor cites); the lowering then counts the
        anchor only for what the re-checked trace shows (`kvclaims.spec.lowering`)."""
        self._reading = reading

    @property
    def local(self) -> bool:
        """Whether `path` names a file next to the descriptor (not in a remote repository)."""
        return not is_blank(self.path) and is_blank(self.repository)

    def problems(self) -> list[str]:
        """Why this anchor does not count; empty when it does."""
        found: list[str] = []
        if is_blank(self.path) and is_blank(self.url):
            found.append("anchor has neither path nor url")
        if is_blank(self.note):
            found.append("anchor has no note")
        if self.kind is AnchorKind.trace:
            if is_blank(self.ordering):
                found.append("trace anchor does not say how event order is preserved")
            if is_blank(self.claim_scope):
                found.append("trace anchor does not say how events are tied to the claim")
        checked_files = (
            (f"anchored {self.kind} file", self._resolved, self._found, self.sha256, self._digest_verified),
            (
                "the anchor's claim registry",
                self._registry_resolved,
                self._registry_found,
                self.registry_sha256,
                self._registry_digest_verified,
            ),
        )
        found += [problem for checked in checked_files if (problem := _file_problem(*checked))]
        return found

    @property
    def counts(self) -> bool:
        return not self.problems()

    def verify(self, base_dir: Path) -> None:
        """Check the file at `path` (relative to `base_dir`, the descriptor's folder): a local
        trace or artifact anchor counts only if the file exists, and an anchor with `sha256`
        only if the digest matches. A digest on a URL-only anchor stays unverified (and so does
        not count). `registry` is resolved and checked the same way."""
        if not is_blank(self.registry):
            self._registry_resolved = Path(os.path.abspath(base_dir / self.registry))
            self._registry_found = _is_file(self._registry_resolved)
            if self.registry_sha256 is not None:
                self._registry_digest_verified = _file_sha256(self._registry_resolved) == self.registry_sha256
        if is_blank(self.path):
            return
        self._resolved = Path(os.path.abspath(base_dir / self.path))
        if self.local and self.kind in OBSERVING_ANCHOR_KINDS:
            self._found = _is_file(self._resolved)
        if self.sha256 is not None:
            self._digest_verified = _file_sha256(self._resolved) == self.sha256


def _file_problem(
    what: str, resolved: Path | None, exists: bool | None, sha256: str | None, matched: bool | None
) -> str | None:
    """Why a file an anchor names does not count (None: it does): it is missing, or its digest
    was given and is unverified or does not match."""
    if exists is False:
        return f"{what} does not exist: {resolved}"
    if sha256 is not None and matched is not True:
        unverified = f"{what}: digest not verified"
        return unverified if matched is None else f"sha256 of {what} {resolved} does not match"
    return None


def fits_scope(anchor: Anchor, scope: EvidenceScope) -> bool:
    """Whether `anchor` can show evidence of `scope`: runtime evidence (observed, or generated
    by a run) is anchored where the run shows it, a trace or an artifact."""
    return scope not in RUNTIME_SCOPES or anchor.kind in OBSERVING_ANCHOR_KINDS


def _anchor_fits_scope(anchor: Anchor | None, scope: EvidenceScope) -> None:
    if anchor is not None and not fits_scope(anchor, scope):
        raise ValueError(
            f"scope {scope} is what a run showed, so it needs a trace or artifact anchor; "
            f"a {anchor.kind} anchor shows what the code could do, not what it did"
        )


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name no file system accepts (a NUL byte, too long)
        return False


def _file_sha256(path: Path) -> str | None:
    try:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(_DIGEST_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()
    except (OSError, ValueError):
        return None


class EvidenceItem(SpecModel):
    """One statement about one obligation. Its depth is the depth of where it is listed:
    `native` items are depth `none`, adapter items have their adapter's depth. Evidence of a
    scope a run produces (`litmus_trace`, `conformance_trace`, `controlled_pressure`,
    `failure_injection`, `artifact_generated`) must be anchored by a trace or an artifact: a docs
    or source anchor is invalid there, so neither ever evidences an enforcement, a pressure
    observation or a backend patch (whose items must be of such a scope)."""

    obligation: ObligationName = Field(
        description="The obligation the item is about (legacy `active_refusal_or_defer` is read as "
        "`explicit_conflict_action`)."
    )
    status: EvidenceStatus = Field(description="What the evidence says; only `supported` can count.")
    scope: EvidenceScope = Field(description="How the evidence was obtained.")
    anchor: Anchor | None = Field(None, description="Where it can be checked; unanchored items never count.")
    note: Text = ""

    @model_validator(mode="after")
    def _anchor_shows_the_scope(self) -> EvidenceItem:
        _anchor_fits_scope(self.anchor, self.scope)
        return self


class Observation(SpecModel):
    """An observed behaviour atom (e.g. a pressure control), needed by some modes besides
    obligations. Counts only anchored and observed (never from docs); an observed scope needs a
    trace or artifact anchor."""

    atom: ObservationAtom = Field(description="The behaviour observed.")
    scope: EvidenceScope = Field(description="How it was observed; docs never count.")
    anchor: Anchor | None = Field(None, description="Where it can be checked; required to count.")
    note: Text = ""

    @model_validator(mode="after")
    def _anchor_shows_the_scope(self) -> Observation:
        _anchor_fits_scope(self.anchor, self.scope)
        return self


class Adapter(SpecModel):
    """Code outside the backend that supplies obligations at a depth, and is trusted for them.

    A telemetry_join adapter supplies nothing unless all nine preconditions are true; a
    precondition that is absent is false.
    """

    name: Identifier = Field(description="The adapter's name, unique in the descriptor.")
    depth: AdapterDepth = Field(description="How deep into the runtime the adapter reaches; not none.")
    preconditions: dict[TelemetryJoinPrecondition, StrictBool] = Field(
        {}, description="Telemetry-join preconditions asserted true; an absent one is false."
    )
    evidence: list[EvidenceItem] = Field([], description="What the adapter supplies, at its depth.")
    trust_boundary: Text = Field("", description="What the adapter is trusted for.")

    @model_validator(mode="after")
    def _adapter_has_a_depth(self) -> Adapter:
        if self.depth is AdapterDepth.none:
            raise ValueError("an adapter's depth cannot be 'none'; native evidence goes under 'native'")
        return self

    def missing_preconditions(self) -> list[TelemetryJoinPrecondition]:
        """The required preconditions (the table's) that this adapter does not assert true."""
        return [
            p
            for p in TelemetryJoinPrecondition
            if p in TELEMETRY_JOIN_PRECONDITIONS and not self.preconditions.get(p, False)
        ]


class ForbiddenLowering(SpecModel):
    """A runtime-specific mapping that would misrepresent the contract (curated finding)."""

    mode: ProtectionMode = Field(description="The mode the mapping would claim.")
    via: ApproximationSignal = Field(description="The primitive it would use; must be listed as present.")
    reason: NonBlankText = Field(description="Why it misrepresents the contract.")


class LoweringRow(SpecModel):
    """One (mode, depth) question to ask of a descriptor.

    `inferred_from` records feature-table inferences ("obligation X comes from primitive Y")
    so that they can be refused explicitly: an inference never supplies an obligation, and some
    are misattributions (rejected) or category errors (invalid); see `INFERENCE_VERDICTS`.
    """

    mode: ProtectionMode = Field(description="The mode asked about.")
    depth: AdapterDepth = Field(description="The deepest adapter depth allowed to supply evidence.")
    inferred_from: dict[ObligationName, ApproximationSignal] = Field(
        {}, description="Feature-table inferences to refuse explicitly; never supply an obligation."
    )
