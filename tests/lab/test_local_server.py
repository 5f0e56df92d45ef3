"""`wait_healthy` against real loopback servers: one that becomes healthy, one that never does,
nothing listening, one that accepts and never answers, and a server process that exits first."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from support.http_server import loopback_http

from kvclaims.lab.local_server import ServerNotHealthy, free_port, wait_healthy


@contextmanager
def health_server(statuses: list[int]) -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server answering /health with `statuses` in turn (the last one from then
    on); yields its URL and the paths it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(statuses[min(len(asked), len(statuses)) - 1])
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with loopback_http(Handler) as url:
        yield url, asked


def test_it_returns_once_health_answers_200_after_failures() -> None:
    with health_server([503, 500, 200]) as (url, asked):
        assert wait_healthy(url, timeout_s=30) >= 0
    assert asked == ["/health"] * 3


def test_a_server_that_never_gets_healthy_times_out_naming_url_and_last_answer() -> None:
    with health_server([503]) as (url, asked), pytest.raises(ServerNotHealthy) as raised:
        wait_healthy(url, timeout_s=0.6)
    assert str(raised.value) == f"{url}/health: no 200 in 0.6 s; last answer: status 503"
    assert len(asked) >= 1


def test_nothing_listening_names_the_refused_connection() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerNotHealthy) as raised:
        wait_healthy(url, timeout_s=0.5)
    message = str(raised.value)
    assert message.startswith(f"{url}/health: no 200 in 0.5 s; last answer: URLError: ")
    assert "refused" in message


def test_a_server_that_accepts_and_never_answers_is_bounded_by_the_timeout() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel accepts the connection; nobody ever reads or answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(ServerNotHealthy) as raised:
            wait_healthy(url, timeout_s=0.5)
    assert "no 200 in 0.5 s; last answer: " in str(raised.value) and "timed out" in str(raised.value)


def test_a_server_process_that_exits_is_reported_with_its_status_and_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-c", "import sys; print('cannot bind the port'); sys.exit(3)"], stdout=output
        )
    process.wait(timeout=60)
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerNotHealthy) as raised:
        wait_healthy(url, timeout_s=600, process=process, log=log)  # not the timeout: the exit
    message = str(raised.value)
    assert message.startswith(f"{url}/health: the server exited with 3; last answer: no answer yet\n")
    assert message.endswith(f"{log}:\ncannot bind the port\n")
