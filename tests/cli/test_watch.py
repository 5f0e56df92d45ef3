"""`kvclaims watch`: live trace files checked as they grow, verdicts as they change, metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from kvclaims.lab.local_server import free_port
from kvclaims.refinement.testing import TraceBuilder


def served() -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=80).accept("A", blocks=2).store_prefix("A", 2).materialize("A", 2)
    return trace.admit("r1").reuse("r1", "A", 2).finish("r1")


def watch(*arguments: str, once: bool = True) -> subprocess.Popen[str]:
    """`kvclaims watch` (with `--once` unless told: these tests end at a verdict)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvclaims",
            "watch",
            "--interval",
            "0.05",
            *(["--once"] if once else []),
            *arguments,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )


def wait_for_line(process: subprocess.Popen[str], needle: str, timeout: float = 60) -> float:
    """Seconds until a stdout line containing `needle` (fails after `timeout`)."""
    start = time.monotonic()
    assert process.stdout is not None
    while time.monotonic() - start < timeout:
        line = process.stdout.readline()
        if needle in line:
            return time.monotonic() - start
        if not line and process.poll() is not None:
            break
    raise AssertionError(
        f"no {needle!r} within {timeout} s; stderr: {process.stderr.read() if process.stderr else ''}"
    )


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def test_a_rejection_appended_to_a_growing_file_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "live.ndjson"
    process = watch(str(path))  # the file does not exist yet
    try:
        data = served().ndjson(closed=False)
        header, rest = data.split(b"\n", 1)
        time.sleep(0.3)
        append(path, header + b"\n")
        cut = len(rest) // 2
        append(path, rest[:cut])  # half a line: buffered until its end arrives
        time.sleep(0.3)
        append(path, rest[cut:])
        wait_for_line(process, "events, no violation")
        append(path, b'{"seq":99,"event":"request_finished","request_id":"r1","status":"again"}\n')
        took = wait_for_line(process, "rejected")
        assert process.wait(timeout=60) == 1
        # measured, not asserted tightly (bench/watch_latency.py); generous for a loaded box
        assert took < 10
    finally:
        process.kill()


def test_a_closed_trace_is_final_and_accepted(tmp_path: Path) -> None:
    path = tmp_path / "t.ndjson"
    path.write_bytes(served().ndjson())
    process = watch(str(path))
    wait_for_line(process, "accepted")
    assert process.wait(timeout=60) == 0


def test_lines_after_the_close_and_a_shrinking_file_are_invalid(tmp_path: Path) -> None:
    after = tmp_path / "after.ndjson"
    after.write_bytes(
        served().ndjson() + b'{"seq":99,"event":"request_finished","request_id":"x","status":"x"}\n'
    )
    shrinking = tmp_path / "shrinking.ndjson"
    shrinking.write_bytes(served().ndjson(closed=False))
    process = watch(str(after), str(shrinking))
    try:
        wait_for_line(process, "invalid")
        time.sleep(0.5)
        shrinking.write_bytes(b'{"kvclaims_trace":1}\n')
        wait_for_line(process, "invalid")
        assert process.wait(timeout=60) == 2
    finally:
        process.kill()


def test_metrics_show_the_open_verdict_and_event_counts_on_loopback(tmp_path: Path) -> None:
    path = tmp_path / "live.ndjson"
    path.write_bytes(served().ndjson(closed=False))
    port = free_port()
    process = watch(str(path), "--metrics-port", str(port))
    try:
        wait_for_line(process, "events, no violation")
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        name = str(path)
        assert f'kvclaims_trace_verdict{{outcome="open",trace="{name}"}} 1.0' in text
        assert f'kvclaims_trace_verdict{{outcome="rejected",trace="{name}"}} 0.0' in text
        assert f'kvclaims_trace_events_total{{event="resident_claim_accepted",trace="{name}"}} 1.0' in text
        append(path, b'{"seq":99,"event":"trace_closed","reason":"closed"}\n')
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()


def json_lines_until(process: subprocess.Popen[str], wanted: str, timeout: float = 60) -> dict[str, Any]:
    """The next `--json` line whose outcome is `wanted`."""
    start = time.monotonic()
    assert process.stdout is not None
    while time.monotonic() - start < timeout:
        line = process.stdout.readline()
        if line.startswith("{") and json.loads(line).get("outcome") == wanted:
            return json.loads(line)
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"no {wanted!r} line within {timeout} s")


def test_as_a_service_watch_outlives_closes_and_restarts_and_keeps_its_metrics(tmp_path: Path) -> None:
    from kvclaims.refinement import check_trace

    path = tmp_path / "claims.ndjson"
    port = free_port()
    process = watch("--json", str(path), "--metrics-port", str(port), once=False)
    try:
        waiting = json_lines_until(process, "waiting")
        assert "does not exist yet" in waiting["reason"]
        path.write_bytes(served().ndjson())  # a clean run, closed
        assert json_lines_until(process, "accepted")["path"] == str(path)
        assert "already checked" in json_lines_until(process, "waiting")["reason"]
        assert process.poll() is None

        # an engine that restarts after a SIGKILL: the unclosed stream is moved aside, a new begins
        staged = tmp_path / "next.ndjson"
        staged.write_bytes(served().ndjson(closed=False))
        staged.rename(path)
        json_lines_until(process, "open")
        killed = tmp_path / "claims.prev1.ndjson"
        path.rename(killed)
        staged.write_bytes(served().ndjson())
        staged.rename(path)
        interrupted = json_lines_until(process, "inconclusive")
        as_check = check_trace(killed)
        assert (interrupted["outcome"], interrupted["reason"]) == (as_check.outcome.value, as_check.reason)
        assert json_lines_until(process, "accepted")["path"] == str(path)  # the new run
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert f'kvclaims_trace_verdict{{outcome="accepted",trace="{path}"}} 1.0' in text
        assert process.poll() is None
    finally:
        process.kill()


# -- vLLM's KV-event stream over ZMQ -------------------------------------------------------------


def kv_registry(tmp_path: Path, late_from_seq: int | None = None) -> Path:
    """claim:sys (registered before seq 0) and, optionally, claim:late on other tokens,
    registered only before batch `late_from_seq`."""
    from tests.refinement.test_vllm_kv_events import registry

    document = registry()
    if late_from_seq is not None:
        late = dict(document["claims"][0], claim_id="claim:late", object_id="prefix:late")
        late |= {"registered_before_seq": late_from_seq, "token_map": {"tokenizer": "t", "token_ids": LATE}}
        document["claims"].append(late)
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


LATE = list(range(200, 208))


class Publisher:
    """vLLM's publisher as the wire sees it: multipart (topic, 8-byte big-endian seq, msgpack
    array-like `KVEventBatch`), connected to the endpoint watch bound. An XPUB socket, so the
    test starts publishing only once watch's subscription arrived (no message lost to ZMQ's
    slow-joiner window)."""

    def __init__(self, endpoint: str) -> None:
        import zmq

        self.socket = zmq.Context.instance().socket(zmq.XPUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        assert self.socket.poll(60_000), "watch never subscribed"
        assert self.socket.recv()[:1] == b"\x01"

    def batch(self, seq: int, events: list[dict[str, Any]], ts: float | None = None) -> None:
        payload = msgspec.msgpack.encode([time.time() if ts is None else ts, events, 0])
        self.socket.send_multipart([b"kvclaims", seq.to_bytes(8, "big"), payload])

    def close(self) -> None:
        self.socket.close()


def watch_zmq(tmp_path: Path, registry: Path, *extra: str) -> tuple[subprocess.Popen[str], Publisher]:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    process = watch("--json", "--zmq", endpoint, "--registry", str(registry), *extra)
    wait_for_line(process, '"outcome": "open"')
    return process, Publisher(endpoint)


def json_line(process: subprocess.Popen[str], needle: str) -> dict[str, Any]:
    assert process.stdout is not None
    for line in process.stdout:
        if needle in line:
            return dict(json.loads(line))
    raise AssertionError(f"no {needle!r}; stderr: {process.stderr.read() if process.stderr else ''}")


def test_a_kv_event_stream_is_checked_batch_by_batch_and_a_post_hoc_claim_fails_closed_at_once(
    tmp_path: Path,
) -> None:
    from tests.refinement.test_vllm_kv_events import TOKENS, stored

    process, publisher = watch_zmq(tmp_path, kv_registry(tmp_path, late_from_seq=5))
    try:
        publisher.batch(0, [stored([b"\x01" * 8, b"\x02" * 8], TOKENS)])
        progress = json_line(process, '"batches"')
        assert (progress["outcome"], progress["batches"]) == ("open", 1)
        # claim:late's first block in batch 1, though it was registered only before batch 5
        publisher.batch(1, [stored([b"\x03" * 8], LATE[:4])])
        verdict = json_line(process, '"reason"')
        seen = time.time()
        assert verdict["outcome"] == "inconclusive"
        assert "post-hoc claim naming" in verdict["reason"] and "claim:late" in verdict["reason"]
        assert verdict["published_ts"] <= verdict["reported_ts"] <= seen
        assert seen - verdict["published_ts"] < 10  # measured in the docs; generous for a loaded box
        assert process.wait(timeout=60) == 3
    finally:
        publisher.close()
        process.kill()


@pytest.mark.parametrize(
    ("seqs", "why"),
    [
        ([0, 2], "batches 1..1 are missing"),
        ([3], "batches 0..2 were published before watch subscribed"),
    ],
)
def test_a_gap_in_the_publishers_seq_fails_closed(tmp_path: Path, seqs: list[int], why: str) -> None:
    from tests.refinement.test_vllm_kv_events import TOKENS, stored

    process, publisher = watch_zmq(tmp_path, kv_registry(tmp_path))
    try:
        for seq in seqs:
            publisher.batch(seq, [stored([bytes([seq + 1]) * 8], TOKENS[:4])])
        verdict = json_line(process, '"reason"')
        assert verdict["outcome"] == "inconclusive" and why in verdict["reason"], verdict["reason"]
        assert process.wait(timeout=60) == 3
    finally:
        publisher.close()
        process.kill()


def test_a_message_that_is_no_kv_event_batch_is_invalid(tmp_path: Path) -> None:
    process, publisher = watch_zmq(tmp_path, kv_registry(tmp_path))
    try:
        publisher.socket.send_multipart([b"kvclaims", b"\x00" * 4, b"\x90"])  # a 4-byte seq
        verdict = json_line(process, '"reason"')
        assert verdict["outcome"] == "invalid" and "not (topic, 8-byte seq, payload)" in verdict["reason"]
        assert process.wait(timeout=60) == 2
    finally:
        publisher.close()
        process.kill()


@pytest.mark.parametrize(
    "arguments",
    [
        ["--zmq", "tcp://0.0.0.0:5557", "--registry", "r.yaml"],
        ["--zmq", "tcp://10.1.2.3:5557", "--registry", "r.yaml"],
        ["--zmq", "ipc:///tmp/kv", "--registry", "r.yaml"],
        ["--zmq", "tcp://127.0.0.1:5557"],
        ["--registry", "r.yaml", "t.ndjson"],
        [],
    ],
)
def test_kv_event_endpoints_off_loopback_and_missing_inputs_are_bad_input(
    tmp_path: Path, arguments: list[str]
) -> None:
    kv_registry(tmp_path).rename(tmp_path / "r.yaml")
    process = subprocess.run(
        [sys.executable, "-m", "kvclaims", "watch", *arguments],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process.returncode == 2, process.stdout + process.stderr
