"""A `kvclaims serve` server on loopback with the tiny model, for the server tests (one per
module), and the clients' helpers: the `openai` client, `kvclaims watch` and its output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvclaims.lab.local_server import free_port, wait_healthy
from kvclaims.lab.soak import BLOCK, SERVED_NAME

STARTUP_TIMEOUT = 600
SERVER_ARGUMENTS = [
    "--served-model-name", SERVED_NAME, "--skip-tokenizer-init", "--enforce-eager", "--dtype", "float32",
    "--block-size", str(BLOCK), "--max-model-len", "736", "--num-gpu-blocks-override", "24",
    "--max-num-seqs", "4", "--max-num-batched-tokens", "1024",
]  # fmt: skip
"""The tiny model's server: 23 usable blocks of 32 tokens."""


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    trace: Path
    log: Path
    startup_s: float
    measured: dict[str, float] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lines(self) -> list[str]:
        return self.trace.read_text().splitlines()

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines()[1:] if line.endswith("}")]

    def stop(self, how: signal.Signals, *, group: bool = False) -> dict[str, Any]:
        """Send `how` to the server (`group`: to its whole process group, as Ctrl-C in a
        terminal does); wait for the exit. Returns the exit code, seconds to exit and to the
        trace's `trace_closed` line (by its t_ns), and that last line."""
        stop, stop_ns = time.monotonic(), time.time_ns()
        if group:
            os.killpg(self.process.pid, how)
        else:
            self.process.send_signal(how)
        code = self.process.wait(timeout=120)
        exited = time.monotonic() - stop
        closing = json.loads(self.lines()[-1])
        closed = (closing["t_ns"] - stop_ns) / 1e9 if "t_ns" in closing else None
        return {"code": code, "exit_s": exited, "closed_s": closed, "closing": closing}


@contextmanager
def serving(directory: Path, *extra: str) -> Iterator[Server]:
    """`kvclaims serve` with the tiny model (multiprocess engine core, vLLM's default) writing
    `directory/trace.ndjson`; killed on the way out if still running. Prints what it measured."""
    from conftest import require_vllm

    require_vllm()
    from kvclaims.lab.tiny_model import cached_tiny_model

    port = free_port()
    trace, log = directory / "trace.ndjson", directory / "server.log"
    command = [sys.executable, "-m", "kvclaims", "serve", str(cached_tiny_model()), "--trace", str(trace)]
    command += ["--port", str(port), *SERVER_ARGUMENTS, *extra]
    environment = {**os.environ, "VLLM_HOST_IP": "127.0.0.1", "VLLM_NO_USAGE_STATS": "1"}
    start = time.monotonic()
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
    running = Server(process, port, trace, log, 0.0)
    try:
        wait_healthy(running.url, timeout_s=STARTUP_TIMEOUT, process=process, log=log)
        running.startup_s = time.monotonic() - start
        yield running
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the engine core and its worker too
            process.wait(timeout=60)
        print(json.dumps({"startup_s": round(running.startup_s, 2), **running.measured}))


def openai_client(server: Server) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def complete(client: Any, tokens: list[int], xargs: dict[str, Any] | None = None, max_tokens: int = 2) -> Any:
    """One completion; returns its choice (with the completion's id) and the response headers."""
    extra = {"vllm_xargs": xargs} if xargs is not None else None
    raw = client.completions.with_raw_response.create(
        model=SERVED_NAME, prompt=tokens, max_tokens=max_tokens, extra_body=extra
    )
    completion = raw.parse()
    choice = completion.choices[0]
    choice.completion_id = completion.id
    return choice, raw.headers


def claim(claim_id: str, mode: str, blocks: int) -> dict[str, Any]:
    return {"kvclaims_claim_id": claim_id, "kvclaims_mode": mode, "kvclaims_footprint_blocks": blocks}


def watch(*arguments: str) -> subprocess.Popen[str]:
    """`kvclaims watch --json ...`, its JSON lines on stdout."""
    return subprocess.Popen(
        [sys.executable, "-m", "kvclaims", "watch", "--json", "--once", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def watch_line(
    process: subprocess.Popen[str], key: str, timeout: float = 120
) -> tuple[dict[str, Any], float]:
    """The next JSON line of `process` that has `key`, and `time.time()` when it was read."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        if line.startswith("{") and key in (record := json.loads(line)):
            return record, time.time()
    raise AssertionError(f"kvclaims watch printed no line with {key!r} (exit {process.poll()})")
