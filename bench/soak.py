"""The soak, long form: `kvclaims serve` with the binding and the claim connector (load failures
injected) under N concurrent clients for D seconds, then stock vLLM's OpenAI server under the
same workload, one server at a time, on loopback, with the tiny model.

    python bench/soak.py --clients 32 --duration 300 [--out DIR] [--no-stock] [--no-hostile]

Prints one JSON object: per server the clients' outcomes (overall and per owner), latency
p50/p99 of answered requests as the clients measured them on loopback (queueing included),
requests served, peak resident memory of the API server and the engine core (VmHWM), start-up
time; for the binding also the trace's event counts, whether every seq is present, and
refinement's verdict; and the binding/stock latency ratios. Stock vLLM gets the same requests
(it ignores the claim fields) without a connector. Files go to --out (default: a new temporary
directory), never into the checkout.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from kvclaims.lab.soak import ServedEngine, ServerSpec, SoakPlan, soak, trace_facts
from kvclaims.lab.tiny_model import cached_tiny_model
from kvclaims.refinement import check_trace

LOAD_FAULTS = {"enabled": True, "max_failures": 8}


def run_one(spec: ServerSpec, plan: SoakPlan) -> dict[str, Any]:
    with ServedEngine(spec) as server:
        result = soak(server.url, plan)
        peak = server.peak_rss_bytes()
        stop = time.monotonic()
        exit_code = server.terminate()
        figures: dict[str, Any] = {
            "startup_s": round(server.startup_s, 1),
            "peak_rss_mib": {k: round(v / 2**20, 1) for k, v in peak.items()},
            "exit_code": exit_code,
            "shutdown_s": round(time.monotonic() - stop, 1),
            **result.summary(),
        }
    if spec.binding:
        facts = trace_facts(server.trace)
        started = time.monotonic()
        verdict = check_trace(server.trace)
        figures["trace"] = {
            "events": sum(facts.events.values()),
            "by_event": dict(sorted(facts.events.items())),
            "every_seq_present": facts.seq_complete,
            "closed": facts.closed,
            "verdict": str(verdict.outcome),
            "reason": verdict.reason,
            "check_s": round(time.monotonic() - started, 2),
        }
    return figures


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--clients", type=int, default=32)
    options.add_argument("--duration", type=float, default=300.0, help="seconds of load per server")
    options.add_argument("--max-requests", type=int, default=100_000)
    options.add_argument("--out", type=Path, help="directory for traces and logs (default: a temporary one)")
    options.add_argument("--no-stock", action="store_true", help="skip the stock vLLM baseline")
    options.add_argument("--no-hostile", action="store_true", help="no hostile tenant")
    options.add_argument("--seed", type=int, default=0)
    args = options.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kvclaims-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    model = cached_tiny_model()
    plan = SoakPlan(
        clients=args.clients,
        duration_s=args.duration,
        max_requests=args.max_requests,
        hostile=not args.no_hostile,
        offload=True,
        seed=args.seed,
    )
    binding_config = {"offload": {"cpu_bytes": 8 << 20, "load_faults": LOAD_FAULTS}}
    report: dict[str, Any] = {
        "plan": {"clients": plan.clients, "duration_s": plan.duration_s},
        "out": str(out),
    }
    report["binding"] = run_one(ServerSpec(model, out, binding_config=binding_config), plan)
    if not args.no_stock:
        report["stock"] = run_one(ServerSpec(model, out, binding=False), plan)
        for quantile in ("latency_p50_s", "latency_p99_s"):
            ratio = report["binding"][quantile] / report["stock"][quantile]
            report[f"{quantile.removesuffix('_s')}_ratio_binding_over_stock"] = round(ratio, 3)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
