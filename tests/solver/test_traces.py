"""Adversarial traces by BMC: each breaks exactly its targeted refinement rule, at the planted
step, as judged by the refinement checker (`kvclaims.refinement.check_trace`)."""

import json
from pathlib import Path

import pytest

from kvclaims.refinement import check_bytes, check_trace
from kvclaims.solver.capacity_model import CAPACITY_FIELDS, violated_checks
from kvclaims.solver.routing_proofs import ROUTING_CLASSES
from kvclaims.solver.traces import (
    ACTIONS,
    AT_END,
    CLASSES,
    HEADER_USABLE,
    TraceReport,
    candidates,
    generate,
    write_trace,
)
from kvclaims.spec.trace import EVENT_MODELS, TraceHeader
from kvclaims.spec.vocabulary import ConformanceRule


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TraceReport]:
    out = tmp_path_factory.mktemp("traces")
    return out, generate(out, check_bytes)


def test_every_class_yields_a_trace_and_every_rule_is_targeted(generated) -> None:  # type: ignore[no-untyped-def]
    _, report = generated
    assert report.missing_classes == []
    fleet_rules = {c.rule for c in ROUTING_CLASSES}  # their classes are fleets (test_routing_proofs)
    assert {c.rule for c in CLASSES} == set(ConformanceRule) - fleet_rules


def test_every_variant_class_has_a_conforming_twin_of_the_same_length(generated) -> None:  # type: ignore[no-untyped-def]
    """The planted trace with each variant action replaced by its plain one is accepted by the
    real checker, and has as many lines: the rule, not the shape, decides the rejection."""
    out, report = generated
    by_id = {c.id: c for c in CLASSES}
    by_name = {a.name: a for a in ACTIONS}
    twinned = [entry for entry in report.written if by_id[entry["class"]].twin]
    assert {entry["class"] for entry in twinned} == {c.id for c in CLASSES if c.twin}
    for entry in twinned:
        cls = by_id[entry["class"]]
        planted = (out / "traces" / entry["file"]).read_text()
        actions = tuple(by_name[name] for name in entry["actions"])
        twin = cls.conforming_twin(actions)
        assert twin != actions, entry["file"]
        text = write_trace(cls, twin).text()
        verdict = check_bytes(text.encode())
        assert verdict.outcome.value == "accepted", (entry["file"], verdict.counterexample)
        assert len(text.splitlines()) == len(planted.splitlines()), entry["file"]


def test_every_trace_is_rejected_by_check_trace_with_its_rule_at_the_planted_step(generated) -> None:  # type: ignore[no-untyped-def]
    out, report = generated
    by_id = {c.id: c for c in CLASSES}
    for entry in report.written:
        verdict = check_trace(out / "traces" / entry["file"])
        assert verdict.outcome.value != "accepted", entry["file"]
        assert verdict.outcome.value == "rejected" and verdict.counterexample is not None, entry["file"]
        assert verdict.counterexample.rule is by_id[entry["class"]].rule, entry["file"]
        if by_id[entry["class"]].final != (AT_END,):
            assert verdict.counterexample.line == entry["planted_seq"] + 1, entry["file"]


def test_traces_are_well_formed_trace_v1(generated) -> None:  # type: ignore[no-untyped-def]
    out, report = generated
    for entry in report.written:
        lines = (out / "traces" / entry["file"]).read_text().splitlines()
        TraceHeader.model_validate_json(lines[0])
        seqs = []
        for line in lines[1:]:
            event = json.loads(line)
            EVENT_MODELS[event["event"]].model_validate(event)
            seqs.append(event["seq"])
        assert seqs == sorted(set(seqs))


def test_capacity_traces_break_only_their_check(generated) -> None:  # type: ignore[no-untyped-def]
    out, report = generated
    by_id = {c.id: c for c in CLASSES}
    for entry in report.written:
        check = by_id[entry["class"]].capacity_check
        if check is None:
            continue
        *_, last_line, closing = (out / "traces" / entry["file"]).read_text().splitlines()
        assert json.loads(closing)["event"] == "trace_closed"
        last = json.loads(last_line)
        numbers = {name: last[name] for name in CAPACITY_FIELDS}
        assert violated_checks(numbers, capacity_reason=True, header_usable=HEADER_USABLE) == [check]


def test_same_seed_same_traces() -> None:
    for cls in CLASSES[:6]:
        first = [write_trace(cls, a).text() for a in candidates(cls, limit=2)]
        second = [write_trace(cls, a).text() for a in candidates(cls, limit=2)]
        assert first == second and first
