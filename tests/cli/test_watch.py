"""`kvclaims watch`: live trace files checked as they grow, verdicts as they change, metrics."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kvclaims.refinement.testing import TraceBuilder


def served() -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=80).accept("A", blocks=2).store_prefix("A", 2).materialize("A", 2)
    return trace.admit("r1").reuse("r1", "A", 2).finish("r1")


def watch(*arguments: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kvclaims", "watch", "--interval", "0.05", *arguments],
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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
