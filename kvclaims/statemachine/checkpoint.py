"""Hybrid two-key checkpoints (seed 002): the non-KV side of a claim at boundary B.

A checkpoint stores immutable payload bytes plus the layout that says how those bytes mean a
logical state. Two hashes answer two different questions: `payload_hash` (have the stored bytes
changed?) and `value_hash` (does the restored state *mean* the same thing?). Restore runs the
RFC's phases: payload -> scratch -> live slot -> post-restore view, and reports both hashes of
what it actually produced. Only value-hash equality with the hashes recorded at
materialization establishes state identity; payload equality alone never does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

STATE_ROWS, STATE_COLUMNS = 2, 3
"""The logical non-KV state is a small matrix (think: a recurrent state slice)."""


class Layout(StrEnum):
    """How payload bytes are read back into the logical matrix."""

    row_major = "row_major"
    column_major = "column_major"


def digest(data: bytes) -> str:
    """The short hash both checkpoint keys use (sha256, 16 hex digits)."""
    return hashlib.sha256(data).hexdigest()[:16]


def _state_of(object_id: str, boundary: int) -> tuple[tuple[int, ...], ...]:
    """The logical state a request leaves at `boundary` of `object_id` (deterministic, distinct
    entries so that reading it with the wrong layout always changes its value)."""
    seed = hashlib.sha256(f"{object_id}@{boundary}".encode()).digest()
    base = seed[0]
    return tuple(
        tuple((base + row * STATE_COLUMNS + column) % 251 for column in range(STATE_COLUMNS))
        for row in range(STATE_ROWS)
    )


def _canonical(state: tuple[tuple[int, ...], ...]) -> bytes:
    return repr(state).encode()


def _encode(state: tuple[tuple[int, ...], ...]) -> bytes:
    return bytes(value for row in state for value in row)


def _decode(payload: bytes, layout: Layout) -> tuple[tuple[int, ...], ...]:
    if layout is Layout.row_major:
        return tuple(
            tuple(payload[row * STATE_COLUMNS + column] for column in range(STATE_COLUMNS))
            for row in range(STATE_ROWS)
        )
    return tuple(
        tuple(payload[column * STATE_ROWS + row] for column in range(STATE_COLUMNS))
        for row in range(STATE_ROWS)
    )


@dataclass
class HybridCheckpoint:
    """The stored checkpoint of one two-key claim. `payload` never changes after it is taken;
    `layout` is the metadata a backend reads it with (the part an in-place bug can alias)."""

    boundary: int
    payload: bytes
    layout: Layout
    payload_hash: str
    value_hash: str

    @classmethod
    def take(cls, object_id: str, boundary: int) -> HybridCheckpoint:
        state = _state_of(object_id, boundary)
        payload = _encode(state)
        return cls(boundary, payload, Layout.row_major, digest(payload), digest(_canonical(state)))

    def recorded(self) -> dict[str, object]:
        """The trace form recorded at materialization."""
        return {"boundary": self.boundary, "payload_hash": self.payload_hash, "value_hash": self.value_hash}

    def mutate_layout_in_place(self) -> None:
        """The seed 002 bug: metadata aliased to a live array changes after the checkpoint was
        taken. The bytes (and so `payload_hash`) are untouched; their meaning is not."""
        self.layout = Layout.column_major if self.layout is Layout.row_major else Layout.row_major


@dataclass(frozen=True)
class RestoreResult:
    """What a restore produced: the phases it ran and the hashes of its output."""

    phases: tuple[str, ...]
    payload_hash: str
    value_hash: str

    def matches(self, recorded_value_hash: str) -> bool:
        """State identity: the value hash equals the one recorded at materialization (kept by
        the caller, apart from the checkpoint object, so a corrupted checkpoint cannot vouch
        for itself)."""
        return self.value_hash == recorded_value_hash


def restore(checkpoint: HybridCheckpoint) -> RestoreResult:
    """Run payload -> scratch -> live slot -> post-restore view and hash what came out."""
    scratch = bytes(checkpoint.payload)
    live_slot = _decode(scratch, checkpoint.layout)
    view = _canonical(live_slot)
    return RestoreResult(
        ("payload->scratch", "scratch->live", "live->post_restore_view"), digest(scratch), digest(view)
    )
