"""Failure-to-outcome latency of the binding's restoration-failure path, and where it goes.

One in-process engine-lane engine (tiny Llama, CPU) runs the path-B scenario `--runs` times:
each time a claimed CPU->GPU load is failed by injection, the connector's worker reports it into
vLLM's invalid-KV-load path, and the scheduler-side binding turns it into the claim's
`resident_claim_restoration_failed` and the fail-closed `active_request_refused`. Three
monotonic timestamps per failure (carried on the refusal event) split the latency:

    worker report (get_block_ids_with_load_errors) -> scheduler receipt (update_from_output)
                                                   -> refusal event emitted

The first share is vLLM's own output path (worker -> engine core -> scheduler); the second is
the binding's. `kvclaims vllm repeat` reports the same two figures over fresh processes.

    .venv/bin/python bench/vllm_failure_latency.py --runs 50
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path


def percentile(values: list[int], fraction: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()

    from kvclaims.lab.engine_lane import EngineLane
    from kvclaims.lab.engine_scenarios import run_engine_scenario
    from kvclaims.lab.scheduler_scenarios import read_events

    lane = EngineLane()
    total: list[int] = []
    vllm_share: list[int] = []
    binding_share: list[int] = []
    with tempfile.TemporaryDirectory() as scratch:
        run_engine_scenario(lane, "path-b-restore-failure", Path(scratch) / "warm-up.ndjson")
        for index in range(args.runs):
            trace = Path(scratch) / f"path-b-{index}.ndjson"
            run_engine_scenario(lane, "path-b-restore-failure", trace)
            for event in read_events(trace):
                if event.event == "active_request_refused":
                    extra = event.model_extra or {}
                    reported = extra["failure_reported_mono_ns"]
                    received = extra["scheduler_received_mono_ns"]
                    total.append(extra["mono_ns"] - reported)
                    vllm_share.append(received - reported)
                    binding_share.append(extra["mono_ns"] - received)
    lane.close()
    print(f"path-B failures: {len(total)} (one engine, in-process, after one warm-up run)")
    print(f"{'share':<42}{'median':>10}{'p95':>10}{'min':>10}")
    for label, values in (
        ("worker report -> refusal (end to end)", total),
        ("worker report -> scheduler receipt (vLLM)", vllm_share),
        ("scheduler receipt -> refusal (binding)", binding_share),
    ):
        print(
            f"{label:<42}{statistics.median(values) / 1000:>8.1f}us"
            f"{percentile(values, 0.95) / 1000:>8.1f}us{min(values) / 1000:>8.1f}us"
        )


if __name__ == "__main__":
    main()
