"""vLLM's native KV events, captured from its ZMQ publisher, and the claim registry to join them.

vLLM 0.32 publishes `KVEventBatch`es (GPU prefix-cache and CPU-tier `BlockStored` /
`BlockRemoved` / `AllBlocksCleared`) as ZMQ multipart `(topic, 8-byte big-endian seq, msgpack
payload)`. Its publisher *connects* to an endpoint that names a host (`tcp://127.0.0.1:PORT`),
so the capture binds a SUB socket on the loopback interface only and lets the engine connect
to it (`KvEventCapture.events_config()` is the engine's `kv_events_config`).

Each batch is written to the current capture file as one frame `seq (8 bytes) | length (4
bytes) | payload`, the payload being the publisher's bytes verbatim: the msgpack capture
format that `kvclaims check --format vllm-kv-events --registry FILE` reads. `write_registry`
writes the external claim registry (`kvclaims_registry: 1`) for the claims of a run, so
refinement's telemetry_join can reconstruct what those events alone show.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

_FRAME = struct.Struct(">QI")
TOPIC = "kvclaims"
LOOPBACK = "tcp://127.0.0.1"


class KvEventCapture:
    """A loopback ZMQ subscriber that writes the engine's KV-event batches to capture files.

    Invariants: frames reach a file in arrival order (the publisher's order); a file holds only
    batches received between its `record` and `stop`; nothing listens beyond 127.0.0.1.
    """

    def __init__(self, topic: str = TOPIC) -> None:
        import zmq

        self.topic = topic
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.SUB)
        self._socket.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self._socket.setsockopt(zmq.LINGER, 0)
        port = self._socket.bind_to_random_port(LOOPBACK)
        self.endpoint = f"{LOOPBACK}:{port}"
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        self.frames = 0
        self.first_seq: int | None = None
        self.last_seq: int | None = None
        self._received: int | None = None
        """The seq of the last batch received, recorded or not."""
        self._last_arrival = time.monotonic()
        self._running = True
        self._thread = threading.Thread(target=self._receive, name="kvclaims-kv-events", daemon=True)
        self._thread.start()

    def events_config(self) -> dict[str, Any]:
        """vLLM `KVEventsConfig` fields that make the engine publish here."""
        return {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": self.endpoint,
            "topic": self.topic,
        }

    def _receive(self) -> None:
        import zmq

        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        while self._running:
            if not poller.poll(50):
                continue
            parts = self._socket.recv_multipart()
            if len(parts) != 3 or len(parts[1]) != 8:
                continue  # not a KV-event batch frame
            seq = int.from_bytes(parts[1], "big")
            with self._lock:
                self._last_arrival = time.monotonic()
                self._received = seq
                if self._file is not None:
                    self._file.write(_FRAME.pack(seq, len(parts[2])) + parts[2])
                    self.frames += 1
                    if self.first_seq is None:
                        self.first_seq = seq
                    self.last_seq = seq

    def record(self, path: Path) -> None:
        """Start writing batches to `path` (a new file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._close_file()
            self._file = path.open("wb")
            self.frames = 0
            self.first_seq = self.last_seq = None

    def stop(self, publisher: Any = None, quiet_seconds: float = 0.15, timeout: float = 10.0) -> int:
        """Stop writing once every batch of the run arrived (the publisher sends from its own
        thread, so the last batches of a run trail it); returns frames written.

        With vLLM's `ZmqEventPublisher` (`publisher`), exactly: once its queue is sent (every
        batch is `task_done` after its send) and the last seq it sent has arrived here. Without
        one, or one whose internals differ, once no batch arrived for `quiet_seconds`."""
        deadline = time.monotonic() + timeout
        sent = _last_sent(publisher)
        while time.monotonic() < deadline:
            if sent is not None:
                queue, buffer = sent
                with self._lock:
                    received = self._received
                if queue.unfinished_tasks == 0 and (
                    not buffer or (received is not None and received >= buffer[-1][0])
                ):
                    break
            else:
                with self._lock:
                    idle = time.monotonic() - self._last_arrival
                if idle >= quiet_seconds:
                    break
            time.sleep(quiet_seconds / 3)
        with self._lock:
            self._close_file()
            return self.frames

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self) -> None:
        self._running = False
        self._thread.join(timeout=2)
        with self._lock:
            self._close_file()
        self._socket.close()
        self._context.term()


def _last_sent(publisher: Any) -> tuple[Any, Any] | None:
    """vLLM's ZmqEventPublisher's send queue and replay buffer of `(seq, payload)` (what it
    sent, in order), or None for any other publisher."""
    queue = getattr(publisher, "_event_queue", None)
    buffer = getattr(publisher, "_buffer", None)
    if queue is None or buffer is None or not hasattr(queue, "unfinished_tasks"):
        return None
    return queue, buffer


@dataclass(frozen=True)
class RegisteredPrefix:
    """One claim as an external registry would record it, before the run."""

    claim_id: str
    owner_scope: str
    token_ids: Sequence[int]
    footprint_blocks: int
    predicate_blocks: int


def write_registry(
    path: Path,
    *,
    claims: Sequence[RegisteredPrefix],
    block_size: int,
    model_id: str,
    registered_before_seq: int,
    request_ids: Sequence[str] = (),
) -> Path:
    """Write the claim registry (`kvclaims_registry: 1`) of a capture: every claim registered
    before batch `registered_before_seq`, in the observational mode `best_effort` (a join of
    telemetry cannot enforce anything), over the GPU medium."""
    document = {
        "kvclaims_registry": 1,
        "observation_point": "end of each KVEventBatch of the vLLM ZMQ publisher",
        "medium": "GPU",
        "cache_identity": {
            "cache_key_domain": "vllm-prefix-cache",
            "model_id": model_id,
            "token_hash_domain": "vllm-sha256",
            "namespace": "",
            "block_size": block_size,
            "kv_format": "float32",
        },
        "request_ids": list(request_ids),
        "claims": [
            {
                "claim_id": claim.claim_id,
                "owner_scope": claim.owner_scope,
                "object_id": claim.claim_id,
                "mode": "best_effort",
                "predicate": {"kind": "leading_prefix_at_least", "blocks": claim.predicate_blocks},
                "footprint_blocks": claim.footprint_blocks,
                "registered_before_seq": registered_before_seq,
                "token_map": {
                    "tokenizer": f"{model_id} (token ids given directly)",
                    "token_ids": list(claim.token_ids),
                },
            }
            for claim in claims
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path
