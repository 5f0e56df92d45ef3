"""The fleet lane: two vLLM engines with the binding behind vllm-router, the routing hook in
front, and the fleet check on what they wrote.

`run_fleet(out)` starts two `kvclaims serve` engines (the tiny model, CPU, 24 KV blocks each,
one core each, engine ids `A` and `B` in their trace headers) and `vllm-router` (cache_aware
policy, retries off) on loopback, runs the scenarios, stops everything (SIGTERM; the process
group is killed if it does not exit) and checks each scenario's router stream with the engines'
streams (`check_fleet`). Scenarios (each its own router stream):

- `routed-to-holder`: a claim submitted through the router is kept on the engine that accepted
  it; its reuse, through the router, goes there (predicted hit) and is delivered: accepted.
- `routed-elsewhere`: the router learned a prefix on one engine (an ordinary request) while the
  claim on that prefix was submitted directly to the other; the reuse goes where the router
  predicts a hit, which does not hold the claim: a reported miss, accepted.
- `engine-restart`: a claim is accepted on one engine, which is then restarted (a new trace
  stream for the same engine id); its reuse goes to the restarted engine: with both streams,
  the order between them is not in the evidence; with only the new one, no engine holds the
  claim: inconclusive both ways, never accepted.

Memory: at most two engines at once (about 2.5 GiB); the restart stops one before starting it
again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kvclaims.lab.local_server import free_port, wait_healthy
from kvclaims.lab.router_hook import RoutingHook
from kvclaims.refinement.evidence import evidence_items
from kvclaims.refinement.fleet import FleetVerdict, check_fleet, routing_evidence_items
from kvclaims.spec.descriptor import load_descriptor
from kvclaims.spec.lowering import lower
from kvclaims.spec.verdict import Verdict
from kvclaims.spec.vocabulary import AdapterDepth, Obligation, ProtectionMode

BLOCK = 32
SERVED_NAME = "kvclaims-tiny"
STARTUP_TIMEOUT_S = 600
STOP_TIMEOUT_S = 60
CLAIM_BLOCKS = 4
ENGINE_IDS = ("A", "B")


def prompt(tag: int, blocks: int = CLAIM_BLOCKS) -> list[int]:
    """Token ids below the tiny model's 512-token vocabulary, distinct per tag, one token past
    `blocks` full blocks."""
    return [(tag * 97 + i * 7) % 500 + 1 for i in range(blocks * BLOCK + 1)]


@dataclass
class Process:
    """A started server: its process (own session, so its group can be stopped) and log."""

    process: subprocess.Popen[bytes]
    log: Path

    def wait_healthy(self, url: str, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Blocks until `url/health` answers 200 (`local_server.wait_healthy`); raises
        `ServerNotHealthy` with the log's tail if the process exits or the time runs out."""
        wait_healthy(url, timeout_s=timeout_s, process=self.process, log=self.log)

    def stop(self) -> None:
        """SIGTERM, then kill the whole process group if it does not exit in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=STOP_TIMEOUT_S)


@dataclass
class Engine:
    """One engine: its id, port, and the trace streams it wrote (one per start)."""

    engine_id: str
    core: int
    port: int
    directory: Path
    streams: list[Path] = field(default_factory=list)
    server: Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, model: Path) -> None:
        """Start `kvclaims serve` writing a new trace stream."""
        trace = self.directory / f"engine-{self.engine_id}-{len(self.streams)}.ndjson"
        self.streams.append(trace)
        log = trace.with_suffix(".log")
        command = [
            sys.executable, "-m", "kvclaims", "serve", str(model), "--trace", str(trace),
            "--binding-config", json.dumps({"engine_id": self.engine_id}),
            "--host", "127.0.0.1", "--port", str(self.port), "--served-model-name", SERVED_NAME,
            "--skip-tokenizer-init", "--enforce-eager", "--dtype", "float32", "--block-size", str(BLOCK),
            "--max-model-len", "512", "--num-gpu-blocks-override", "24", "--max-num-seqs", "4",
            "--max-num-batched-tokens", "1024", "--enable-prompt-tokens-details",
        ]  # fmt: skip
        environment = {
            **os.environ,
            "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_CPU_OMP_THREADS_BIND": str(self.core),
            "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION": "1",
        }
        with log.open("wb") as output:
            process = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, env=environment, start_new_session=True
            )
        self.server = Process(process, log)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


@dataclass
class Fleet:
    """Two engines behind one vllm-router."""

    engines: dict[str, Engine]
    router_url: str
    metrics_url: str
    directory: Path
    timings: dict[str, float] = field(default_factory=dict)

    def hook(self, scenario: str) -> RoutingHook:
        """A routing hook writing the scenario's router stream."""
        workers = {engine.url: engine.engine_id for engine in self.engines.values()}
        trace = self.directory / f"router-{scenario}.ndjson"
        return RoutingHook(
            self.router_url, self.metrics_url, workers, trace, block_size=BLOCK, model=SERVED_NAME
        )

    def restart(self, engine_id: str, model: Path) -> None:
        """Stop one engine and start it again on its port (a new trace stream)."""
        engine = self.engines[engine_id]
        started = time.monotonic()
        engine.stop()
        engine.start(model)
        assert engine.server is not None
        engine.server.wait_healthy(engine.url)
        self.timings["restart_s"] = round(time.monotonic() - started, 1)


@contextmanager
def running_fleet(directory: Path, model: Path) -> Iterator[Fleet]:
    """Start the fleet; everything started is stopped on exit, whatever happened."""
    router_binary = Path(sys.executable).with_name("vllm-router")
    with ExitStack() as stack:
        started = time.monotonic()
        engines = {}
        for core, engine_id in enumerate(ENGINE_IDS):
            engine = Engine(engine_id, core, free_port(), directory)
            stack.callback(engine.stop)
            engine.start(model)
            engines[engine_id] = engine
        for engine in engines.values():
            assert engine.server is not None
            engine.server.wait_healthy(engine.url)
        engines_up = time.monotonic() - started
        port, metrics_port = free_port(), free_port()
        log = directory / "router.log"
        command = [
            str(router_binary), "--host", "127.0.0.1", "--port", str(port),
            "--worker-urls", *(e.url for e in engines.values()), "--policy", "cache_aware",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port),
            "--disable-retries", "--disable-circuit-breaker", "--health-check-interval-secs", "1",
        ]  # fmt: skip
        with log.open("wb") as output:
            router = Process(
                subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True),
                log,
            )
        stack.callback(router.stop)
        router_url = f"http://127.0.0.1:{port}"
        router.wait_healthy(router_url, timeout_s=60)
        fleet = Fleet(engines, router_url, f"http://127.0.0.1:{metrics_port}/metrics", directory)
        fleet.timings["engines_up_s"] = round(engines_up, 1)
        yield fleet


@dataclass(frozen=True)
class ScenarioResult:
    """A scenario's router stream, the engine streams it was checked with, and the verdict."""

    name: str
    router: Path
    engines: tuple[Path, ...]
    verdict: FleetVerdict


@dataclass
class FleetRun:
    results: list[ScenarioResult]
    timings: dict[str, float]


def _routed_to_holder(fleet: Fleet) -> None:
    hook = fleet.hook("routed-to-holder")
    try:
        hook.submit(fleet.router_url, "holder-submit", prompt(1), "claim-holder", CLAIM_BLOCKS)
        hook.reuse("holder-reuse", prompt(1), "claim-holder")
    finally:
        hook.close()


def _routed_elsewhere(fleet: Fleet) -> None:
    hook = fleet.hook("routed-elsewhere")
    try:
        learned = hook.send("elsewhere-warm", prompt(2))
        other = next(e for e in fleet.engines.values() if e.engine_id != learned)
        hook.submit(other.url, "elsewhere-submit", prompt(2), "claim-elsewhere", CLAIM_BLOCKS)
        hook.reuse("elsewhere-reuse", prompt(2), "claim-elsewhere")
    finally:
        hook.close()


def _engine_restart(fleet: Fleet, model: Path) -> str:
    hook = fleet.hook("engine-restart")
    try:
        holder = hook.send("restart-warm", prompt(3))
        hook.submit(fleet.engines[holder].url, "restart-submit", prompt(3), "claim-restart", CLAIM_BLOCKS)
        fleet.restart(holder, model)
        deadline = time.monotonic() + 60
        while holder not in hook.healthy() and time.monotonic() < deadline:
            time.sleep(0.5)
        hook.reuse("restart-reuse", prompt(3), "claim-restart")
    finally:
        hook.close()
    return holder


def run_fleet(directory: Path, model: Path) -> FleetRun:
    """Run the scenarios on a fresh fleet (see the module docstring) and check them."""
    started = time.monotonic()
    with running_fleet(directory, model) as fleet:
        _routed_to_holder(fleet)
        _routed_elsewhere(fleet)
        restarted = _engine_restart(fleet, model)
        timings = dict(fleet.timings)
        engines = fleet.engines
    timings["fleet_s"] = round(time.monotonic() - started, 1)
    first = tuple(engine.streams[0] for engine in engines.values())
    every = tuple(stream for engine in engines.values() for stream in engine.streams)
    latest = tuple(engine.streams[-1] for engine in engines.values())
    plan = [
        ("routed-to-holder", "routed-to-holder", first),
        ("routed-elsewhere", "routed-elsewhere", first),
        ("engine-restart", "engine-restart", every),
        (f"engine-restart-only-new-stream-of-{restarted}", "engine-restart", latest),
    ]
    checked = time.monotonic()
    results = [
        ScenarioResult(
            name,
            directory / f"router-{stream}.ndjson",
            streams,
            check_fleet(directory / f"router-{stream}.ndjson", streams),
        )
        for name, stream, streams in plan
    ]
    timings["check_s"] = round(time.monotonic() - checked, 2)
    return FleetRun(results, timings)


SURFACE = "two vLLM 0.32.0 engines with the kvclaims binding behind vllm-router 0.1.17 (cache_aware)"
BINDING_TRUST = (
    "kvclaims.vllm_binding on each engine (ClaimScheduler through --scheduler-cls; trusted at "
    "backend_patch depth as in the binding's own descriptor); each engine writes its own ordered "
    "trace stream, named by engine_id."
)
HOOK_TRUST = (
    "kvclaims.lab.router_hook in front of an unmodified vllm-router: it does not route; it "
    "observes the router's decision on the router's Prometheus endpoint (requests serialized) and "
    "reports what the chosen engine answered (claim note, cached tokens). Trusted at routing_hook "
    "depth for placement and reuse attribution, which kvclaims check --fleet compares with the "
    "engines' streams. Route cost is not reported (no field carries it)."
)


def fleet_descriptor(accepted: Sequence[ScenarioResult], out: Path) -> dict[AdapterDepth, Verdict]:
    """Write the fleet's descriptor to `out` (its evidence: the accepted scenarios' streams, cited
    where they lie, relative to `out`), load it back (anchors verified) and judge routed_reuse
    at routing_hook and backend_patch depth."""
    verdicts = [result.verdict for result in accepted]
    engine_items: dict[Obligation, dict[str, Any]] = {}
    for verdict in verdicts:
        for stream in verdict.engines:
            for item in evidence_items(stream.verdict, Path(stream.path), relative_to=out.parent):
                engine_items.setdefault(item.obligation, item.model_dump(mode="json", exclude_defaults=True))
    routing_items = [
        item.model_dump(mode="json", exclude_defaults=True)
        for item in routing_evidence_items(verdicts, relative_to=out.parent)
    ]
    document = {
        "descriptor": 1,
        "runtime": "vllm",
        "surface": SURFACE,
        "version": "vLLM 0.32.0 + kvclaims.vllm_binding; vllm-router 0.1.17",
        "provenance": "Generated by kvclaims.lab.fleet from fleet-lane runs accepted by kvclaims check "
        f"--fleet: {', '.join(result.name for result in accepted)}.",
        "approximation_signals": ["kv_aware_routing", "block_events"],
        "adapters": [
            {
                "name": "kvclaims-vllm-binding",
                "depth": "backend_patch",
                "trust_boundary": BINDING_TRUST,
                "evidence": [engine_items[o] for o in Obligation if o in engine_items],
            },
            {
                "name": "kvclaims-routing-hook",
                "depth": "routing_hook",
                "trust_boundary": HOOK_TRUST,
                "evidence": routing_items,
            },
        ],
    }
    out.write_text(yaml.safe_dump(document, sort_keys=False, width=100), encoding="utf-8")
    descriptor = load_descriptor(out)
    return {
        depth: lower(descriptor, ProtectionMode.routed_reuse, depth)
        for depth in (AdapterDepth.routing_hook, AdapterDepth.backend_patch)
    }
