"""NVIDIA Dynamo's KV router decisions (`ActiveSequenceEvent`) as a fleet's router stream.

The captures are built here in the serializer's exact JSON form (serde's default: externally
tagged `data`, `Option` as null), written from ai-dynamo/dynamo@cfa22544 lib/kv-router/src/
protocols.rs; Dynamo does not run on this machine, so no capture comes from a live router.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvclaims.cli import main
from kvclaims.refinement.abstractions.dynamo_router import FORMAT, NOT_NUMBERED
from kvclaims.refinement.fleet import check_fleet
from kvclaims.refinement.testing import TraceBuilder, write_fleet
from kvclaims.refinement.verdict import ErrorClass, Outcome
from kvclaims.spec.vocabulary import ConformanceRule as R

HOLDER, OTHER = "7", "9"  # Dynamo worker ids, as the engines' headers name them
BLOCK = 16


def holder(*, reuse: int = 2, satisfied: bool = True) -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=8, block_size=BLOCK)
    trace.accept("c1", blocks=2, footprint=2).store_prefix("c1", 2).materialize("c1", 2)
    trace.admit("r1").reuse("r1", "c1", reuse, satisfied).finish("r1")
    return trace


def other(block_size: int = BLOCK) -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=8, block_size=block_size)
    trace.admit("r2", blocks=3).finish("r2")
    return trace


def added(
    request: str,
    worker: int,
    *,
    overlap: int = 2,
    isl: int = 48,
    blocks: int | None = 3,
    dp_rank: int = 0,
) -> dict[str, Any]:
    """One `ActiveSequenceEvent` with `AddRequest`, as serde_json writes it."""
    sequence = None if blocks is None else [0x9E3779B97F4A7C15 + i for i in range(blocks)]
    return {
        "request_id": request,
        "worker": {"worker_id": worker, "dp_rank": dp_rank},
        "data": {
            "AddRequest": {
                "token_sequence": sequence,
                "isl": isl,
                "overlap": overlap,
                "expected_output_tokens": None,
            }
        },
        "router_id": 3,
        "lora_name": None,
    }


def unit(request: str, worker: int, variant: str) -> dict[str, Any]:
    """A unit-variant event (`Free`, `MarkPrefillCompleted`): serde writes the variant's name."""
    return {**added(request, worker), "data": variant}


def check(
    tmp_path: Path,
    records: list[dict[str, Any]] | bytes,
    *,
    claims: dict[str, str] | None = None,
    engines: dict[str, TraceBuilder] | None = None,
):
    engines = engines if engines is not None else {HOLDER: holder(), OTHER: other()}
    _, paths = write_fleet(tmp_path, TraceBuilder(), engines)
    capture = tmp_path / "decisions.jsonl"
    if isinstance(records, bytes):
        capture.write_bytes(records)
    else:
        capture.write_text("".join(json.dumps(r) + "\n" for r in records))
    claims_path = tmp_path / "claims.json"
    claims_path.write_text(json.dumps(claims if claims is not None else {"r1": "c1", "r2": "c1"}) + "\n")
    return check_fleet(capture, paths, router_format=FORMAT, claims=claims_path)


def test_a_decision_for_the_holder_is_a_delivered_reuse(tmp_path: Path) -> None:
    records = [added("r1", 7), unit("r1", 7, "MarkPrefillCompleted"), unit("r1", 7, "Free")]
    verdict = check(tmp_path, records)
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert verdict.routes == {"delivered": 1, "missed": 0}
    assert NOT_NUMBERED in verdict.notes


def test_a_decision_for_another_engine_is_a_miss(tmp_path: Path) -> None:
    verdict = check(tmp_path, [added("r2", 9)])
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert verdict.routes == {"delivered": 0, "missed": 1}


def test_a_predicted_overlap_beyond_what_was_served_is_a_miss(tmp_path: Path) -> None:
    verdict = check(tmp_path, [added("r1", 7, overlap=3)])
    assert verdict.routes == {"delivered": 0, "missed": 1}


def test_a_reuse_whose_predicate_failed_is_a_miss(tmp_path: Path) -> None:
    verdict = check(tmp_path, [added("r1", 7)], engines={HOLDER: holder(satisfied=False), OTHER: other()})
    assert verdict.routes == {"delivered": 0, "missed": 1}


def test_a_claim_accepted_on_two_engines_is_still_rejected(tmp_path: Path) -> None:
    verdict = check(tmp_path, [added("r1", 7)], engines={HOLDER: holder(), OTHER: holder()})
    assert verdict.outcome is Outcome.rejected
    assert verdict.counterexample is not None and verdict.counterexample.rule is R.route_placement


def _field(record: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    copy = json.loads(json.dumps(record))
    *outer, last = path.split(".")
    target = copy
    for key in outer:
        target = target[key]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return copy


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("priority", 1, "priority"),  # a field the serializer does not write
        ("worker.rank", 0, "worker.rank"),
        ("data.AddRequest.cached", 1, "data"),
        ("router_id", _DELETE, "router_id"),  # missing fields
        ("data.AddRequest.expected_output_tokens", _DELETE, "data"),
        ("worker.worker_id", "7", "worker.worker_id"),  # wrong JSON types
        ("worker.worker_id", 2**64, "worker.worker_id"),
        ("data.AddRequest.overlap", True, "data"),
        ("data", "Evict", "data"),  # a variant the enum does not have
    ],
)
def test_a_record_outside_the_serializer_format_is_invalid(
    tmp_path: Path, path: str, value: Any, field: str
) -> None:
    verdict = check(tmp_path, [_field(added("r1", 7), path, value)])
    assert verdict.outcome is Outcome.invalid
    assert verdict.finding is not None and verdict.finding.line == 1
    assert verdict.finding.field is not None and verdict.finding.field.startswith(field)


def test_a_duplicate_key_is_invalid(tmp_path: Path) -> None:
    line = json.dumps(added("r1", 7))
    verdict = check(tmp_path, (line[:-1] + ', "router_id": 4}\n').encode())
    assert verdict.outcome is Outcome.invalid and verdict.finding.field == "router_id"


def test_a_truncated_last_record_is_invalid(tmp_path: Path) -> None:
    line = json.dumps(added("r1", 7))
    verdict = check(tmp_path, (line + "\n" + line[:40]).encode())
    assert verdict.outcome is Outcome.invalid and verdict.finding.line == 2


def test_a_request_decided_twice_is_ambiguous(tmp_path: Path) -> None:
    verdict = check(tmp_path, [added("r1", 7), added("r1", 9)])
    assert verdict.outcome is Outcome.invalid
    assert (verdict.finding.line, verdict.finding.field) == (2, "request_id")


def test_a_request_freed_before_it_was_decided_is_invalid(tmp_path: Path) -> None:
    verdict = check(tmp_path, [unit("r1", 7, "Free"), added("r1", 7)])
    assert verdict.outcome is Outcome.invalid and verdict.finding.line == 1


def test_a_worker_no_engine_stream_names_fails_closed(tmp_path: Path) -> None:
    verdict = check(tmp_path, [added("r1", 7), added("r2", 8)])
    assert verdict.outcome is Outcome.inconclusive
    assert verdict.finding.error_class is ErrorClass.undecidable
    assert (verdict.finding.line, verdict.finding.field) == (2, "worker.worker_id")


def test_a_data_parallel_rank_is_its_own_engine(tmp_path: Path) -> None:
    verdict = check(tmp_path, [added("r1", 7, dp_rank=1)])
    assert verdict.outcome is Outcome.inconclusive and "7:1" in verdict.finding.message


@pytest.mark.parametrize(
    ("record", "engines", "field"),
    [
        # the router cut 48 tokens into 6 blocks (block size 8); the engines' blocks are 16
        (added("r1", 7, blocks=6, overlap=4), None, "data.AddRequest.token_sequence"),
        (added("r2", 9), {HOLDER: holder(), OTHER: other(block_size=32)}, "data.AddRequest.token_sequence"),
        (added("r1", 7, blocks=None), None, "data.AddRequest.token_sequence"),  # units unknown
        (added("r1", 7, overlap=4), None, "data.AddRequest.overlap"),
    ],
)
def test_a_block_size_mismatch_fails_closed(
    tmp_path: Path, record: dict[str, Any], engines: dict[str, TraceBuilder] | None, field: str
) -> None:
    verdict = check(tmp_path, [record], engines=engines)
    assert verdict.outcome is Outcome.inconclusive
    assert verdict.finding.error_class is ErrorClass.undecidable and verdict.finding.field == field


def test_a_request_no_claim_names_fails_closed(tmp_path: Path) -> None:
    verdict = check(tmp_path, [added("r1", 7)], claims={"r2": "c1"})
    assert verdict.outcome is Outcome.inconclusive and verdict.finding.field == "request_id"


def test_a_request_the_chosen_engine_never_saw_fails_closed(tmp_path: Path) -> None:
    verdict = check(tmp_path, [added("r3", 9)], claims={"r3": "c1"})
    assert verdict.outcome is Outcome.inconclusive and "no record of request r3" in verdict.reason


@pytest.mark.parametrize(
    "claims", [b'{"r1": "c1", "r1": "c2"}\n', b'{"r1": 5}\n', b"[]\n", b'{"r1": "c1"}\n{}\n']
)
def test_a_malformed_claims_file_is_invalid(tmp_path: Path, claims: bytes) -> None:
    _, paths = write_fleet(tmp_path, TraceBuilder(), {HOLDER: holder(), OTHER: other()})
    capture = tmp_path / "decisions.jsonl"
    capture.write_text(json.dumps(added("r1", 7)) + "\n")
    (tmp_path / "claims.json").write_bytes(claims)
    verdict = check_fleet(capture, paths, router_format=FORMAT, claims=tmp_path / "claims.json")
    assert verdict.outcome is Outcome.invalid


def test_an_empty_capture_routes_nothing(tmp_path: Path) -> None:
    assert check(tmp_path, b"").outcome is Outcome.inconclusive


def test_an_unknown_router_format_is_invalid(tmp_path: Path) -> None:
    router, paths = write_fleet(tmp_path, TraceBuilder(), {HOLDER: holder()})
    assert check_fleet(router, paths, router_format="nginx").outcome is Outcome.invalid


def test_kvclaims_check_fleet_reads_dynamo_decisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check(tmp_path, [added("r2", 9)])  # writes the fleet's files
    engines = sorted(str(p) for p in tmp_path.glob("engine-*.ndjson"))
    args = ["check", "--fleet", str(tmp_path / "decisions.jsonl"), "--router-format", FORMAT]
    assert main([*args, "--router-claims", str(tmp_path / "claims.json"), *engines]) == 0
    shown = capsys.readouterr().out
    assert "accepted fleet" in shown and "0 delivered, 1 missed" in shown
    assert main(["check", "--router-format", FORMAT, *engines]) == 2


def test_another_dynamo_commits_record_is_refused(tmp_path: Path) -> None:
    # AddRequest as other Dynamo commits write it: no isl or overlap, two other fields
    record = added("r1", 7)
    record["data"] = {
        "AddRequest": {
            "token_sequence": [1, 2, 3],
            "track_prefill_tokens": True,
            "expected_output_tokens": None,
            "prefill_load_hint": None,
        }
    }
    verdict = check(tmp_path, [record])
    assert verdict.outcome is Outcome.invalid and verdict.finding.line == 1


def test_a_free_naming_another_worker_than_its_decision_is_invalid(tmp_path: Path) -> None:
    verdict = check(tmp_path, [added("r1", 7), unit("r1", 9, "Free")])
    assert verdict.outcome is Outcome.invalid
    assert (verdict.finding.line, verdict.finding.field) == (2, "worker")


def test_a_request_under_an_adapter_fails_closed(tmp_path: Path) -> None:
    verdict = check(tmp_path, [{**added("r1", 7), "lora_name": "sql-adapter"}])
    assert verdict.outcome is Outcome.inconclusive and verdict.finding.field == "lora_name"
