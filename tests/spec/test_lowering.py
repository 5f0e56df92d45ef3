"""The lowering judgment, rule by rule (seed 000 section 4 and table 2, DESIGN 2.3).

Each test builds the smallest descriptor that isolates one rule, and checks both the label and
the rule the verdict names, so a judgment that gets the label right for the wrong reason fails.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from support.descriptors import (
    ALL_PRECONDITIONS,
    PRESSURE_ATOMS,
    TRACE_ANCHOR,
    adapter,
    bundle,
    descriptor,
    item,
    items,
)

from kvclaims.spec.descriptor import load_descriptor
from kvclaims.spec.lowering import lower
from kvclaims.spec.verdict import LoweringRule
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    ApproximationSignal,
    Label,
    LabelSubtype,
    Obligation,
    ProtectionMode,
)

M, D, O, Rule = ProtectionMode, AdapterDepth, Obligation, LoweringRule  # noqa: E741


def discount_rules(verdict, obligation: Obligation) -> set[LoweringRule]:
    finding = next(f for f in verdict.findings if f.obligation is obligation)
    return {d.rule for d in finding.discounted}


# --- Lower holds --------------------------------------------------------------------------------


def test_native_evidence_for_every_obligation_is_native_sound() -> None:
    d = descriptor(native=items(bundle(M.best_effort)))
    verdict = lower(d, M.best_effort, D.none)
    assert verdict.label is Label.native_sound
    assert verdict.decided_by is Rule.lower_holds_natively
    assert verdict.missing == [] and verdict.first_refused is None


def test_adapter_evidence_makes_sound_with_adapter_and_refuses_native() -> None:
    d = descriptor(
        native=items([O.materialization_predicate]),
        adapters=[
            adapter(
                "join",
                "telemetry_join",
                items([O.claim_identity, O.claim_materialized_event, O.claim_scoped_telemetry]),
                preconditions=ALL_PRECONDITIONS,
            )
        ],
    )
    verdict = lower(d, M.best_effort, D.telemetry_join)
    assert verdict.label is Label.sound_with_adapter
    assert verdict.subtype is LabelSubtype.adapter_observational
    assert verdict.first_refused is not None and verdict.first_refused.label is Label.native_sound
    assert "I" in verdict.first_refused.reason
    # Native evidence is preferred over adapter evidence for the same obligation.
    p = next(f for f in verdict.findings if f.obligation is O.materialization_predicate)
    assert p.supplied_at is D.none


def test_selected_depth_admits_only_adapters_at_or_below_it() -> None:
    d = descriptor(adapters=[adapter("patch", "backend_patch", items(bundle(M.demotable)))])
    assert lower(d, M.demotable, D.backend_patch).label is Label.sound_with_adapter
    below = lower(d, M.demotable, D.allocator_hook)
    assert below.label is Label.unknown
    assert set(below.missing) == set(bundle(M.demotable))


# --- the seven fail-closed rules ------------------------------------------------------------------


@pytest.mark.parametrize("status", ["partial", "unknown", "missing"])
def test_only_supported_evidence_counts(status: str) -> None:
    evidence = items(bundle(M.best_effort))
    evidence[0]["status"] = status
    d = descriptor(native=evidence)
    verdict = lower(d, M.best_effort, D.none)
    assert not verdict.label.is_sound
    assert Rule.obligations_are_evidence_gated in discount_rules(verdict, O(evidence[0]["obligation"]))


@pytest.mark.parametrize(
    "anchor",
    [
        None,
        {**TRACE_ANCHOR, "path": "   "},
        {**TRACE_ANCHOR, "note": ""},
        {**TRACE_ANCHOR, "ordering": ""},
        {**TRACE_ANCHOR, "claim_scope": ""},
    ],
    ids=["deleted", "empty-path", "no-note", "trace-without-order", "trace-without-claim-scope"],
)
def test_unanchored_evidence_never_counts(anchor) -> None:
    evidence = items(bundle(M.best_effort))
    evidence[1] = item(evidence[1]["obligation"], anchor=anchor)
    verdict = lower(descriptor(native=evidence), M.best_effort, D.none)
    assert not verdict.label.is_sound
    assert Rule.obligations_are_evidence_gated in discount_rules(verdict, O(evidence[1]["obligation"]))


def test_docs_anchor_needs_no_trace_fields() -> None:
    docs = {"kind": "docs", "url": "https://example.org/kv", "note": "documents the field"}
    d = descriptor(native=items(bundle(M.best_effort), scope="docs", anchor=docs))
    assert lower(d, M.best_effort, D.none).label is Label.native_sound


def test_digest_anchor_counts_only_when_the_file_matches(tmp_path: Path) -> None:
    trace = tmp_path / "run.ndjson"
    trace.write_text('{"kvclaims_trace": 1}\n')
    good = hashlib.sha256(trace.read_bytes()).hexdigest()
    for digest, file_present, sound in [(good, True, True), ("0" * 64, True, False), (good, False, False)]:
        anchor = {**TRACE_ANCHOR, "path": "run.ndjson", "sha256": digest}
        evidence = "\n".join(
            f"  - {{obligation: {o}, status: supported, scope: conformance_trace, anchor: {anchor!r}}}"
            for o in bundle(M.best_effort)
        )
        source = tmp_path / "d.yaml"
        source.write_text(f"descriptor: 1\nruntime: r\nsurface: s\nversion: '1'\nnative:\n{evidence}\n")
        if not file_present:
            trace.unlink()
        verdict = lower(load_descriptor(source), M.best_effort, D.none)
        assert verdict.label.is_sound is sound, (digest, file_present)
        if not file_present:
            trace.write_text('{"kvclaims_trace": 1}\n')


def test_digest_is_unverified_until_a_loader_checks_it() -> None:
    anchor = {**TRACE_ANCHOR, "sha256": "a" * 64}
    verdict = lower(descriptor(native=items(bundle(M.best_effort), anchor=anchor)), M.best_effort, D.none)
    assert not verdict.label.is_sound


def test_pressure_atoms_must_be_observed_and_anchored() -> None:
    evidence = items(
        [O.claim_identity, O.claim_scoped_telemetry, O.priority_influence], scope="controlled_pressure"
    )
    complete = descriptor(native=evidence, observations=PRESSURE_ATOMS)
    assert lower(complete, M.soft_priority, D.none).label is Label.native_sound
    unanchored = [dict(a) for a in PRESSURE_ATOMS]
    del unanchored[1]["anchor"]
    verdict = lower(descriptor(native=evidence, observations=unanchored), M.soft_priority, D.none)
    assert verdict.missing == [] and [str(a) for a in verdict.missing_atoms] == [unanchored[1]["atom"]]
    assert not verdict.label.is_sound
    from_docs = [{**a, "scope": "docs"} for a in PRESSURE_ATOMS]
    assert lower(descriptor(native=evidence, observations=from_docs), M.soft_priority, D.none).missing_atoms


@pytest.mark.parametrize("scope", ["docs", "source_inspection"])
def test_adapter_evidence_needs_runtime_scope(scope: str) -> None:
    d = descriptor(
        adapters=[adapter("registry", "claim_registry", items(bundle(M.best_effort)[:1], scope=scope))]
    )
    verdict = lower(d, M.best_effort, D.claim_registry)
    assert Rule.evidence_scope_matters in discount_rules(verdict, bundle(M.best_effort)[0])


@pytest.mark.parametrize("scope", ["docs", "source_inspection", "artifact_generated"])
def test_enforcement_needs_observed_evidence_even_natively(scope: str) -> None:
    d = descriptor(native=items(bundle(M.demotable), scope=scope))
    verdict = lower(d, M.demotable, D.none)
    assert verdict.missing == [O.claim_demoted_before_loss]
    assert Rule.evidence_scope_matters in discount_rules(verdict, O.claim_demoted_before_loss)


def test_adapters_supply_only_what_their_depth_allows() -> None:
    d = descriptor(
        adapters=[adapter("registry", "claim_registry", items([O.victim_exclusion_before_violation]))]
    )
    verdict = lower(d, M.hard_protected, D.claim_registry)
    assert Rule.adapter_depth_constrains_obligations in discount_rules(
        verdict, O.victim_exclusion_before_violation
    )


def test_telemetry_cannot_create_enforcement() -> None:
    enforcement = [O.victim_exclusion_before_violation, O.explicit_conflict_action, O.blocking_claim_ids]
    d = descriptor(
        adapters=[adapter("join", "telemetry_join", items(enforcement), preconditions=ALL_PRECONDITIONS)]
    )
    verdict = lower(d, M.hard_protected, D.backend_patch)
    for obligation in enforcement:
        assert Rule.telemetry_cannot_create_enforcement in discount_rules(verdict, obligation)
    assert verdict.label is Label.rejected


@pytest.mark.parametrize("dropped", sorted(ALL_PRECONDITIONS))
def test_telemetry_join_needs_all_nine_preconditions(dropped: str) -> None:
    preconditions = {**ALL_PRECONDITIONS, dropped: False}
    d = descriptor(
        native=items([O.materialization_predicate]),
        adapters=[
            adapter(
                "join",
                "telemetry_join",
                items([O.claim_identity, O.claim_materialized_event, O.claim_scoped_telemetry]),
                preconditions=preconditions,
            )
        ],
    )
    verdict = lower(d, M.best_effort, D.telemetry_join)
    assert not verdict.label.is_sound
    assert Rule.ambiguity_fails_closed in discount_rules(verdict, O.claim_identity)
    assert dropped in " ".join(verdict.reasons)


def test_an_absent_precondition_is_false() -> None:
    partial = dict(list(ALL_PRECONDITIONS.items())[:8])
    d = descriptor(
        adapters=[adapter("join", "telemetry_join", items([O.claim_identity]), preconditions=partial)]
    )
    verdict = lower(d, M.best_effort, D.telemetry_join)
    assert Rule.ambiguity_fails_closed in discount_rules(verdict, O.claim_identity)


def test_contradictory_evidence_at_one_depth_fails_closed_there_only() -> None:
    contradicted = [*items(bundle(M.best_effort)), item(O.claim_identity, status="missing")]
    verdict = lower(descriptor(native=contradicted), M.best_effort, D.none)
    assert verdict.missing == [O.claim_identity]
    assert Rule.ambiguity_fails_closed in discount_rules(verdict, O.claim_identity)
    rescued = descriptor(
        native=contradicted,
        adapters=[adapter("registry", "claim_registry", items([O.claim_identity]))],
    )
    assert lower(rescued, M.best_effort, D.claim_registry).label is Label.sound_with_adapter


def test_composition_is_conjunctive_for_hard_protection() -> None:
    base = items(
        [O.claim_identity, O.explicit_acceptance, O.materialization_predicate, O.ordered_lifecycle_events]
    )
    scheduler = adapter(
        "sched",
        "scheduler_hook",
        items([O.explicit_conflict_action, O.blocking_claim_ids, O.claim_harm_attribution]),
    )
    allocator = adapter(
        "alloc", "allocator_hook", items([O.victim_exclusion_before_violation, O.footprint_accounting])
    )
    scheduler_only = lower(descriptor(native=base, adapters=[scheduler]), M.hard_protected, D.backend_patch)
    allocator_only = lower(descriptor(native=base, adapters=[allocator]), M.hard_protected, D.backend_patch)
    both = lower(descriptor(native=base, adapters=[scheduler, allocator]), M.hard_protected, D.allocator_hook)
    assert (
        scheduler_only.label is Label.rejected
        and scheduler_only.decided_by is Rule.enforcement_critical_missing
    )
    assert (
        allocator_only.label is Label.rejected
        and allocator_only.decided_by is Rule.enforcement_critical_missing
    )
    assert both.label is Label.sound_with_adapter and both.subtype is LabelSubtype.adapter_enforcement
    # The allocator hook sits deeper than the scheduler hook: at scheduler_hook depth V is absent.
    assert lower(
        descriptor(native=base, adapters=[scheduler, allocator]), M.hard_protected, D.scheduler_hook
    ).label is (Label.rejected)


def test_legacy_alias_is_the_explicit_conflict_action() -> None:
    d = descriptor(native=[item("active_refusal_or_defer")])
    assert d.native[0].obligation is O.explicit_conflict_action


# --- the label ladder and its overrides -----------------------------------------------------------


def test_related_primitive_makes_a_failed_row_approximate_not_unknown() -> None:
    plain = lower(descriptor(), M.expiring, D.none)
    with_duration = lower(descriptor(approximation_signals=["duration_field"]), M.expiring, D.none)
    unrelated = lower(descriptor(approximation_signals=["kv_aware_routing"]), M.expiring, D.none)
    assert (plain.label, plain.decided_by) == (Label.unknown, Rule.no_approximation_signal)
    assert (with_duration.label, with_duration.decided_by) == (
        Label.approximate,
        Rule.approximation_signals_never_satisfy,
    )
    assert unrelated.label is Label.unknown


def test_signals_never_satisfy_obligations_by_themselves() -> None:
    every_signal = descriptor(approximation_signals=[str(s) for s in ApproximationSignal])
    for mode in ProtectionMode:
        for depth in AdapterDepth:
            assert not lower(every_signal, mode, depth).label.is_sound


def test_forbidden_lowering_rejects_and_reports_what_it_refused() -> None:
    d = descriptor(
        approximation_signals=["active_no_evict", "block_pinning"],
        forbidden_lowerings=[{"mode": "hard_protected", "via": "block_pinning", "reason": "pins yield"}],
    )
    verdict = lower(d, M.hard_protected, D.none)
    assert (verdict.label, verdict.decided_by) == (Label.rejected, Rule.forbidden_lowering)
    assert verdict.first_refused is not None and verdict.first_refused.label is Label.approximate


def test_forbidden_primitive_does_not_veto_a_row_whose_evidence_holds() -> None:
    d = descriptor(approximation_signals=["active_no_evict"], native=items(bundle(M.hard_protected)))
    assert lower(d, M.hard_protected, D.none).label is Label.native_sound


def test_descriptor_forbidden_lowering_must_name_a_present_primitive() -> None:
    with pytest.raises(ValueError, match="not in approximation_signals"):
        descriptor(forbidden_lowerings=[{"mode": "hard_protected", "via": "active_no_evict", "reason": "r"}])


@pytest.mark.parametrize(
    ("signal", "obligation", "label", "rule"),
    [
        ("block_events", O.claim_harm_attribution, Label.invalid, Rule.impossible_inference),
        ("fallback_recompute", O.offload_restorability, Label.rejected, Rule.misattributed_inference),
        ("generic_counters", O.restoration_failure_outcome, Label.rejected, Rule.misattributed_inference),
        (
            "unclaimed_load_failure",
            O.restoration_failure_outcome,
            Label.rejected,
            Rule.misattributed_inference,
        ),
    ],
)
def test_inferences_from_primitives(
    signal: str, obligation: Obligation, label: Label, rule: LoweringRule
) -> None:
    d = descriptor(approximation_signals=[signal])
    mode = M.hard_protected if obligation is O.claim_harm_attribution else M.offloadable
    verdict = lower(d, mode, D.none, inferred_from={obligation: ApproximationSignal(signal)})
    assert (verdict.label, verdict.decided_by) == (label, rule)


def test_an_inference_must_cite_a_primitive_the_runtime_has() -> None:
    verdict = lower(
        descriptor(),
        M.offloadable,
        D.none,
        inferred_from={O.offload_restorability: ApproximationSignal.storage_tier},
    )
    assert (verdict.label, verdict.decided_by) == (Label.invalid, Rule.inference_cites_absent_primitive)


def test_invalid_overrides_even_a_sound_row() -> None:
    d = descriptor(approximation_signals=["block_events"], native=items(bundle(M.hard_protected)))
    verdict = lower(
        d,
        M.hard_protected,
        D.none,
        inferred_from={O.claim_harm_attribution: ApproximationSignal.block_events},
    )
    assert verdict.label is Label.invalid
    assert verdict.first_refused is not None and verdict.first_refused.label is Label.native_sound


# --- subtypes --------------------------------------------------------------------------------------


def test_backend_patch_evidence_is_a_witness_not_native() -> None:
    d = descriptor(
        adapters=[adapter("patch", "backend_patch", items(bundle(M.offloadable), scope="failure_injection"))]
    )
    verdict = lower(d, M.offloadable, D.backend_patch)
    assert (verdict.label, verdict.subtype) == (Label.sound_with_adapter, LabelSubtype.backend_patch_witness)


def test_soft_priority_under_controlled_pressure_is_policy_evidence() -> None:
    d = descriptor(
        native=items([O.priority_influence], scope="controlled_pressure"),
        adapters=[
            adapter(
                "join",
                "telemetry_join",
                items([O.claim_identity, O.claim_scoped_telemetry], scope="litmus_trace"),
                preconditions=ALL_PRECONDITIONS,
            )
        ],
        observations=PRESSURE_ATOMS,
    )
    verdict = lower(d, M.soft_priority, D.telemetry_join)
    assert (verdict.label, verdict.subtype) == (
        Label.sound_with_adapter,
        LabelSubtype.adapter_policy_under_pressure,
    )
    assert lower(d, M.soft_priority, D.none).label is Label.unknown


# --- the verdict explains itself ------------------------------------------------------------------


def test_every_missing_obligation_is_explained() -> None:
    d = descriptor(native=[item(O.claim_identity, status="partial")])
    verdict = lower(d, M.hard_protected, D.none)
    assert len(verdict.reasons) == 1 + len(verdict.missing)
    assert "I claim_identity" in verdict.reasons[1] and "status is partial" in verdict.reasons[1]
    summary = verdict.summary()
    assert summary["missing"] == [str(o) for o in verdict.missing]
    assert set(summary) >= {"runtime", "surface", "mode", "depth", "label", "subtype", "missing", "reasons"}
