"""User-written scenario files: a good one runs; every kind of bad input is a located InputError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvclaims.lab.scenario_file import load_scenario_file, run_scenario_file
from kvclaims.spec.errors import InputError

GOOD = """\
scenario: 1
name: my-60-70-80
usable_blocks: 80
policy: hard_protected
steps:
  - claims: [{claim_id: c1, object_id: doc, mode: hard_protected, footprint_blocks: 60}]
  - prefill: {request_id: p1, object_id: doc, blocks: 60}
  - request: {request_id: a1, object_id: bulky, blocks: 70}
  - tick: 1
  - release: c1
"""


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def document(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "scenario": 1,
        "name": "case",
        "usable_blocks": 80,
        "policy": "hard_protected",
        "steps": [
            {
                "claims": [
                    {"claim_id": "c1", "object_id": "doc", "mode": "hard_protected", "footprint_blocks": 8}
                ]
            }
        ],
    }
    return base | changes


def problems(tmp_path: Path, doc: dict[str, Any]) -> str:
    with pytest.raises(InputError) as caught:
        load_scenario_file(write(tmp_path, json.dumps(doc), "scenario.json"))
    return str(caught.value)


def test_a_good_file_runs_and_reports_what_happened(tmp_path: Path) -> None:
    result = run_scenario_file(write(tmp_path, GOOD))
    assert result.summary["requests"]["a1"] == "finished"
    assert result.summary["events"]["active_request_refused"] == 1
    assert result.summary["claims"]["c1"] == "released"
    assert result.trace_checks() == {"my-60-70-80": "accepted"}


@pytest.mark.parametrize("pool", [0, -8])
def test_a_zero_or_negative_pool_is_refused(tmp_path: Path, pool: int) -> None:
    assert "positive number of usable blocks" in problems(tmp_path, document(usable_blocks=pool))


def test_a_footprint_larger_than_the_pool_is_refused(tmp_path: Path) -> None:
    message = problems(tmp_path, document(usable_blocks=4))
    assert "larger than the pool" in message and "[claims.c1]" in message


def test_duplicate_claim_ids_are_refused_even_across_steps(tmp_path: Path) -> None:
    claim = {"claim_id": "c1", "object_id": "doc", "mode": "hard_protected", "footprint_blocks": 8}
    message = problems(tmp_path, document(steps=[{"claims": [claim]}, {"claims": [claim]}]))
    assert "duplicate claim id 'c1'" in message


def test_unknown_fields_policies_and_two_operation_steps_are_refused(tmp_path: Path) -> None:
    assert "steps.0" in problems(tmp_path, document(steps=[{"tick": 1, "release": "c1"}]))
    assert "unknown policy" in problems(tmp_path, document(policy="magic"))
    assert "[colour]" in problems(tmp_path, document(colour="blue"))


def test_not_yaml_and_not_a_mapping_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not YAML"):
        load_scenario_file(write(tmp_path, "steps: [\n"))
    with pytest.raises(InputError, match="mapping"):
        load_scenario_file(write(tmp_path, "- 1\n"))
    with pytest.raises(InputError, match="no such file"):
        load_scenario_file(tmp_path / "missing.yaml")


def test_an_operation_the_claim_phase_forbids_names_its_step(tmp_path: Path) -> None:
    text = GOOD + "  - demote: c1\n"
    with pytest.raises(InputError, match=r"\[steps\.5\].*demote is not allowed"):
        run_scenario_file(write(tmp_path, text))


SOFT_TERMS = """\
scenario: 1
name: capped-and-extended
usable_blocks: 80
policy: hard_protected
steps:
  - claims: [{claim_id: c1, object_id: doc, mode: expiring, footprint_blocks: 8, duration_steps: 4,
              max_duration_steps: 10}]
  - prefill: {request_id: p1, object_id: doc, blocks: 8}
  - extend: {claim_id: c1, duration_steps: 6}
  - extend: {claim_id: c1, duration_steps: 50}
  - extend: {claim_id: c1, duration_steps: 1}
  - tick: 20
"""


def test_extensions_are_granted_clipped_at_the_cap_or_refused_and_the_trace_conforms(tmp_path: Path) -> None:
    result = run_scenario_file(write(tmp_path, SOFT_TERMS))
    outcomes = [e["outcome"] for e in result.summary["extensions"]]
    assert outcomes == ["granted", "clipped", "refused"]
    assert result.summary["events"]["resident_claim_extended"] == 2
    assert result.summary["claims"]["c1"] == "expired"
    assert result.trace_checks() == {"capped-and-extended": "accepted"}


def test_a_cap_without_its_duration_and_a_bad_extension_are_refused(tmp_path: Path) -> None:
    claim = {"claim_id": "c1", "object_id": "doc", "mode": "hard_protected", "footprint_blocks": 8}
    message = problems(tmp_path, document(steps=[{"claims": [claim | {"max_duration_steps": 3}]}]))
    assert "a cap needs duration_steps" in message
    extend = {"extend": {"claim_id": "c1", "duration_steps": 0}}
    assert "steps.1.extend.duration_steps" in problems(
        tmp_path, document(steps=[*document()["steps"], extend])
    )
