"""Engines as deployments run them, on CPU with the tiny model: the multiprocess engine core,
async scheduling as the CPU platform resolves it, and two data-parallel engines behind vLLM's
OpenAI server, one trace stream each. Every trace is judged by refinement here.

The engines run in child processes (vLLM caches its environment once an in-process engine
ran, and the server is a process anyway); everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kvclaims.lab.engine_lane import engine_prompt
from kvclaims.lab.engine_scenarios import claim
from kvclaims.refinement import check_trace

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

BLOCK = 32


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def kinds(trace: Path) -> list[str]:
    lines = trace.read_text(encoding="utf-8").splitlines()[1:]
    return [json.loads(line)["event"] for line in lines]


def test_the_multiprocess_engine_core_fails_a_claimed_restoration_closed(tmp_path: Path) -> None:
    """Path B with vLLM's engine core in its own process (the server's default): the failure
    plan travels in the connector config, the refusal reaches the client through vLLM's
    output path, and the engine core closes the trace when it shuts down."""
    trace = tmp_path / "path-b.ndjson"
    command = [
        sys.executable,
        "-c",
        "from kvclaims.cli import entry_point; entry_point()",
        "vllm",
        "scenario",
        "path-b-restore-failure",
        "--lane",
        "engine",
        "--engine-core",
        "multiprocess",
        "-o",
        str(trace),
        "--json",
    ]
    environment = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["engine_core"] == "multiprocess"
    numbers = report["numbers"]
    assert numbers["reuse_restoration_failed"] and not numbers["reuse_restored"]
    assert numbers["reuse_refused_blocking"] == ["claim:A"]
    assert numbers["reuse_finish_reason"] == "abort"
    assert numbers["reuse_stop_reason"] == "kvclaims:refused:restoration_failed:claim:A"
    verdict = check_trace(trace)
    assert verdict.outcome == "accepted", verdict.reason
    events = kinds(trace)
    assert events.index("resident_claim_restoration_failed") < events.index("active_request_refused")
    assert events.count("request_finished") == 3, "source, pressure and reuse, none lost at shutdown"


def test_only_a_gpu_engine_runs_async_scheduling() -> None:
    """Asked for async scheduling, vLLM's CPU platform resolves the engine to synchronous
    scheduling (`vllm/platforms/cpu.py`), so `ClaimAsyncScheduler` with loads in flight runs
    only on a GPU engine (`make gpu-lane`, where it is vLLM's default); on CPU the scheduler
    lane covers the async scheduler with fabricated model outputs."""
    from vllm.platforms import current_platform

    from kvclaims.lab.production_engines import resolved_async_scheduling

    assert resolved_async_scheduling(True) is (not current_platform.is_cpu())
    assert resolved_async_scheduling(False) is False


def test_two_data_parallel_engines_write_one_accepted_trace_each(tmp_path: Path) -> None:
    """`--data-parallel-size 2` behind one OpenAI server: a hard claim on engine 0 refuses a
    prefill there and names itself; the same prefill on engine 1, which holds no claim, is
    served. Each engine writes its own trace; both are accepted."""
    from kvclaims.lab.production_engines import DataParallelServer

    server = DataParallelServer(tmp_path, free_loopback_port())
    server.start()
    try:
        hard = claim("claim:H", "hard_protected", 8)
        held = server.complete(0, engine_prompt("held", 9 * BLOCK), claim=hard)
        big = engine_prompt("big", 20 * BLOCK)
        refused = server.complete(0, big)
        served = server.complete(1, big)
    finally:
        code = server.stop()
    assert code == 0, server.log_path.read_text(errors="replace")[-3000:]
    assert (held.status, held.finish_reason) == (200, "length")
    assert held.claim_note == "kvclaims:claim_accepted:claim:H"
    assert (refused.status, refused.finish_reason) == (429, None)
    assert refused.claim_note.startswith("kvclaims:refused:capacity:claim:H;others=0;")
    assert (served.status, served.finish_reason, served.claim_note) == (200, "length", None)
    first, second = server.trace(0), server.trace(1)
    assert first != second and first.exists() and second.exists()
    for trace in (first, second):
        verdict = check_trace(trace)
        assert verdict.outcome == "accepted", f"{trace}: {verdict.reason}"
    assert {"resident_claim_accepted", "active_request_refused"} <= set(kinds(first))
    assert kinds(second).count("active_request_admitted") == 1
    assert not [kind for kind in kinds(second) if kind.startswith("resident_claim")]


def test_the_async_scheduler_keeps_claims_with_loads_in_flight(tmp_path: Path) -> None:
    """Paths A, B and C on `ClaimAsyncScheduler` with the connector and the real model runner
    (async scheduling forced on the CPU engine, `AsyncEngineLane`): restore before reuse,
    the failed restoration refused naming its claim, only the target named; all accepted."""
    from kvclaims.lab.engine_scenarios import run_engine_scenario
    from kvclaims.lab.production_engines import AsyncEngineLane
    from kvclaims.vllm_binding.scheduler import ClaimAsyncScheduler

    names = ("path-a-restore", "path-b-restore-failure", "path-c-multi-claim")
    lane = AsyncEngineLane()
    try:
        assert type(lane.scheduler) is ClaimAsyncScheduler
        assert lane.batch_queue_size == 2, "outputs of step N arrive after schedule() of step N+1"
        results = [run_engine_scenario(lane, name, tmp_path / f"{name}.ndjson") for name in names]
    finally:
        lane.close()
    for result in results:
        verdict = check_trace(result.trace_path)
        assert verdict.outcome == "accepted", f"{result.name}: {verdict.reason}"
    a, b, c = (result.numbers for result in results)
    assert a["reuse_restored"] and a["reuse_reuse_satisfied"] and a["reuse_reuse_cached_blocks"] == 4
    assert b["reuse_restoration_failed"] and b["reuse_refused_blocking"] == ["claim:A"]
    assert b["reuse_stop_reason"] == "kvclaims:refused:restoration_failed:claim:A"
    assert c["reuse-a_refused_blocking"] == ["claim:A"]
    assert c["reuse-b_restored"] and c["reuse-b_reuse_satisfied"]
