"""A server this process started on loopback: a free port for it, the wait until its
`/health` endpoint answers (vLLM's OpenAI server, vllm-router), and a JSON POST that reads an
error's body as well (a claim refusal is a 429/503 whose body says why). The fleet lane, the
soak and the server tests start theirs with these."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HEALTH_POLL_S = 0.25
"""Pause between two `/health` requests that did not answer 200."""
HEALTH_REQUEST_TIMEOUT_S = 2.0
"""The longest one `/health` request may take (a server still starting accepts and stalls); the
wait may overrun its timeout by this much, so that its last answer is a whole one."""
LOG_TAIL_CHARACTERS = 3000
"""How much of the end of the server's log an error quotes."""


class ServerNotHealthy(RuntimeError):
    """The server exited, or did not answer `/health` with 200 in time."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picked it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_healthy(
    url: str,
    *,
    timeout_s: float,
    process: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> float:
    """Blocks until `GET url/health` answers 200; returns the seconds it waited. Raises
    `ServerNotHealthy` naming `url`, the last failed answer (an error, or a status other than
    200) and the tail of `log` when `process` (the server, if given) exits first, or when
    `timeout_s` passes (plus at most one request's `HEALTH_REQUEST_TIMEOUT_S`). Reads nothing
    but the endpoint, the process's exit status and the log."""
    start = time.monotonic()
    deadline = start + timeout_s
    last = "no answer yet"
    while True:
        if process is not None and process.poll() is not None:
            what = f"the server exited with {process.returncode}; last answer: {last}"
            raise ServerNotHealthy(_failure(url, what, log))
        if time.monotonic() >= deadline:
            raise ServerNotHealthy(_failure(url, f"no 200 in {timeout_s:g} s; last answer: {last}", log))
        failed = _health_failure(url, HEALTH_REQUEST_TIMEOUT_S)
        if failed is None:
            return time.monotonic() - start
        last = failed
        time.sleep(min(HEALTH_POLL_S, max(0.0, deadline - time.monotonic())))


def post_json(
    url: str, body: dict[str, Any], *, headers: dict[str, str] | None = None, timeout_s: float
) -> tuple[int, Any]:
    """POST `body` as JSON to `url`: the status and the decoded answer, an HTTP error's as well
    (raises only when no HTTP answer came, or its body is not JSON)."""
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def _health_failure(url: str, timeout_s: float) -> str | None:
    """One `GET url/health`: None when it answered 200, else what it answered."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as answer:
            return None if answer.status == 200 else f"status {answer.status}"
    except urllib.error.HTTPError as error:
        error.close()
        return f"status {error.code}"
    except OSError as error:  # refused while the server starts, a timeout, a reset
        return f"{type(error).__name__}: {error}"


def _failure(url: str, what: str, log: Path | None) -> str:
    text = f"{url}/health: {what}"
    if log is not None and log.is_file():
        text += f"\n{log}:\n{log.read_text(errors='replace')[-LOG_TAIL_CHARACTERS:]}"
    return text
