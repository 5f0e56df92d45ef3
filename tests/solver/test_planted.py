"""Self-test: a deliberately permissive lowering (telemetry_join may supply victim exclusion,
injected as a table override) is caught by the proofs and by the differential search."""

from kvclaims.solver.differential import search
from kvclaims.solver.lowering_proofs import OBLIGATIONS
from kvclaims.solver.planted import planted_facts, planted_python, planted_python_verdict
from kvclaims.solver.proofs import Verdict, run_obligation
from kvclaims.spec.vocabulary import Label


def _obligation(name: str):  # type: ignore[no-untyped-def]
    return next(o for o in OBLIGATIONS if o.name == name)


def test_the_proofs_catch_the_planted_table() -> None:
    telemetry = _obligation("lowering.telemetry_cannot_create_enforcement")
    assert run_obligation(telemetry).verdict is Verdict.proved
    planted = run_obligation(telemetry, facts=planted_facts())
    assert planted.verdict is Verdict.failed
    counterexample = planted.detail["counterexample"]
    with_telemetry = counterexample["with_telemetry"]["descriptor"]
    telemetry_items = [
        item["obligation"]
        for adapter in with_telemetry["adapters"]
        if adapter["depth"] == "telemetry_join"
        for item in adapter["evidence"]
    ]
    assert "victim_exclusion_before_violation" in telemetry_items
    hard = run_obligation(
        _obligation("lowering.hard_protected_needs_scheduler_and_allocator"), facts=planted_facts()
    )
    assert hard.verdict is Verdict.failed


def test_the_differential_search_catches_the_planted_python_judgment() -> None:
    report = search(python_judge=planted_python_verdict)
    assert report.disagreements
    first = report.disagreements[0]
    assert "victim_exclusion_before_violation" in first.target
    assert first.model.label is Label.rejected and first.python.label.is_sound


def test_the_planted_patch_is_scoped_to_its_block() -> None:
    from kvclaims.spec import lowering
    from kvclaims.spec.tables import DEPTH_SUPPLIES

    with planted_python():
        assert lowering.DEPTH_SUPPLIES is not DEPTH_SUPPLIES
    assert lowering.DEPTH_SUPPLIES is DEPTH_SUPPLIES
