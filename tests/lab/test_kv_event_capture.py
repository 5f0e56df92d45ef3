"""The KV-event capture writes every batch vLLM's publisher sent before it stops (no quiet-window
guess when the publisher says what it sent). A real ZMQ PUB on loopback plays the publisher."""

from __future__ import annotations

import collections
import queue
import threading
import time
from pathlib import Path

import zmq

from kvclaims.lab.kv_events import _FRAME, KvEventCapture


class _Publisher:
    """The parts of vLLM's ZmqEventPublisher the capture reads: a send queue whose tasks are
    done after each send, and the replay buffer of `(seq, payload)` sent."""

    def __init__(self, endpoint: str, topic: str) -> None:
        self._context = zmq.Context()
        self._pub = self._context.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.connect(endpoint)
        self._topic = topic.encode()
        self._event_queue: queue.Queue[bytes] = queue.Queue()
        self._buffer: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=10)
        self._seq = 0

    def send_later(self, payloads: list[bytes], delay: float) -> threading.Thread:
        """Queue the payloads now, send them from a thread after `delay` (a slow publisher)."""
        for payload in payloads:
            self._event_queue.put(payload)

        def run() -> None:
            time.sleep(delay)
            while not self._event_queue.empty():
                payload = self._event_queue.get()
                self._pub.send_multipart((self._topic, self._seq.to_bytes(8, "big"), payload))
                self._buffer.append((self._seq, payload))
                self._seq += 1
                self._event_queue.task_done()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def close(self) -> None:
        self._pub.close()
        self._context.term()


def _frames(path: Path) -> list[bytes]:
    data, payloads = path.read_bytes(), []
    while data:
        _, length = _FRAME.unpack_from(data)
        payloads.append(data[_FRAME.size : _FRAME.size + length])
        data = data[_FRAME.size + length :]
    return payloads


def test_stop_waits_for_every_batch_the_publisher_sent(tmp_path: Path) -> None:
    capture = KvEventCapture()
    publisher = _Publisher(capture.endpoint, capture.topic)
    try:
        publisher.send_later([b"warm-up"], 0).join()  # ZMQ drops what a fresh PUB sends first
        deadline = time.monotonic() + 5
        while capture._received is None and time.monotonic() < deadline:
            publisher.send_later([b"warm-up"], 0).join()
            time.sleep(0.05)
        capture.record(tmp_path / "run.kvevents")
        sending = publisher.send_later([b"a", b"b", b"c"], delay=0.6)  # past the 0.15 s window
        frames = capture.stop(publisher)
        sending.join()
        assert frames == 3 and _frames(tmp_path / "run.kvevents") == [b"a", b"b", b"c"]
    finally:
        capture.close()
        publisher.close()
