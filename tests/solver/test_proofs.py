"""`kvclaims prove`: every obligation is proved, the committed proofs/ do not drift, results
are reproducible, and an exhausted budget is never a proof."""

import json
import shutil
from pathlib import Path

import pytest

from kvclaims.solver.obligations import all_obligations
from kvclaims.solver.proofs import Method, ProofResult, Verdict, run_obligation
from kvclaims.solver.report import REPORT_NAME, drifted, mask_times, report_markdown, result_json

PROOFS = Path(__file__).resolve().parents[2] / "proofs"


@pytest.fixture(scope="module")
def results() -> list[ProofResult]:
    return [run_obligation(o) for o in all_obligations()]


def test_every_obligation_is_proved(results: list[ProofResult]) -> None:
    assert [(r.name, r.verdict) for r in results if not r.proved] == []


def test_committed_proofs_do_not_drift(results: list[ProofResult]) -> None:
    assert drifted(results, PROOFS, complete=True) == [], "regenerate with: kvclaims prove"


def test_drift_is_detected(results: list[ProofResult], tmp_path: Path) -> None:
    shutil.copytree(PROOFS, tmp_path / "proofs")
    target = tmp_path / "proofs" / f"{results[0].name}.json"
    document = json.loads(target.read_text())
    document["verdict"] = "failed"
    target.write_text(json.dumps(document))
    (tmp_path / "proofs" / "lowering.stale.json").write_text(json.dumps({"format": "kvclaims-proof/1"}))
    problems = drifted(results, tmp_path / "proofs", complete=True)
    assert problems == [f"{results[0].name}.json: differs", "lowering.stale.json: no obligation produces it"]


def test_report_times_are_not_compared(results: list[ProofResult]) -> None:
    report = report_markdown(results)
    assert mask_times(report) == mask_times(report.replace(f"{results[0].seconds:.2f} s", "999.99 s"))
    assert (PROOFS / REPORT_NAME).is_file()


def test_every_required_property_is_an_obligation() -> None:
    names = {o.name for o in all_obligations()}
    required = {
        "lowering.every_mode_reachable",
        "lowering.every_label_reachable",
        "lowering.approximation_signals_alone_never_sound",
        "lowering.telemetry_cannot_create_enforcement",
        "lowering.fail_closed_monotonicity",
        "lowering.hard_protected_needs_scheduler_and_allocator",
        "lowering.legacy_alias_equivalent",
        "lifecycle.harm_only_for_accepted_unreleased_claims",
        "lifecycle.no_harm_after_demotion_or_expiry",
        "lifecycle.restoration_failed_only_after_restore_required",
        "lifecycle.blocking_ids_name_only_responsible_claims",
        "capacity.refusal_only_when_over_capacity",
        "lifecycle.every_phase_reachable",
        "terms.plain_acceptance_cannot_launder_harm",
        "capacity.refusal_justified_by_reserved_blocks",
        "duration.no_expiry_before_promised_duration",
        "duration.extensions_only_lengthen_within_the_cap",
        "blocks.holders_keep_their_content",
        "restore.satisfied_reuse_only_after_confirmed_restore",
    }
    assert required <= names
    assert {o.method for o in all_obligations()} == set(Method)


def test_spacer_invariants_are_rechecked_and_witnesses_replayed(results: list[ProofResult]) -> None:
    for result in results:
        if result.method is Method.spacer_invariant:
            assert result.detail["invariant_rechecked"] is True, result.name
        for witness in result.detail.get("witnesses", []):
            assert witness.get("python_agrees", witness.get("python_replay_agrees")) is True, result.name


def test_same_seed_same_result_in_one_process() -> None:
    chosen = [
        o
        for o in all_obligations()
        if o.name in ("lowering.every_label_reachable", "lifecycle.no_harm_after_demotion_or_expiry")
    ]
    first = [result_json(run_obligation(o)) for o in chosen]
    second = [result_json(run_obligation(o)) for o in chosen]
    assert first == second


def test_an_exhausted_budget_is_unknown_not_proved() -> None:
    obligation = next(o for o in all_obligations() if o.name == "lowering.fail_closed_monotonicity")
    result = run_obligation(obligation, rlimit=1000)
    assert result.verdict is Verdict.unknown and not result.proved
