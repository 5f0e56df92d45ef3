"""The routing hook against a stand-in router on loopback (no vLLM): the decision is read from
the router's metrics, the outcome from the engine's answer, and the stream it writes is judged
by the fleet check with hand-written engine streams."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from support.http_server import loopback_http

from kvclaims.lab.router_hook import RoutingHook, RoutingUnobserved, engine_request_id, metric_samples
from kvclaims.refinement.fleet import check_fleet
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.refinement.verdict import Outcome
from kvclaims.spec.trace import RouteOutcome

WORKERS = {"http://127.0.0.1:1": "A", "http://127.0.0.1:2": "B"}


class StandIn:
    """A router that sends every request to `route_to`, counts it in Prometheus text like
    vllm-router, and answers with the engine answer the test sets."""

    def __init__(self) -> None:
        self.route_to = "http://127.0.0.1:1"
        self.prefix_hit = False
        self.answer: dict[str, Any] = {}
        self.count_workers = 1
        self.processed = dict.fromkeys(WORKERS, 0)
        self.hits = 0

    def metrics(self) -> str:
        lines = [
            f'vllm_router_processed_requests_total{{worker="{w}"}} {n}' for w, n in self.processed.items()
        ]
        lines += [f'vllm_router_worker_health{{worker="{w}"}} 1' for w in WORKERS]
        hit = 'policy="cache_aware",outcome="prefix_hit"'
        lines.append(f"vllm_router_prefix_routing_decisions_total{{{hit}}} {self.hits}")
        return "# HELP ignored\n" + "\n".join(lines) + "\n"

    def complete(self) -> dict[str, Any]:
        for worker in list(WORKERS) if self.count_workers > 1 else [self.route_to]:
            self.processed[worker] += 1
        self.hits += self.prefix_hit
        return self.answer


@pytest.fixture
def router() -> Iterator[tuple[StandIn, str]]:
    stand_in = StandIn()

    class Handler(BaseHTTPRequestHandler):
        def _send(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(stand_in.metrics().encode())

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send(json.dumps(stand_in.complete()).encode())

        def log_message(self, *args: object) -> None:
            pass

    with loopback_http(Handler) as url:
        yield stand_in, url


def answer(note: str, cached_tokens: int) -> dict[str, Any]:
    return {
        "choices": [{"stop_reason": note}],
        "usage": {"prompt_tokens_details": {"cached_tokens": cached_tokens}},
    }


def hook_for(url: str, path: Path) -> RoutingHook:
    return RoutingHook(url, f"{url}/metrics", WORKERS, path, block_size=32, model="tiny")


def submitted(router: tuple[StandIn, str], path: Path) -> tuple[StandIn, RoutingHook]:
    """A hook whose claim `c1` (2 blocks) the engine behind the stand-in accepted."""
    stand_in, url = router
    hook = hook_for(url, path)
    stand_in.answer = answer("kvclaims:claim_accepted:c1", 0)
    assert hook.submit(url, "s", [1] * 65, "c1", 2) == "kvclaims:claim_accepted:c1"
    return stand_in, hook


def test_metric_samples_reads_labelled_samples_only() -> None:
    text = '# TYPE x counter\nx{worker="u",a="b"} 3\nplain 4\ny{} 1.5\n'
    assert metric_samples(text) == {
        ("x", frozenset({("worker", "u"), ("a", "b")})): 3.0,
        ("y", frozenset()): 1.5,
    }


def test_a_predicted_hit_delivered_and_one_missed_elsewhere_are_judged_accepted(
    router: tuple[StandIn, str], tmp_path: Path
) -> None:
    stand_in, hook = submitted(router, tmp_path / "router.ndjson")
    stand_in.prefix_hit, stand_in.answer = True, answer("kvclaims:claim_attached:c1", 64)
    hit = hook.reuse("hit", [1] * 65, "c1")
    assert (hit.engine, hit.predicted_hit_blocks, hit.delivered_blocks, hit.outcome) == (
        "A",
        2,
        2,
        RouteOutcome.delivered,
    )
    stand_in.route_to, stand_in.answer = (
        "http://127.0.0.1:2",
        answer("kvclaims:claim_rejected:c1:attach: no such live claim", 64),
    )
    miss = hook.reuse("miss", [1] * 65, "c1")
    assert (miss.engine, miss.predicted_hit_blocks, miss.delivered_blocks, miss.outcome) == (
        "B",
        2,
        0,
        RouteOutcome.missed,
    )
    hook.close()

    a = TraceBuilder(usable_blocks=8, engine_id="A")
    a.accept("c1", blocks=2).store_prefix("c1", 2).materialize("c1", 2)
    a.admit(engine_request_id("hit")).reuse(engine_request_id("hit"), "c1", 2).finish(
        engine_request_id("hit")
    )
    b = (
        TraceBuilder(usable_blocks=8, engine_id="B")
        .admit(engine_request_id("miss"))
        .finish(engine_request_id("miss"))
    )
    (tmp_path / "a.ndjson").write_bytes(a.ndjson())
    (tmp_path / "b.ndjson").write_bytes(b.ndjson())
    verdict = check_fleet(tmp_path / "router.ndjson", [tmp_path / "a.ndjson", tmp_path / "b.ndjson"])
    assert verdict.outcome is Outcome.accepted, verdict.reason
    assert verdict.routes == {"delivered": 1, "missed": 1}


def test_no_prefix_hit_predicts_nothing_and_fewer_cached_blocks_miss(
    router: tuple[StandIn, str], tmp_path: Path
) -> None:
    stand_in, hook = submitted(router, tmp_path / "router.ndjson")
    stand_in.answer = answer("kvclaims:claim_attached:c1", 32)  # one block of two
    routed = hook.reuse("r", [1] * 65, "c1")
    assert (routed.predicted_hit_blocks, routed.delivered_blocks, routed.outcome) == (
        0,
        1,
        RouteOutcome.missed,
    )
    hook.close()


def test_a_decision_the_metrics_do_not_pin_to_one_engine_writes_nothing(
    router: tuple[StandIn, str], tmp_path: Path
) -> None:
    stand_in, hook = submitted(router, tmp_path / "router.ndjson")
    stand_in.count_workers = 2  # both workers' counters rose: not one decision
    with pytest.raises(RoutingUnobserved):
        hook.reuse("r", [1] * 65, "c1")
    hook.close()
    assert [
        json.loads(line)["event"] for line in (tmp_path / "router.ndjson").read_text().splitlines()[1:]
    ] == ["trace_closed"]


def test_a_reuse_of_a_claim_the_hook_never_submitted_is_refused(
    router: tuple[StandIn, str], tmp_path: Path
) -> None:
    _, url = router
    hook = hook_for(url, tmp_path / "router.ndjson")
    with pytest.raises(KeyError):
        hook.reuse("r", [1], "never")
    hook.close()
