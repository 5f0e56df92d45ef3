"""The routing hook: claim reuses sent through `vllm-router`, their routing written as a router
stream (`route_decided`, `route_reuse_reported`) for `kvclaims check --fleet`.

vllm-router (the vLLM project's load balancer, Rust) chooses the engine; this adapter does not
route. It sends a reuse of a claim through the router and observes the decision on the
router's own Prometheus endpoint, before and after the request: the worker whose
`vllm_router_processed_requests_total` rose is the chosen engine, the workers whose
`vllm_router_worker_health` is 1 the candidates, and a rise of
`vllm_router_prefix_routing_decisions_total{outcome="prefix_hit"}` means the router predicted
the prefix cached there (cache_aware policy; vllm-router reports no predicted length, so a hit
predicts the claim's predicate blocks; other policies predict nothing). Requests through the
hook are serialized (one lock), so each delta belongs to exactly one request; anything else
(no worker, two workers) raises `RoutingUnobserved` and writes no decision.

What the reuse came to is read from the engine's answer, not assumed: the binding's stop
reason `kvclaims:claim_attached:<claim>` says the engine holds the claim, and the usage's
`prompt_tokens_details.cached_tokens` how many leading blocks were served from its cache.
`kvclaims check --fleet` then compares both with each engine's own trace stream.

Request ids: the hook sends `X-Request-Id: <id>`; vLLM's completions endpoint names the engine
request `cmpl-<id>-0` when the engines run with `VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1`
(otherwise vLLM appends a random suffix, and the fleet check finds no record of the request:
inconclusive, never a silent pass). Client-side only: it imports nothing of vLLM (a lab module
because it writes routing events for the fleet lane; the binding package is what runs inside vLLM).
"""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvclaims.lab.local_server import post_json
from kvclaims.spec.trace import RouteDecided, RouteOutcome, RouteReuseReported, TraceHeader
from kvclaims.vllm_binding.metadata import NOTE_PREFIX
from kvclaims.vllm_binding.outcome import response_note
from kvclaims.vllm_binding.telemetry import TraceSink

PROCESSED = "vllm_router_processed_requests_total"
HEALTH = "vllm_router_worker_health"
PREFIX_DECISIONS = "vllm_router_prefix_routing_decisions_total"
_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>[0-9.eE+-]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
HTTP_TIMEOUT_S = 120


class RoutingUnobserved(RuntimeError):
    """The router's metrics do not name exactly one engine for the request."""


@dataclass(frozen=True)
class ClaimTerms:
    """What the hook knows of a claim it submitted: its predicate and footprint in blocks."""

    predicate_blocks: int
    footprint_blocks: int


@dataclass(frozen=True)
class Routed:
    """One routed reuse as the hook wrote it."""

    request_id: str
    engine: str
    predicted_hit_blocks: int
    delivered_blocks: int
    outcome: RouteOutcome


def engine_request_id(request_id: str) -> str:
    """The id vLLM's completions endpoint gives the engine request of `X-Request-Id: request_id`
    (prompt 0, randomization disabled)."""
    return f"cmpl-{request_id}-0"


def metric_samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text exposition -> {(name, labels): value}, for labelled samples only."""
    samples = {}
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found is not None:
            labels = frozenset(_LABEL.findall(found["labels"]))
            samples[(found["name"], labels)] = float(found["value"])
    return samples


class RoutingHook:
    """Claim reuses through one vllm-router, and the router stream they leave.

    `workers` maps each worker URL the router was given to the engine id its trace header
    names. Owns the router stream at `trace_path` (opened here, closed by `close`) and the
    claims it submitted (`claims`)."""

    def __init__(
        self,
        router_url: str,
        metrics_url: str,
        workers: Mapping[str, str],
        trace_path: Path,
        *,
        block_size: int,
        model: str,
    ) -> None:
        self.router_url = router_url
        self.metrics_url = metrics_url
        self.workers = dict(workers)
        self.block_size = block_size
        self.model = model
        self.claims: dict[str, ClaimTerms] = {}
        self._lock = threading.Lock()
        header = TraceHeader(
            kvclaims_trace=1, source=f"kvclaims routing hook for vllm-router at {router_url}"
        )
        self.sink = TraceSink.open(trace_path, header)

    def submit(
        self, url: str, request_id: str, tokens: Sequence[int], claim_id: str, footprint_blocks: int
    ) -> str:
        """Submit a hard_protected claim on the prompt's first `footprint_blocks` blocks, sent to
        `url` (the router, or one engine directly); records its terms when the engine accepted
        it and returns the binding's stop reason (the claim note)."""
        terms = {"kvclaims_claim_id": claim_id, "kvclaims_mode": "hard_protected"}
        answer = self._complete(
            url, request_id, tokens, {**terms, "kvclaims_footprint_blocks": footprint_blocks}
        )
        note = _note(answer)
        if note == f"{NOTE_PREFIX}claim_accepted:{claim_id}":
            self.claims[claim_id] = ClaimTerms(footprint_blocks, footprint_blocks)
        return note

    def send(self, request_id: str, tokens: Sequence[int]) -> str:
        """An ordinary request (no claim operation) through the router; the engine it chose."""
        with self._lock:
            before = metric_samples(self._get(self.metrics_url))
            self._complete(self.router_url, request_id, tokens, None)
            after = metric_samples(self._get(self.metrics_url))
        return self._decision(before, after)[0]

    def healthy(self) -> list[str]:
        """The engines the router reports healthy now."""
        samples = metric_samples(self._get(self.metrics_url))
        return [
            e for url, e in self.workers.items() if samples.get((HEALTH, frozenset({("worker", url)}))) == 1
        ]

    def reuse(self, request_id: str, tokens: Sequence[int], claim_id: str) -> Routed:
        """Send a reuse of `claim_id` (attach) through the router; write its decision and what
        it came to. Raises `KeyError` for a claim the hook did not submit."""
        terms = self.claims[claim_id]
        with self._lock:
            before = metric_samples(self._get(self.metrics_url))
            answer = self._complete(
                self.router_url, request_id, tokens, {"kvclaims_claim_id": claim_id, "kvclaims_op": "attach"}
            )
            after = metric_samples(self._get(self.metrics_url))
        engine, candidates, predicted_hit = self._decision(before, after)
        predicted = terms.predicate_blocks if predicted_hit else 0
        attached = _note(answer) == f"{NOTE_PREFIX}claim_attached:{claim_id}"
        details = (answer.get("usage") or {}).get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") or 0
        delivered = min(cached // self.block_size, terms.footprint_blocks) if attached else 0
        hit = attached and delivered >= max(terms.predicate_blocks, predicted)
        outcome = RouteOutcome.delivered if hit else RouteOutcome.missed
        routed_id = engine_request_id(request_id)
        self.sink.emit(
            RouteDecided,
            request_id=routed_id,
            claim_id=claim_id,
            candidate_engines=candidates,
            chosen_engine=engine,
            predicted_hit_blocks=predicted,
        )
        self.sink.emit(
            RouteReuseReported,
            request_id=routed_id,
            claim_id=claim_id,
            engine=engine,
            delivered_blocks=delivered,
            outcome=outcome,
        )
        self.sink.flush()
        return Routed(routed_id, engine, predicted, delivered, outcome)

    def close(self) -> None:
        """End the router stream (`trace_closed`)."""
        self.sink.close()

    def _decision(
        self, before: Mapping[Any, float], after: Mapping[Any, float]
    ) -> tuple[str, list[str], bool]:
        def rise(name: str, **labels: str) -> float:
            key = (name, frozenset(labels.items()))
            return after.get(key, 0.0) - before.get(key, 0.0)

        chosen = [url for url in self.workers if rise(PROCESSED, worker=url) > 0]
        if len(chosen) != 1:
            raise RoutingUnobserved(f"the router's metrics name {len(chosen)} engines for one request")
        healthy = [
            e for url, e in self.workers.items() if before.get((HEALTH, frozenset({("worker", url)}))) == 1
        ]
        engine = self.workers[chosen[0]]
        candidates = healthy if engine in healthy else [*healthy, engine]
        hits = sum(
            after[key] - before.get(key, 0.0)
            for key in after
            if key[0] == PREFIX_DECISIONS and ("outcome", "prefix_hit") in key[1]
        )
        return engine, candidates, hits > 0

    def _complete(
        self, url: str, request_id: str, tokens: Sequence[int], xargs: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The answer to one completion (a refusal's 429/503 error body too)."""
        body: dict[str, Any] = {"model": self.model, "prompt": list(tokens), "max_tokens": 2}
        if xargs is not None:
            body["vllm_xargs"] = xargs
        _, answer = post_json(
            f"{url}/v1/completions", body, headers={"X-Request-Id": request_id}, timeout_s=HTTP_TIMEOUT_S
        )
        return answer if isinstance(answer, dict) else {}

    @staticmethod
    def _get(url: str) -> str:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as answer:
            return answer.read().decode()


def _note(answer: Mapping[str, Any]) -> str:
    return response_note(answer) or ""
