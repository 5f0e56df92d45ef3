"""`check_fleet`: engine streams and a router stream judged together, without a global clock.

Each test writes a small fleet by hand: engine A holds claim `c1` (accepted, materialized) and
serves its reuse by `r1`; engine B serves `r2`, which it does not attribute to `c1`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvclaims.refinement.fleet import check_fleet
from kvclaims.refinement.testing import TraceBuilder, write_fleet
from kvclaims.refinement.verdict import Outcome
from kvclaims.spec.vocabulary import ConformanceRule as R


def engine_a(*, reuse: int = 2, satisfied: bool = True, predicate: int = 2) -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=8)
    trace.accept("c1", blocks=predicate, footprint=2).store_prefix("c1", 2).materialize("c1", 2)
    trace.admit("r1").reuse("r1", "c1", reuse, satisfied).finish("r1")
    return trace


def engine_b(*, requests: tuple[str, ...] = ("r2",)) -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=8)
    for request in requests:
        trace.admit(request, blocks=3).finish(request)
    return trace


def router() -> TraceBuilder:
    return TraceBuilder(usable_blocks=None, block_size=None, source="test router")


def check(
    tmp_path: Path, routes: TraceBuilder, engines: dict[str, TraceBuilder] | None = None, **kwargs: bool
):
    engines = engines if engines is not None else {"A": engine_a(), "B": engine_b()}
    router_path, paths = write_fleet(tmp_path, routes, engines, **kwargs)
    return check_fleet(router_path, paths)


def test_reuse_routed_to_the_holder_is_delivered(tmp_path: Path) -> None:
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "delivered")
    verdict = check(tmp_path, routes)
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert verdict.routes == {"delivered": 1, "missed": 0}


def test_reuse_routed_to_another_engine_is_a_reported_miss(tmp_path: Path) -> None:
    routes = router().route("r2", "c1", "B", predicted=2).report_route("r2", "c1", "B", 0, "missed")
    verdict = check(tmp_path, routes)
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert verdict.routes == {"delivered": 0, "missed": 1}


def test_a_miss_reported_as_delivered_is_rejected(tmp_path: Path) -> None:
    routes = router().route("r2", "c1", "B", predicted=2).report_route("r2", "c1", "B", 0, "delivered")
    verdict = check(tmp_path, routes)
    assert verdict.outcome is Outcome.rejected
    assert verdict.counterexample is not None and verdict.counterexample.rule is R.route_miss_reported
    assert verdict.where == str(tmp_path / "router.ndjson") and verdict.counterexample.line == 3


def test_a_delivered_hit_reported_as_missed_is_rejected(tmp_path: Path) -> None:
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "missed")
    assert check(tmp_path, routes).counterexample.rule is R.route_miss_reported  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("cached", "satisfied", "predicate"),
    [(1, True, 1), (1, False, 2)],
    ids=["fewer-blocks-than-predicted", "predicate-not-satisfied"],
)
def test_a_partial_hit_on_the_holder_is_a_miss(
    tmp_path: Path, cached: int, satisfied: bool, predicate: int
) -> None:
    """The router predicted 2 blocks; the holder served 1 (its predicate held, or not)."""
    engines = {"A": engine_a(reuse=cached, satisfied=satisfied, predicate=predicate), "B": engine_b()}
    predicted = 2
    missed = (
        router().route("r1", "c1", "A", predicted=predicted).report_route("r1", "c1", "A", cached, "missed")
    )
    assert check(tmp_path, missed, engines).outcome is Outcome.accepted
    delivered = (
        router()
        .route("r1", "c1", "A", predicted=predicted)
        .report_route("r1", "c1", "A", cached, "delivered")
    )
    assert check(tmp_path, delivered, engines).counterexample.rule is R.route_miss_reported  # type: ignore[union-attr]


def test_an_unreported_route_is_a_silent_miss(tmp_path: Path) -> None:
    verdict = check(tmp_path, router().route("r2", "c1", "B", predicted=2))
    assert verdict.outcome is Outcome.rejected
    assert verdict.counterexample is not None and verdict.counterexample.rule is R.route_miss_reported
    assert "never reported" in verdict.reason


def test_blocks_attributed_on_an_engine_that_does_not_hold_the_claim_are_rejected(tmp_path: Path) -> None:
    routes = router().route("r2", "c1", "B", predicted=2).report_route("r2", "c1", "B", 2, "missed")
    verdict = check(tmp_path, routes)
    assert verdict.counterexample is not None and verdict.counterexample.rule is R.route_attribution


@pytest.mark.parametrize(("claim", "engine"), [("c2", "A"), ("c1", "B")], ids=["other-claim", "other-engine"])
def test_a_report_that_does_not_match_its_decision_is_rejected(
    tmp_path: Path, claim: str, engine: str
) -> None:
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", claim, engine, 0, "missed")
    assert check(tmp_path, routes).counterexample.rule is R.route_attribution  # type: ignore[union-attr]


def test_a_request_routed_twice_is_rejected(tmp_path: Path) -> None:
    routes = router().route("r1", "c1", "A").route("r1", "c1", "B")
    assert check(tmp_path, routes).counterexample.rule is R.route_attribution  # type: ignore[union-attr]


def test_a_claim_accepted_on_two_engines_is_rejected(tmp_path: Path) -> None:
    twice = engine_b()
    twice.accept("c1", blocks=2)
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "delivered")
    verdict = check(tmp_path, routes, {"A": engine_a(), "B": twice})
    assert verdict.counterexample is not None and verdict.counterexample.rule is R.route_placement
    assert verdict.where == str(tmp_path / "engine-1.ndjson")


def test_two_streams_of_one_engine_fail_closed(tmp_path: Path) -> None:
    """A restart: engine A wrote a second stream; which came first is not in the evidence."""
    restarted = engine_b(requests=("r1",))
    restarted.header["engine_id"] = "A"
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "delivered")
    verdict = check(tmp_path, routes, {"A": engine_a(), "A2": restarted, "B": engine_b()})
    assert verdict.outcome is Outcome.inconclusive
    assert "engine A has 2 streams" in verdict.reason


def test_a_request_missing_from_the_chosen_engine_fails_closed(tmp_path: Path) -> None:
    """A sequence gap: the stream of engine B has no record of r3 (lost with a restart)."""
    routes = router().route("r3", "c1", "B", predicted=2).report_route("r3", "c1", "B", 0, "missed")
    verdict = check(tmp_path, routes)
    assert verdict.outcome is Outcome.inconclusive
    assert "no record of request r3" in verdict.reason


def test_a_truncated_engine_stream_fails_closed(tmp_path: Path) -> None:
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "delivered")
    router_path, paths = write_fleet(tmp_path, routes, {"A": engine_a(), "B": engine_b()})
    paths[0].write_bytes(paths[0].read_bytes().rsplit(b"\n", 2)[0] + b"\n")  # killed: no trace_closed
    verdict = check_fleet(router_path, paths)
    assert verdict.outcome is Outcome.inconclusive
    assert verdict.where == str(paths[0])


def test_a_claim_no_stream_accepted_fails_closed(tmp_path: Path) -> None:
    routes = router().route("r2", "c9", "B", predicted=2).report_route("r2", "c9", "B", 0, "missed")
    assert check(tmp_path, routes).outcome is Outcome.inconclusive


def test_an_engine_stream_without_engine_id_fails_closed(tmp_path: Path) -> None:
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "delivered")
    router_path, paths = write_fleet(tmp_path, routes, {"A": engine_a()})
    anonymous = engine_b()
    anonymous_path = tmp_path / "anonymous.ndjson"
    anonymous_path.write_bytes(anonymous.ndjson())
    verdict = check_fleet(router_path, [*paths, anonymous_path])
    assert verdict.outcome is Outcome.inconclusive and verdict.finding is not None
    assert verdict.finding.field == "engine_id"


def test_a_truncated_router_stream_fails_closed(tmp_path: Path) -> None:
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "delivered")
    verdict = check(tmp_path, routes, closed=False)
    assert verdict.outcome is Outcome.inconclusive and "truncated" in verdict.reason


def test_a_router_stream_routing_nothing_is_inconclusive(tmp_path: Path) -> None:
    assert check(tmp_path, router()).outcome is Outcome.inconclusive


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (b'{"seq":1,"event":"route_decided","request_id":"r1","request_id":"r2","claim_id":"c1",'
         b'"candidate_engines":["A"],"chosen_engine":"A","predicted_hit_blocks":0}', "request_id"),
        (b'{"seq":1,"event":"route_decided","request_id":"r1","claim_id":"c1","candidate_engines":["A"],'
         b'"chosen_engine":"A","predicted_hit_blocks":0,"predicted_hit":true}', "predicted_hit"),
        (b'{"seq":1,"event":"route_decided","request_id":"r1","claim_id":"c1","candidate_engines":["A"],'
         b'"chosen_engine":"B","predicted_hit_blocks":0}', None),
        (b'{"seq":1,"event":"route_decided","request_id":"r1","claim_id":"c1","candidate_engines":["A","A"],'
         b'"chosen_engine":"A","predicted_hit_blocks":0}', None),
        (b'{"seq":1,"event":"route_decided","request_id":"r1","claim_id":"c1","candidate_engines":["A"],'
         b'"chosen_engine":"A","predicted_hit_blocks":"2"}', "predicted_hit_blocks"),
        (b'{"seq":1,"event":"route_reuse_reported","request_id":"r1","claim_id":"c1","engine":"A",'
         b'"delivered_blocks":2,"outcome":"hit"}', "outcome"),
        (b'{"seq":1,"event":"request_reused","request_id":"r1","claim_id":"c1","cached_blocks":2,'
         b'"predicate_satisfied":true}', "event"),
    ],
    ids=["duplicate-key", "unknown-field", "chosen-not-candidate", "candidate-twice", "string-number",
         "unknown-outcome", "engine-event"],
)  # fmt: skip
def test_a_malformed_router_line_is_invalid(tmp_path: Path, line: bytes, field: str | None) -> None:
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "delivered")
    router_path, paths = write_fleet(tmp_path, routes, {"A": engine_a(), "B": engine_b()})
    lines = router_path.read_bytes().splitlines(keepends=True)
    lines[1] = line + b"\n"  # replaces the decision (seq 0) by the malformed line
    router_path.write_bytes(b"".join(lines))
    verdict = check_fleet(router_path, paths)
    assert verdict.outcome is Outcome.invalid, verdict.reason
    assert verdict.finding is not None and verdict.finding.line == 2
    if field is not None:
        assert verdict.finding is not None and verdict.finding.field == field


def test_a_seq_that_does_not_increase_is_invalid(tmp_path: Path) -> None:
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "delivered", seq=0)
    verdict = check(tmp_path, routes)
    assert verdict.outcome is Outcome.invalid and verdict.finding is not None
    assert (verdict.finding.line, verdict.finding.field) == (3, "seq")


def test_a_line_after_trace_closed_is_invalid(tmp_path: Path) -> None:
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "delivered")
    router_path, paths = write_fleet(tmp_path, routes, {"A": engine_a(), "B": engine_b()})
    with router_path.open("ab") as stream:
        stream.write(b'{"seq":9,"event":"trace_closed","reason":"closed"}\n')
    assert check_fleet(router_path, paths).outcome is Outcome.invalid


def test_a_rejected_engine_stream_rejects_the_fleet(tmp_path: Path) -> None:
    broken = engine_a()
    broken.finish("r1")  # finished twice
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "delivered")
    verdict = check(tmp_path, routes, {"A": broken, "B": engine_b()})
    assert verdict.outcome is Outcome.rejected and verdict.where == str(tmp_path / "engine-0.ndjson")


def test_kvclaims_check_fleet_prints_the_verdict_and_exits_with_its_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvclaims.cli import main

    routes = router().route("r2", "c1", "B", predicted=2).report_route("r2", "c1", "B", 0, "missed")
    router_path, paths = write_fleet(tmp_path, routes, {"A": engine_a(), "B": engine_b()})
    assert main(["check", "--fleet", str(router_path), *map(str, paths)]) == 0
    shown = capsys.readouterr().out
    assert "accepted fleet" in shown and "0 delivered, 1 missed" in shown
    assert main(["check", "--json", "--fleet", str(router_path), str(paths[0])]) == 3  # B's stream missing
    document = json.loads(capsys.readouterr().out)
    assert document["outcome"] == "inconclusive" and "no stream" in document["reason"]
    assert main(["check", "--fleet", str(router_path), "--strict", *map(str, paths)]) == 2


def test_a_sequence_gap_in_an_engine_stream_fails_closed(tmp_path: Path) -> None:
    """Refinement accepts a stream whose seq skips numbers; the fleet check does not read
    routing facts from it (a skipped event may be the claim's acceptance or reuse)."""
    gapped = engine_a()
    gapped.events[-1]["seq"] += 5  # the finish of r1
    routes = router().route("r1", "c1", "A", predicted=2).report_route("r1", "c1", "A", 2, "delivered")
    verdict = check(tmp_path, routes, {"A": gapped, "B": engine_b()})
    assert verdict.engines[0].verdict.outcome is Outcome.accepted
    assert verdict.outcome is Outcome.inconclusive and verdict.finding is not None
    assert (verdict.where, verdict.finding.field) == (str(tmp_path / "engine-0.ndjson"), "seq")
    assert "sequence gap" in verdict.reason
