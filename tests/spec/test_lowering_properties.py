"""Properties of the lowering judgment over generated descriptors (Hypothesis).

The Z3 model proves these over a bounded symbolic descriptor; here the Python judgment itself
is exercised on random descriptors, so a regression in `lower` is caught even before the
differential search runs.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support.descriptors import TRACE_ANCHOR, descriptor

from kvclaims.spec.lowering import lower
from kvclaims.spec.tables import DEPTH_SUPPLIES, MODE_BUNDLES, RUNTIME_SCOPES, TELEMETRY_JOIN_PRECONDITIONS
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    ApproximationSignal,
    EvidenceScope,
    EvidenceStatus,
    Label,
    Obligation,
    ObservationAtom,
    ProtectionMode,
)

ANCHORS = [
    TRACE_ANCHOR,
    {"kind": "docs", "url": "https://example.org", "note": "docs"},
    {"kind": "source", "path": "src/x.py", "note": "function f"},
    {**TRACE_ANCHOR, "ordering": ""},
    None,
]


def evidence_items(obligations: list[Obligation]) -> st.SearchStrategy[list[dict[str, Any]]]:
    entry = st.fixed_dictionaries(
        {
            "obligation": st.sampled_from(obligations).map(str),
            "status": st.sampled_from(list(EvidenceStatus)).map(str),
            "scope": st.sampled_from(list(EvidenceScope)).map(str),
            "anchor": st.sampled_from(ANCHORS),
        }
    ).map(_fitting)
    return st.lists(entry, max_size=6)


def _fitting(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry without its empty anchor, and with a scope its anchor can show: a docs or source
    anchor on runtime evidence is invalid input (tested in test_descriptor_loading), not a
    weaker row, so such an entry is made docs-scoped."""
    anchor = entry["anchor"]
    if anchor is not None and anchor["kind"] in ("docs", "source") and entry["scope"] in RUNTIME_SCOPES:
        entry = {**entry, "scope": "docs"}
    return {k: v for k, v in entry.items() if v is not None}


@st.composite
def adapters(draw: st.DrawFn) -> list[dict[str, Any]]:
    found = []
    for index in range(draw(st.integers(0, 3))):
        depth = draw(st.sampled_from([d for d in AdapterDepth if d is not AdapterDepth.none]))
        # Mostly obligations the depth may supply, sometimes any (the judgment must refuse those).
        pool = sorted(DEPTH_SUPPLIES[depth]) if draw(st.booleans()) else list(Obligation)
        preconditions = draw(st.sets(st.sampled_from(sorted(TELEMETRY_JOIN_PRECONDITIONS))))
        found.append(
            {
                "name": f"adapter-{index}",
                "depth": str(depth),
                "preconditions": {str(p): p in preconditions for p in TELEMETRY_JOIN_PRECONDITIONS},
                "evidence": draw(evidence_items(pool)),
            }
        )
    return found


@st.composite
def sound_descriptors(draw: st.DrawFn) -> dict[str, Any]:
    """A row that lowers: every bundle obligation supplied by native evidence or by an adapter
    whose depth may supply it, observed where enforcement needs it, plus optional noise."""
    mode = draw(st.sampled_from(list(ProtectionMode)))
    depth = draw(st.sampled_from(list(AdapterDepth)))
    native: list[dict[str, Any]] = []
    by_depth: dict[AdapterDepth, list[dict[str, Any]]] = {}
    for obligation in sorted(MODE_BUNDLES[mode]):
        slots = [d for d in AdapterDepth if d <= depth and obligation in DEPTH_SUPPLIES[d]]
        slot = draw(st.sampled_from(slots))
        entry = {
            "obligation": str(obligation),
            "status": "supported",
            "scope": "conformance_trace",
            "anchor": TRACE_ANCHOR,
        }
        (native if slot is AdapterDepth.none else by_depth.setdefault(slot, [])).append(entry)
    adapters_ = [
        {
            "name": f"adapter-{d}",
            "depth": str(d),
            "preconditions": {str(p): True for p in TELEMETRY_JOIN_PRECONDITIONS},
            "evidence": evidence,
        }
        for d, evidence in by_depth.items()
    ]
    return {
        "mode": mode,
        "depth": depth,
        "fields": {
            "approximation_signals": [
                str(s) for s in draw(st.sets(st.sampled_from(list(ApproximationSignal))))
            ],
            "native": native + draw(evidence_items(list(Obligation))),
            "adapters": adapters_,
            "observations": [
                {"atom": str(a), "scope": "controlled_pressure", "anchor": TRACE_ANCHOR}
                for a in ObservationAtom
            ],
        },
    }


@st.composite
def arbitrary_descriptors(draw: st.DrawFn) -> dict[str, Any]:
    mode = draw(st.sampled_from(list(ProtectionMode)))
    focus = sorted(
        {
            *draw(st.sets(st.sampled_from(list(Obligation)), max_size=4)),
            *(o for o in Obligation if draw(st.booleans())),
        }
    )
    return {
        "mode": mode,
        "depth": draw(st.sampled_from(list(AdapterDepth))),
        "fields": {
            "approximation_signals": [
                str(s) for s in draw(st.sets(st.sampled_from(list(ApproximationSignal))))
            ],
            "native": draw(evidence_items(focus or list(Obligation))),
            "adapters": draw(adapters()),
            "observations": [
                {
                    "atom": str(a),
                    "scope": draw(st.sampled_from(list(EvidenceScope))).value,
                    "anchor": TRACE_ANCHOR,
                }
                for a in draw(st.sets(st.sampled_from(list(ObservationAtom))))
            ],
        },
    }


def descriptors() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(sound_descriptors(), arbitrary_descriptors())


def weaken(fields: dict[str, Any], draw: st.DrawFn) -> dict[str, Any]:
    """One weakening: lose a supported item, lower its status, unanchor it, narrow its scope,
    drop a precondition or an atom. Removing a *non*-supported item is not a weakening: it
    removes a contradiction, which may rightly let other evidence count."""
    weakened: dict[str, Any] = {
        "approximation_signals": list(fields["approximation_signals"]),
        "native": [dict(e) for e in fields["native"]],
        "observations": [dict(o) for o in fields["observations"]],
    }
    weakened["adapters"] = [
        {**a, "evidence": [dict(e) for e in a["evidence"]], "preconditions": dict(a["preconditions"])}
        for a in fields["adapters"]
    ]
    lists = [weakened["native"], *(a["evidence"] for a in weakened["adapters"])]
    targets = [(lst, i) for lst in lists for i, e in enumerate(lst) if e["status"] == "supported"]
    kind = draw(st.sampled_from(["remove", "status", "anchor", "scope", "precondition", "atom"]))
    if kind == "precondition" and weakened["adapters"]:
        chosen = draw(st.sampled_from(weakened["adapters"]))
        chosen["preconditions"][draw(st.sampled_from(sorted(chosen["preconditions"])))] = False
    elif kind == "atom" and weakened["observations"]:
        weakened["observations"].pop(draw(st.integers(0, len(weakened["observations"]) - 1)))
    elif targets:
        lst, index = draw(st.sampled_from(targets))
        if kind == "remove":
            lst.pop(index)
        elif kind == "status":
            lst[index]["status"] = draw(st.sampled_from(["partial", "unknown", "missing"]))
        elif kind == "anchor":
            lst[index].pop("anchor", None)
        else:
            lst[index]["scope"] = "docs"
    return weakened


@settings(max_examples=400, deadline=None, derandomize=True)
@given(data=st.data(), case=descriptors())
def test_weakening_evidence_never_upgrades_a_label(data: st.DataObject, case: dict[str, Any]) -> None:
    before = lower(descriptor(**case["fields"]), case["mode"], case["depth"])
    weakened = weaken(case["fields"], data.draw)
    after = lower(descriptor(**weakened), case["mode"], case["depth"])
    if before.label is not Label.invalid:
        assert after.label is not Label.invalid
        assert after.label <= before.label, (before.summary(), after.summary())


@settings(max_examples=300, deadline=None, derandomize=True)
@given(case=descriptors())
def test_deeper_depth_never_weakens_a_row(case: dict[str, Any]) -> None:
    """Selecting a deeper depth only admits more evidence, so a sound row stays sound."""
    d = descriptor(**case["fields"])
    labels = [lower(d, case["mode"], depth).label for depth in AdapterDepth]
    for shallow, deep in itertools.pairwise(labels):
        if shallow.is_sound:
            assert deep.is_sound


@settings(max_examples=300, deadline=None, derandomize=True)
@given(case=descriptors())
def test_native_sound_needs_no_adapter(case: dict[str, Any]) -> None:
    d = descriptor(**case["fields"])
    verdict = lower(d, case["mode"], case["depth"])
    if verdict.label is Label.native_sound:
        assert lower(d, case["mode"], AdapterDepth.none).label is Label.native_sound
        assert all(f.supplied_at is AdapterDepth.none for f in verdict.findings)
