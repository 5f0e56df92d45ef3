"""The rule x event table: every event type and field of the trace schema has a row, every rule
names proofs that exist and every rule proof names a rule, and cells carry hostile test pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvclaims.refinement import Outcome
from kvclaims.solver import capacity_proofs, lifecycle_proofs, rule_proofs
from kvclaims.solver.obligations import all_obligations
from kvclaims.statemachine.system import table
from tests.statemachine import cells_claims, cells_identity, cells_requests, cells_terms, test_choke_points
from tests.statemachine.hostile import check

CASES = [
    *test_choke_points.CASES,
    *cells_claims.CASES,
    *cells_requests.CASES,
    *cells_identity.CASES,
    *cells_terms.CASES,
]
HEADERS = {
    **test_choke_points.HEADERS,
    **cells_claims.HEADERS,
    **cells_requests.HEADERS,
    **cells_identity.HEADERS,
    **cells_terms.HEADERS,
}

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "trace-v1-event.schema.json"
VOCABULARY = table.vocabulary(json.loads(SCHEMA.read_text()))

CHOKE_POINT_PAIRS: dict[tuple[str, str], list[tuple[str, str]]] = {
    ("duration.judged_on_every_clock_when_protection_ends", "resident_claim_expired"): [
        ("expiry-early", "expiry-on-time")
    ],
    ("duration.judged_on_every_clock_when_protection_ends", "resident_claim_restoration_failed"): [
        ("failed-restore-as-expiry-early", "failed-restore-as-expiry-on-time"),
        ("in-place-failure-as-expiry-early", "in-place-failure-as-expiry-on-time"),
        (
            "failure-as-expiry-early-after-another-request-restored",
            "failure-as-expiry-on-time-after-another-request-restored",
        ),
    ],
    ("two_key.state_key_fixed_when_first_recorded", "resident_claim_materialized"): [
        ("state-key-replaced", "state-key-repeated")
    ],
    ("two_key.state_key_fixed_when_first_recorded", "request_reused"): [
        ("resume-with-another-key", "resume-with-the-key")
    ],
    ("blocks.a_position_is_held_by_its_stored_content", "block_stored"): [
        ("stored-without-position", "stored-with-position")
    ],
    ("blocks.a_position_is_held_by_its_stored_content", "block_removed"): [
        ("removed-unknown-block-without-position", "removed-unclaimed-unknown-block")
    ],
    ("restore.per_claim_and_request", "request_reused"): [
        ("the-failed-request-reuses-as-satisfied", "two-requests-one-restores-then-one-fails"),
        ("the-other-request-reuses-before-its-restore", "two-requests-one-fails-then-one-restores"),
        ("reuse-while-offloaded", "reuse-after-release"),
    ],
    ("attribution.blocking_claims_are_responsible_and_exact", "request_finished"): [
        ("the-failed-request-is-never-refused", "two-requests-one-fails-then-one-restores")
    ],
    ("terms.acceptance_repeats_submitted_terms", "resident_claim_accepted"): [
        ("tokens-and-blocks-other-terms", "tokens-and-blocks-the-same-terms")
    ],
    ("capacity.state_each_block_counted_once", "resident_claim_restored"): [
        ("restore-by-count-past-the-pool", "restore-by-count-in-the-pool"),
        ("restore-by-blocks-past-the-pool", "restore-by-blocks-in-the-pool"),
    ],
    ("capacity.state_each_block_counted_once", "block_stored"): [
        ("restore-by-later-blocks-past-the-pool", "restore-by-later-blocks-in-the-pool"),
    ],
    ("capacity.state_each_block_counted_once", "resident_claim_materialized"): [
        ("materialized-past-the-pool", "materialized-in-the-pool"),
    ],
}
"""Cell -> (violating case, conforming twin), by name in `test_choke_points.CASES`."""

PAIRS = {
    cell: [
        *CHOKE_POINT_PAIRS.get(cell, []),
        *cells_claims.PAIRS.get(cell, []),
        *cells_requests.PAIRS.get(cell, []),
        *cells_identity.PAIRS.get(cell, []),
        *cells_terms.PAIRS.get(cell, []),
    ]
    for cell in {
        *CHOKE_POINT_PAIRS,
        *cells_claims.PAIRS,
        *cells_requests.PAIRS,
        *cells_identity.PAIRS,
        *cells_terms.PAIRS,
    }
}
"""Every cell's pairs, from the five case modules."""

CASE_NAMES = [name for name, *_ in CASES]

_DURATION = "duration.judged_on_every_clock_when_protection_ends"
_EXPLICIT_END = (
    "no history violates it through this event: DESIGN binds the duration to expiry alone, and "
    "the event ends protection explicitly (the choke point passes it without a clock)"
)
CELLS_WITHOUT_A_PAIR: dict[tuple[str, str], str] = {
    (_DURATION, "resident_claim_demoted"): _EXPLICIT_END,
    (_DURATION, "resident_claim_released"): _EXPLICIT_END,
    (_DURATION, "resident_claim_harmed"): _EXPLICIT_END,
    ("requests.move_through_the_request_machine", "request_finished"): (
        "not found: the request machine finishes a request from every state (a second finish is judged "
        "by request identity, not by this rule)"
    ),
    ("restore.per_claim_and_request", "resident_claim_offloaded"): (
        "not found: an offload while a restore is pending or done twice is a lifecycle violation "
        "(the claim machine), judged before this rule"
    ),
}
"""The cells no pair covers, each with why; a new cell without a pair fails."""

_CASES = {name: (events, outcome) for name, events, outcome, _ in CASES}


def test_every_event_type_and_field_of_the_schema_has_a_row() -> None:
    missing = [
        (event, field)
        for event, fields in VOCABULARY.items()
        for field in fields
        if not table.rules_reaching(event, field)
        and (event, field) not in table.CONTEXT
        and (table.EVERY_EVENT, field) not in table.CONTEXT
    ]
    assert missing == []


def test_a_field_new_to_the_schema_has_no_row() -> None:
    assert not table.rules_reaching("block_stored", "new_field")
    assert ("block_stored", "new_field") not in table.CONTEXT


def test_declarations_name_only_the_schema_vocabulary() -> None:
    stale = [
        (rule.name, event, field)
        for rule in table.RULES
        for event, fields in rule.reaches.items()
        for field in fields
        if field not in VOCABULARY.get(event, ())
    ]
    assert stale == []


def test_every_rule_names_existing_proofs_and_every_rule_proof_names_a_rule() -> None:
    proofs = {o.name for o in all_obligations()}
    assert [(r.name, p) for r in table.RULES for p in r.proofs if p not in proofs] == []
    assert all(rule.proofs for rule in table.RULES)
    named = {p for rule in table.RULES for p in rule.proofs}
    rule_proof_names = {
        o.name
        for o in (*rule_proofs.OBLIGATIONS, *lifecycle_proofs.OBLIGATIONS, *capacity_proofs.OBLIGATIONS)
    }
    assert sorted(rule_proof_names - named) == []


def test_pairs_name_declared_cells_and_known_cases() -> None:
    cells = set(table.cells())
    assert [cell for cell in PAIRS if cell not in cells] == []
    assert [n for pairs in PAIRS.values() for pair in pairs for n in pair if n not in _CASES] == []
    assert sorted(cells - set(PAIRS)) == sorted(CELLS_WITHOUT_A_PAIR)


@pytest.mark.parametrize(
    ("bad", "good"), [pair for pairs in PAIRS.values() for pair in pairs], ids=lambda name: name
)
def test_a_cell_pair_rejects_the_violation_and_accepts_the_twin(bad: str, good: str) -> None:
    assert check(_CASES[bad][0], HEADERS.get(bad)).outcome in (Outcome.rejected, Outcome.inconclusive)
    assert check(_CASES[good][0], HEADERS.get(good)).outcome is Outcome.accepted


def test_the_committed_rule_event_table_matches_the_schema() -> None:
    from kvclaims.spec.schema_docs import drifted_docs

    docs = SCHEMA.parents[1] / "docs"
    assert drifted_docs(SCHEMA.parent, docs, table.render_docs) == [], (
        "run: kvclaims schema --out schemas --docs docs"
    )


def test_case_names_are_unique_across_the_case_modules() -> None:
    assert sorted(n for n in set(CASE_NAMES) if CASE_NAMES.count(n) > 1) == []


@pytest.mark.parametrize(
    ("name", "events", "outcome", "rule"),
    [*cells_claims.CASES, *cells_requests.CASES],
    ids=[c[0] for c in (*cells_claims.CASES, *cells_requests.CASES)],
)
def test_cell_case_verdict(name: str, events: list, outcome: Outcome, rule: object) -> None:
    verdict = check(events, HEADERS.get(name))
    assert verdict.outcome is outcome, verdict.reason
    if rule is not None:
        assert f"[{rule.value}]" in verdict.reason  # type: ignore[attr-defined]


@pytest.mark.parametrize(("name", "events", "outcome"), [c[:3] for c in CASES], ids=CASE_NAMES)
def test_the_oracle_gives_every_case_its_written_verdict(name: str, events: list, outcome: Outcome) -> None:
    """The independent oracle (no deciding code shared with the checker) on the same traces."""
    from kvclaims.oracle.interpreter import judge
    from tests.statemachine.hostile import HEADER

    header = HEADERS.get(name) or HEADER
    docs = [header, *({"seq": i, **e} for i, e in enumerate(events))]
    docs.append({"seq": len(events), "event": "trace_closed", "reason": "closed"})
    assert judge(b"".join(json.dumps(d).encode() + b"\n" for d in docs)).outcome == outcome.value
