"""The model's records and fixed tables: claim and request records, the tabulated lifecycle and request
machines, the phase sets the sub-models judge by, and the violation types.

No rule lives here; every sub-model reads these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from kvclaims.spec.vocabulary import (
    ConformanceRule,
    ProtectionMode,
    RestorationOutcome,
)
from kvclaims.statemachine import lifecycle
from kvclaims.statemachine.lifecycle import (
    ALL_PROFILES,
    ENDED,
    IN_PLACE,
    INITIAL,
    RETIRED,
    ClaimProfile,
    Event,
    Phase,
)
from kvclaims.statemachine.requests import (
    REQUEST_INITIAL,
    RequestEvent,
    RequestPhase,
    RequestViolation,
    request_step,
)

R = ConformanceRule

END_OF_TRACE = "<end of trace>"
"""The event name a violation found by `finish` quotes."""


@dataclass(frozen=True)
class Violation:
    """A step the model does not allow: the rule, why, the abstract state before it and what
    the model allowed instead. `ids` are the claim and request ids it concerns; `at` is the
    position of the offending event as the caller passed it (0 for end-of-trace findings
    without one)."""

    rule: ConformanceRule
    message: str
    subject: str
    state: str
    allowed: tuple[str, ...]
    ids: frozenset[str]
    at: int
    event: str


@dataclass(frozen=True)
class Undecided:
    """Something the model could not decide (the verdict can be at best inconclusive)."""

    message: str
    at: int


class Header(Protocol):
    usable_blocks: int | None
    block_size: int | None


class OutOfBudget(Exception):
    """A resource limit of the model, not a verdict: the per-position maps of the live claims
    would span more than `max_prefix_positions` blocks (a footprint is a number in the trace, so
    the model counts the maps it allocates instead of trusting it), or exact counts of shared
    blocks would cost more than their budget (`SystemState._count_scan`). A driver reports this
    as undecidable (inconclusive), never as a pass or a violation. `at` is the position of the
    event that ran out (set by `step` and `step_run`, which do not count that event's step)."""

    at: int | None = None


class NotAStep(Exception):
    """`step_run` met an event the model has no rule for, at `events[offset]`: the events before
    it were stepped, it and those after were not. `trace_closed` is such an event: the writer's
    end of the stream, which its driver judges (`kvclaims.refinement.checker`)."""

    def __init__(self, offset: int, name: str) -> None:
        super().__init__(f"{name!r} is not an event the model steps on")
        self.offset = offset
        self.name = name


class _Stop(Exception):
    """Internal: unwinds a rule that found a violation back to `step`."""

    def __init__(self, violation: Violation) -> None:
        self.violation = violation


_NONE: dict[str, int] = MappingProxyType({})  # type: ignore[assignment]
"""The shared, read-only empty map a claim or request starts with (most never need one)."""

_NO_PAIRS: frozenset[tuple[int, int]] = frozenset()
"""The shared empty `ClaimRecord.also_held` (most claims never share a block)."""

_ClaimTable = Mapping[Phase, Mapping[Event, "Phase | lifecycle.Violation"]]


class _Tabulated(dict[Phase, Mapping[Event, "Phase | lifecycle.Violation"]]):
    """One profile's `lifecycle.step`, a phase's row evaluated the first time a claim is in that
    phase (evaluating every row at import cost a short check most of its start-up time)."""

    def __init__(self, profile: ClaimProfile) -> None:
        super().__init__()
        self.profile = profile

    def __missing__(self, phase: Phase) -> Mapping[Event, Phase | lifecycle.Violation]:
        row = self[phase] = MappingProxyType({e: lifecycle.step(self.profile, phase, e) for e in Event})
        return row


def _tabulate(profile: ClaimProfile) -> _ClaimTable:
    return _Tabulated(profile)


_UNDECIDED = ClaimProfile(preserving=False, offloadable=False, two_key=False)
"""The profile used before a claim is decided; the lifecycle ignores it for absent claims."""

LIFECYCLE_TABLES: Mapping[ClaimProfile, _ClaimTable] = MappingProxyType(
    {profile: _tabulate(profile) for profile in {*ALL_PROFILES, _UNDECIDED}}
)
"""`lifecycle.step`, evaluated once for every profile, phase and event it meets (the hot loop is
a dictionary lookup, not a second copy of the rules)."""

_PROFILES: tuple[ClaimProfile, ...] = tuple(sorted({*ALL_PROFILES, _UNDECIDED}, key=repr))
_RANK: Mapping[ClaimProfile, int] = MappingProxyType({p: rank for rank, p in enumerate(_PROFILES)})

_PROFILE_OF: Mapping[tuple[ProtectionMode, bool], tuple[ClaimProfile, _ClaimTable, int]] = MappingProxyType(
    {
        (mode, two_key): (profile, LIFECYCLE_TABLES[profile], _RANK[profile])
        for mode in ProtectionMode
        for two_key in (False, True)
        for profile in (ClaimProfile.of(mode, two_key=two_key),)
    }
)
"""A claim's profile and its tabulated lifecycle, by mode and predicate kind."""

REQUEST_TABLE: Mapping[tuple[RequestPhase, RequestEvent], RequestPhase | RequestViolation] = MappingProxyType(
    {(phase, event): request_step(phase, event) for phase in RequestPhase for event in RequestEvent}
)
"""`requests.request_step`, evaluated once for every phase and event."""
_REQUEST_NEXT: Mapping[RequestEvent, Mapping[RequestPhase, RequestPhase | RequestViolation]] = (
    MappingProxyType(
        {
            event: MappingProxyType({phase: REQUEST_TABLE[(phase, event)] for phase in RequestPhase})
            for event in RequestEvent
        }
    )
)
_ADMITTED = REQUEST_TABLE[(REQUEST_INITIAL, RequestEvent.admit)]
_FINISHED_FROM: Mapping[RequestPhase, RequestPhase] = MappingProxyType(
    {
        phase: target
        for (phase, event), target in REQUEST_TABLE.items()
        if event is RequestEvent.finish and type(target) is RequestPhase
    }
)
"""The phases `request_finished` is legal from (by the request machine), and where it leads."""

_FAILURE_EVENT = {
    RestorationOutcome.refusal: Event.fail_restoration_refusal,
    RestorationOutcome.demotion: Event.fail_restoration_demotion,
    RestorationOutcome.expiry: Event.fail_restoration_expiry,
    RestorationOutcome.harm: Event.fail_restoration_harm,
}
RESPONSIBLE: frozenset[Phase] = frozenset(
    {Phase.accepted, Phase.materialized, Phase.offloaded, Phase.restoring, Phase.restoring_in_place}
)
"""Phases in which the runtime holds the claim's predicate."""
RESERVING: frozenset[Phase] = frozenset(
    {Phase.accepted, Phase.materialized, Phase.breached, Phase.restoring, Phase.checkpoint_mismatch}
    | IN_PLACE
)
"""Phases in which a preserving claim reserves its footprint in the device pool (an offloaded
claim's blocks are in another tier until it is restored): the bound of a proof's protected term."""
RESTORING: frozenset[Phase] = frozenset({Phase.restoring, Phase.restoring_in_place})
"""Phases of a claim whose restore is under way: its confirmation brings its blocks back."""
RESIDENT: frozenset[Phase] = RESERVING - {Phase.accepted}
"""Phases in which a preserving claim's footprint occupies the device pool (it materialized):
what must fit in the usable pool. An accepted claim that has not materialized occupies nothing
yet, so a runtime may accept claims it will place by offloading others first."""
_PROTECTING: frozenset[Phase] = frozenset({Phase.materialized, Phase.breached})
"""Phases in which a preserving claim's blocks are protected device blocks at an admission: it
showed its predicate (reported or by blocks) and is neither offloaded nor being restored."""
_SETTLED = ENDED
_RETIRED = RETIRED | {Phase.rejected}
"""Phases after which the model keeps only a claim's phase and profile (rejected claims too)."""
_RETIRED_STATES: tuple[tuple[Phase, ClaimProfile], ...] = tuple(
    (phase, profile) for phase in sorted(_RETIRED) for profile in _PROFILES
)
_RETIRED_BASE: Mapping[Phase, int] = MappingProxyType(
    {phase: index * len(_PROFILES) for index, phase in enumerate(sorted(_RETIRED))}
)
_RETIRED_KINDS = len(_RETIRED_STATES)
_REQUIRED_SHIFT = 40
"""A retired claim is kept as one integer: its footprint times `_RETIRED_KINDS`, plus its
phase's base plus its profile's rank (a block event may name it later, within its footprint),
plus its required leading blocks + 1 (0: undecidable) shifted past them (a post-release loss is
judged by it). Footprints are below 2**24 (trace v1), so the low part stays below the shift."""
_LOW = (1 << _REQUIRED_SHIFT) - 1
_MAX_WITNESS_CLAIMS = 64
ASSUMED = 255
"""`ClaimRecord.present[p]` of a position assumed from a materialized report (no block named it)."""
_MAX_HOLDERS = ASSUMED - 1
"""Device blocks that may hold one claim position at once (duplicates of one content)."""
SCAN_ALLOWANCE = 10_000_000
SCAN_PER_STEP = 64
"""Budget of the walks over claim blocks and prefixes: a fixed allowance plus this much per
event (the hot path's leading-prefix walks up to this long are constant work, uncharged)."""


class ClaimRecord:
    """One live claim: its terms, phase, clocks and device-tier leading prefix.

    `present[p]` is how many tracked device blocks hold position `p` of its prefix (a position
    stays present while any block holding it survives: vLLM may cache one content in two
    blocks), or `ASSUMED` for a position assumed from a materialized report that no block event
    named; None until its first claim-scoped block event. `leading` is the count of contiguous
    leading positions present; `required` the leading blocks its predicate needs (None when
    undecidable)."""

    __slots__ = (
        "accepted_at",
        "also_held",
        "blocked_while_full",
        "blocks",
        "broken_while_responsible",
        "checkpoint",
        "claim_id",
        "clock_ns",
        "clock_step",
        "contents",
        "decided_ns",
        "decided_step",
        "duration_ms",
        "duration_steps",
        "extended_ns",
        "extended_step",
        "footprint",
        "kv_restored",
        "leading",
        "max_duration_ms",
        "max_duration_steps",
        "mode",
        "object_id",
        "offload_at",
        "owner_scope",
        "pending",
        "phase",
        "predicate",
        "present",
        "profile",
        "rank",
        "refresh_on_hit",
        "reported_leading",
        "required",
        "settled_at",
        "table",
        "transitions",
        "unconfirmed",
    )

    def __init__(self, claim_id: str) -> None:
        self.claim_id = claim_id
        self.profile = _UNDECIDED
        self.table = LIFECYCLE_TABLES[_UNDECIDED]
        self.rank = _RANK[_UNDECIDED]
        self.phase = INITIAL
        self.mode: ProtectionMode | None = None
        self.owner_scope: str | None = None
        self.object_id: str | None = None
        self.predicate: Any = None
        self.footprint = 0
        self.duration_steps: int | None = None
        self.duration_ms: int | None = None
        self.refresh_on_hit = False
        self.max_duration_steps: int | None = None
        self.max_duration_ms: int | None = None
        self.clock_step: int | None = None
        self.clock_ns: int | None = None
        """Where each duration clock runs from: the decision, or the last refreshing hit."""
        self.decided_step: int | None = None
        self.decided_ns: int | None = None
        """The decision's stamps, where the caps run from."""
        self.extended_step: int | None = None
        self.extended_ns: int | None = None
        """The latest end an extension granted on each clock (absolute), if any."""
        self.required: int | None = None
        self.checkpoint: Any = None
        self.kv_restored = False
        self.present: bytearray | None = None
        self.blocks: dict[int, int] = {}
        """Device block ids it is the first holder of -> the position each holds."""
        self.contents: dict[int, str] = {}
        """Position -> the content (block hash) it was first stored with: fixed for the claim's
        life, so a block of other content never holds that position (after a restore either)."""
        self.also_held: set[tuple[int, int]] = _NO_PAIRS  # type: ignore[assignment]
        """(block id, position) it holds beside a block's first holder (one content cached in
        a block another claim stored first)."""
        self.leading = 0
        self.reported_leading = 0
        self.unconfirmed: tuple[int, int, str] | None = None
        """(leading blocks, position, event) of a report its tracked blocks have not shown yet."""
        self.pending: dict[str, int] = _NONE
        self.accepted_at = 0
        self.offload_at = 0
        self.settled_at = 0
        self.transitions: tuple[int, ...] = ()
        self.blocked_while_full = 0
        self.broken_while_responsible = False

    def terms(self) -> tuple[Any, ...]:
        """What the runtime is responsible for (compared between submission and acceptance). The
        predicate compares in one unit, its kind and the leading blocks it needs (tokens rounded
        up to blocks), so `tokens: 20` and `blocks: 2` at block size 16 are the same terms."""
        return (
            self.owner_scope,
            self.object_id,
            self.mode,
            self.predicate if self.required is None else (type(self.predicate).__name__, self.required),
            self.footprint,
            self.duration_steps,
            self.duration_ms,
            self.refresh_on_hit,
            self.max_duration_steps,
            self.max_duration_ms,
        )


class RequestRecord:
    """One live request: its phase, live blocks and the restorations it waits on."""

    __slots__ = ("failed", "live", "owed", "phase", "refused_at", "restored", "restoring")

    def __init__(self, phase: RequestPhase, live: int = 0) -> None:
        self.phase = phase
        self.live = live
        self.owed: tuple[str, int] | None = None
        self.failed: dict[str, int] = _NONE
        self.restoring: dict[str, int] = _NONE
        self.restored: dict[str, int] = _NONE
        self.refused_at = 0

    def note(self, which: str, claim_id: str, at: int) -> None:
        """Record `claim_id` in the map `which` (the maps start as the shared empty `_NONE`)."""
        mapping = getattr(self, which)
        if mapping is _NONE:
            mapping = {}
            setattr(self, which, mapping)
        mapping[claim_id] = at
