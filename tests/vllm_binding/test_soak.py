"""Under load and faults, end to end: `kvclaims serve` (vLLM's OpenAI server with the binding and
the claim connector, load failures injected) on loopback with the tiny model, driven by 32
concurrent clients (`kvclaims.lab.soak`).

1. The engine core is SIGKILLed in the middle of a soak: its trace is a valid prefix that
   refinement calls truncated (never accepted). The server is restarted with the same trace
   path: the killed stream is kept beside the new one, the new stream keeps none of the old
   claims, and after a short soak with a hostile tenant and SIGTERM it is accepted with every
   seq present.
2. A full disk for the trace (RLIMIT_FSIZE on the engine core): the binding stops accepting claims
   with the reason, requests keep being served, and the server log says so.

One server at a time, killed in teardown. Figures for the long form: bench/soak.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kvclaims.refinement import check_trace

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

BINDING = {"offload": {"cpu_bytes": 8 << 20, "load_faults": {"enabled": True, "max_failures": 4}}}


@pytest.fixture(scope="module")
def model() -> Path:
    from conftest import require_vllm

    require_vllm()
    from kvclaims.lab.tiny_model import cached_tiny_model

    return cached_tiny_model()


def post(
    url: str, tokens: list[int], xargs: dict[str, Any] | None = None, max_tokens: int = 2
) -> tuple[int, Any]:
    import httpx

    body: dict[str, Any] = {"model": "kvclaims-tiny", "prompt": tokens, "max_tokens": max_tokens}
    if xargs is not None:
        body["vllm_xargs"] = xargs
    answer = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
    return answer.status_code, answer.json()


def restores_before_removals(trace: Path) -> tuple[int, list[int]]:
    """(how many engine steps report both a completed restore and a block removal, the steps
    among them where a removal comes after a restore)."""
    events: dict[int, list[str]] = {}
    for line in trace.read_text().splitlines()[1:]:
        event = json.loads(line)
        if "engine_step" in event:
            events.setdefault(event["engine_step"], []).append(event["event"])
    both = {s: e for s, e in events.items() if "resident_claim_restored" in e and "block_removed" in e}
    late = [
        step
        for step, names in both.items()
        if names.index("resident_claim_restored") < len(names) - 1 - names[::-1].index("block_removed")
    ]
    return len(both), late


def note(answer: tuple[int, Any]) -> str | None:
    """The claim note a served (200) response carries back to the client."""
    from kvclaims.vllm_binding.outcome import response_note

    status, body = answer
    assert status == 200, body
    return response_note(body)


def test_sigkill_mid_soak_leaves_a_truncated_prefix_and_a_restart_starts_a_new_stream(
    model: Path, tmp_path: Path
) -> None:
    from kvclaims.lab.soak import ServedEngine, ServerSpec, SoakPlan, prompt, soak, trace_facts

    spec = ServerSpec(model, tmp_path, binding_config=BINDING)
    with ServedEngine(spec) as first:
        seen: dict[str, Any] = {}
        plan = SoakPlan(clients=32, duration_s=40, offload=True, request_timeout_s=60)
        clients = threading.Thread(target=lambda: seen.update(result=soak(first.url, plan)))
        clients.start()
        time.sleep(12)
        first.kill_engine_core()
        clients.join(timeout=300)
        assert not clients.is_alive()  # the load stops by itself (bounded, timeouts)
        assert first.process is not None
        first.process.wait(timeout=120)  # the API server goes down with its engine (vLLM exits 0)
    killed = trace_facts(tmp_path / "trace.ndjson")
    assert killed.seq_complete and not killed.closed and killed.accepted_claims
    killed_text = (tmp_path / "trace.ndjson").read_text()

    with ServedEngine(spec) as second:
        # the new stream does not pretend to keep the old claims
        old_claim = sorted(killed.accepted_claims)[0]
        owner = old_claim.split(":")[0]
        attach = note(
            post(second.url, prompt("x", 1), {"kvclaims_claim_id": old_claim, "kvclaims_owner": owner})
        )
        assert attach == f"kvclaims:claim_rejected:{old_claim}:attach: no such live claim"

        # a claim protecting 10 of the 31 usable blocks leaves no room for a 22-block request
        hold = {
            "kvclaims_claim_id": "probe:hold",
            "kvclaims_owner": "probe",
            "kvclaims_mode": "hard_protected",
        }
        hold["kvclaims_footprint_blocks"] = 10
        assert note(post(second.url, prompt("probe", 10), hold)) == "kvclaims:claim_accepted:probe:hold"
        status, body = post(second.url, prompt("probe-big", 21), max_tokens=20)
        assert status == 429 and body["error"]["type"] == "kvclaims_refused", body
        assert body["kvclaims"]["reason"] == "capacity"
        assert body["kvclaims"]["own_blocking_claim_ids"] == []  # probe:hold is another owner's
        assert body["kvclaims"]["other_blocking_claims"] == 1
        release = {"kvclaims_claim_id": "probe:hold", "kvclaims_owner": "probe", "kvclaims_op": "release"}
        assert note(post(second.url, prompt("r", 1), release)) == "kvclaims:claim_released:probe:hold"

        result = soak(second.url, SoakPlan(clients=32, duration_s=30, hostile=True, offload=True, seed=1))
        assert second.terminate() == 0

    kept = tmp_path / "trace.prev1.ndjson"
    assert kept.read_text() == killed_text  # the restart kept the killed stream
    truncated = check_trace(kept)
    assert truncated.outcome == "inconclusive" and "truncated" in truncated.reason
    assert check_trace(kept, open=True).outcome == "accepted", "the killed stream is a valid prefix"

    stream = tmp_path / "trace.ndjson"
    facts = trace_facts(stream)
    assert facts.seq_complete and facts.closed
    verdict = check_trace(stream)
    assert verdict.outcome == "accepted", verdict.reason
    # within an engine step, the evictions that made room come before the step's completed
    # loads: a restore reported first held more blocks than the pool (rejected under some seeds)
    both, late = restores_before_removals(stream)
    assert both > 0 and late == [], (both, late[:5])

    # what the clients saw: every request answered; errors only where vLLM's own paths give them
    outcomes = result.outcomes
    assert sum(outcomes.values()) == result.sent > 0
    assert not [k for k in outcomes if ":transport_" in k]
    by_status = {k.split(":")[1] for k in outcomes}
    assert by_status <= {
        "served", "claim_accepted", "claim_rejected", "claim_attached", "claim_released",
        "claim_demoted", "refused_capacity", "refused_restoration_failed", "http_400", "http_500",
    }  # fmt: skip
    assert outcomes["too_long:http_400"] == sum(v for k, v in outcomes.items() if k.endswith("http_400"))
    # an HTTP 500 is vLLM's answer to an injected load failure that restored no claim
    assert sum(v for k, v in outcomes.items() if k.endswith("http_500")) <= facts.events["fault_injected"]
    assert outcomes["submit:claim_accepted"] > 0 and outcomes["plain:served"] > 0
    assert facts.events["resident_claim_accepted"] >= outcomes["submit:claim_accepted"]
    hostile = result.by_owner["mallory"]
    assert not [
        k for k in hostile if k.startswith("foreign_") and k.endswith(("_attached", "_released", "_demoted"))
    ]

    # one check over both streams says exactly that
    both = subprocess.run(
        [sys.executable, "-m", "kvclaims", "check", "--json", str(kept), str(stream)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [json.loads(line) for line in both.stdout.splitlines()]
    assert [(Path(v["path"]).name, v["outcome"]) for v in lines] == [
        ("trace.prev1.ndjson", "inconclusive"),
        ("trace.ndjson", "accepted"),
    ]
    print(json.dumps({"soak": result.summary(), "events": dict(facts.events)}))


def test_a_full_disk_stops_new_claims_while_requests_are_served(model: Path, tmp_path: Path) -> None:
    from kvclaims.lab.soak import ServedEngine, ServerSpec, prompt

    spec = ServerSpec(model, tmp_path, file_size_limit=24 << 10)
    with ServedEngine(spec) as server:
        notes: list[str | None] = []
        for index in range(400):  # the trace reaches 24 KiB after a few dozen requests
            claim = {"kvclaims_claim_id": f"t:{index}", "kvclaims_owner": "t", "kvclaims_mode": "best_effort"}
            claim["kvclaims_footprint_blocks"] = 1
            notes.append(note(post(server.url, prompt(f"fill-{index}", 1), claim)))
            if notes[-1] and "unwritable" in notes[-1]:
                break
        refused = notes[-1]
        assert refused is not None and "the claim trace is unwritable (OSError: File too large)" in refused
        assert notes[0] == "kvclaims:claim_accepted:t:0"
        assert note(post(server.url, prompt("after", 2))) is None  # still served
        claim = {"kvclaims_claim_id": "t:late", "kvclaims_owner": "t", "kvclaims_mode": "hard_protected"}
        claim["kvclaims_footprint_blocks"] = 1
        late = note(post(server.url, prompt("late", 1), claim))
        assert late is not None and late.startswith(
            "kvclaims:claim_rejected:t:late:the claim trace is unwritable"
        )
        server.terminate()
    log = server.log_path.read_text()
    assert "is unwritable (OSError: File too large): from now on new claims are rejected" in log
    trace = tmp_path / "trace.ndjson"
    assert trace.stat().st_size <= 24 << 10 and trace.read_bytes().endswith(b"\n")
    verdict = check_trace(trace)
    assert verdict.outcome == "inconclusive" and "truncated" in verdict.reason
