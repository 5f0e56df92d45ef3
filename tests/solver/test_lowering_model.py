"""The Z3 lowering model equals `kvclaims.spec.lower`: on every shipped row (exact layout) and
on random descriptors of the symbolic bound (decoded into real descriptors)."""

from pathlib import Path

import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvclaims.solver.differential import concrete_agreement
from kvclaims.solver.facts import Facts
from kvclaims.solver.lowering_model import judge
from kvclaims.solver.lowering_proofs import _prove, _symbolic, python_verdict
from kvclaims.solver.symbolic import (
    DEFECTS,
    SCOPES,
    SIGNALS,
    AnchorDefect,
    Layout,
    SymbolicDescriptor,
    anchor_document,
    defect_of,
)
from kvclaims.solver.z3env import Job
from kvclaims.spec.descriptor import Descriptor, load_descriptors
from kvclaims.spec.evidence import Anchor
from kvclaims.spec.vocabulary import Label

DESCRIPTORS = Path(__file__).resolve().parents[2] / "descriptors"


def test_model_agrees_with_lower_on_every_shipped_row() -> None:
    rows = list(concrete_agreement(load_descriptors([DESCRIPTORS])))
    assert rows, "no shipped descriptors"
    disagreements = [(file, row, model, python) for file, row, model, python in rows if model != python]
    assert disagreements == []


@pytest.mark.parametrize("defect", DEFECTS)
@pytest.mark.parametrize("scope", SCOPES)
def test_every_anchor_defect_round_trips(defect: AnchorDefect, scope) -> None:  # type: ignore[no-untyped-def]
    document = anchor_document(defect, scope, None, "x")
    anchor = None if document is None else Anchor.model_validate(document)
    assert defect_of(anchor) is defect
    assert (anchor is not None and anchor.counts) == (defect is AnchorDefect.ok)


def test_regular_layout_has_k_sites_per_obligation_and_slot() -> None:
    layout = Layout.regular(2)
    assert len(layout.adapters) == 7
    assert len(layout.evidence) == 19 * 8 * 2
    assert [layout.slot(s) for s in layout.evidence[:38]] == [layout.slot(layout.evidence[0])] * 38


class _Symbolic:
    """One symbolic descriptor of the bound, shared by the random examples."""

    def __init__(self) -> None:
        self.job = Job()
        self.d = SymbolicDescriptor(self.job, Layout.regular(2), "d")
        self.v = judge(self.d, Facts.reference())
        self.solver = self.job.solver()
        self.solver.add(self.d.well_formed())


_SHARED: list[_Symbolic] = []


def _shared() -> _Symbolic:
    if not _SHARED:
        _SHARED.append(_Symbolic())
    return _SHARED[0]


_SITES = len(Layout.regular(2).evidence)
_weighted_status = st.sampled_from([0, 0, 0, 1, 2, 3])  # mostly supported
_weighted_defect = st.sampled_from([0, 0, 0, 0, *range(1, len(DEFECTS))])  # mostly anchored


@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    present=st.lists(st.booleans(), min_size=_SITES, max_size=_SITES),
    status=st.lists(_weighted_status, min_size=_SITES, max_size=_SITES),
    scope=st.lists(st.integers(0, len(SCOPES) - 1), min_size=_SITES, max_size=_SITES),
    defect=st.lists(_weighted_defect, min_size=_SITES, max_size=_SITES),
    signals=st.lists(st.booleans(), min_size=len(SIGNALS), max_size=len(SIGNALS)),
    preconditions=st.lists(st.sampled_from([True, True, True, False]), min_size=9, max_size=9),
    observed=st.lists(st.booleans(), min_size=6, max_size=6),
    mode=st.integers(0, 6),
    depth=st.integers(0, 7),
    inference=st.one_of(st.none(), st.tuples(st.integers(0, 18), st.integers(0, len(SIGNALS) - 1))),
)
def test_model_agrees_with_lower_on_random_descriptors_of_the_bound(
    present, status, scope, defect, signals, preconditions, observed, mode, depth, inference
) -> None:  # type: ignore[no-untyped-def]
    shared = _shared()
    d = shared.d
    fixed = [d.mode == mode, d.depth == depth]
    for i, ev in enumerate(d.evidence):
        if present[i]:
            fixed += [ev.present, ev.status == status[i], ev.scope == scope[i], ev.defect == defect[i]]
        else:
            fixed.append(z3.Not(ev.present))
    for i, ob in enumerate(d.observations):
        fixed += [ob.present, ob.scope == 4, ob.defect == 0] if observed[i] else [z3.Not(ob.present)]
    fixed += [var == signals[i] for i, var in enumerate(d.signals.values())]
    fixed += [z3.Not(var) for var in d.forbidden.values()]
    fixed += [var == preconditions[i] for i, var in enumerate(d.preconditions[0].values())]
    for index, var in enumerate(d.inferred.values()):
        chosen = inference is not None and inference[0] == index
        fixed.append(var == (inference[1] if chosen else -1))
    assert shared.solver.check(*fixed) == z3.sat
    model = shared.solver.model()
    document = d.decode(model)
    Descriptor.model_validate(document)
    assert shared.v.read(model) == python_verdict(document)


def test_the_verdict_does_not_depend_on_the_order_evidence_is_listed() -> None:
    """Regression (found while mirroring the supplier choice in the model): two counting
    items at the same slot with different scopes used to make the subtype depend on which was
    listed first (adapter_policy_under_pressure vs adapter_observational)."""
    from kvclaims.spec.lowering import lower
    from kvclaims.spec.tables import TELEMETRY_JOIN_PRECONDITIONS
    from kvclaims.spec.vocabulary import AdapterDepth, ProtectionMode

    anchor = {"kind": "trace", "path": "t.jsonl", "note": "n", "ordering": "seq", "claim_scope": "claim_id"}
    items = [
        {"obligation": o, "status": "supported", "scope": "litmus_trace", "anchor": anchor}
        for o in (
            "claim_identity",
            "materialization_predicate",
            "claim_materialized_event",
            "claim_scoped_telemetry",
        )
    ]
    pressured = {
        "obligation": "claim_identity",
        "status": "supported",
        "scope": "controlled_pressure",
        "anchor": anchor,
    }
    verdicts = []
    for evidence in ([pressured, *items], [*items, pressured]):
        descriptor = Descriptor.model_validate(
            {
                "descriptor": 1,
                "runtime": "x",
                "surface": "x",
                "version": "1",
                "adapters": [
                    {
                        "name": "join",
                        "depth": "telemetry_join",
                        "preconditions": {p.value: True for p in TELEMETRY_JOIN_PRECONDITIONS},
                        "evidence": evidence,
                    }
                ],
            }
        )
        verdicts.append(lower(descriptor, ProtectionMode.best_effort, AdapterDepth.telemetry_join))
    assert verdicts[0].label.is_sound
    assert verdicts[0].subtype == verdicts[1].subtype


def test_a_false_claim_decided_by_the_finite_domain_solver_has_a_replayed_counterexample() -> None:
    """The path fail_closed_monotonicity takes: a claim that does not hold (no row is ever
    native_sound) yields a counterexample that decodes and that the Python judgment agrees on."""
    job = Job()
    d, v = _symbolic(job, Facts.reference())
    outcome = _prove(
        job,
        z3.Not(v.label_is(Label.native_sound)),
        [d.well_formed()],
        [("descriptor", d, v)],
        {},
        finite_domain=True,
    )
    assert not outcome.proved
    found = outcome.detail["counterexample"]["descriptor"]
    assert found["model_verdict"]["label"] == "native_sound"
    assert found["python_verdict"] == found["model_verdict"]
    assert python_verdict(found["descriptor"]).label is Label.native_sound
