"""The binding's trace is closed on every shutdown path its process can see (no vLLM needed:
these are the sink, the signal handlers and atexit, in a child process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import os, signal, sys, time
from kvclaims.spec.trace import ActiveRequestAdmitted, TraceHeader
from kvclaims.vllm_binding import shutdown
from kvclaims.vllm_binding.telemetry import TraceSink

sink = TraceSink.open(sys.argv[1], TraceHeader(kvclaims_trace=1, usable_blocks=8))
shutdown.guard(sink)
sink.emit(ActiveRequestAdmitted, request_id="r", active_live_blocks=1)
how = sys.argv[2]
if how in ("SIGTERM", "SIGINT"):
    os.kill(os.getpid(), getattr(signal, how))
    time.sleep(30)  # never reached: the signal ends the process
elif how == "previous":
    pass  # replaced below
"""


def run_child(path: Path, how: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(path), how],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def last_event(path: Path) -> dict[str, object]:
    return json.loads(path.read_text().splitlines()[-1])


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "exit"])
def test_a_signal_or_exit_closes_the_trace_with_its_reason(tmp_path: Path, how: str) -> None:
    path = tmp_path / "t.ndjson"
    result = run_child(path, how)
    expected = {"SIGTERM": "SIGTERM", "SIGINT": "SIGINT", "exit": "atexit"}[how]
    closing = last_event(path)
    assert closing["event"] == "trace_closed" and closing["reason"] == expected, result.stderr
    assert closing["seq"] == 1
    if how == "SIGTERM":
        assert result.returncode == 128 + signal.SIGTERM
    if how == "SIGINT":
        assert result.returncode != 0 and "KeyboardInterrupt" in result.stderr


def test_a_previous_handler_still_runs_and_the_engines_own_close_names_the_signal(tmp_path: Path) -> None:
    path = tmp_path / "t.ndjson"
    script = CHILD.replace(
        "sink = TraceSink.open",
        "seen = []\nsignal.signal(signal.SIGTERM, lambda n, f: seen.append(n))\nsink = TraceSink.open",
    ).replace(
        "    pass  # replaced below",
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    assert seen == [signal.SIGTERM]\n"
        "    sink.close(shutdown.reason(shutdown.CloseReason.engine_shutdown))",
    )
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    result = subprocess.run(
        [sys.executable, "-c", script, str(path), "previous"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert last_event(path)["reason"] == "SIGTERM"  # vLLM's handler ran; the close names why


def test_only_a_signal_that_reached_vllms_engine_core_handler_means_the_engine_is_stopping(
    tmp_path: Path,
) -> None:
    """The scheduler closes the trace early (idle after the signal) only when the handler it
    chained in front of is vLLM's engine-core one, which always stops the engine; a program's
    own handler may keep serving, so there the trace stays open until a real close."""
    script = """
import os, signal, sys
from kvclaims.spec.trace import TraceHeader
from kvclaims.vllm_binding import shutdown
from kvclaims.vllm_binding.telemetry import TraceSink

def handler(number, frame):
    pass
handler.__module__ = sys.argv[1]
signal.signal(signal.SIGTERM, handler)
shutdown.guard(TraceSink.open(sys.argv[2], TraceHeader(kvclaims_trace=1, usable_blocks=8)))

class Engine:
    stopped = 0
    def stop(self):
        self.stopped += 1
engine = Engine()
shutdown.on_engine_stop(engine.stop)
before = shutdown.engine_stopping()
os.kill(os.getpid(), signal.SIGTERM)
print(before, shutdown.engine_stopping(), shutdown.reason(shutdown.CloseReason.closed), engine.stopped)
"""
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    answers = {}
    for module in ("vllm.v1.engine.core", "my_app"):
        result = subprocess.run(
            [sys.executable, "-c", script, module, str(tmp_path / f"{module}.ndjson")],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        answers[module] = result.stdout.split()
    assert answers["vllm.v1.engine.core"] == ["False", "True", "SIGTERM", "1"]
    assert answers["my_app"] == ["False", "False", "SIGTERM", "0"]
