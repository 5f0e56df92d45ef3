"""Seed 002's checkpoint ABI over real recurrent-state tensors (worker side; torch, no vLLM).

In vLLM's hybrid alignment mode (`mamba_cache_mode="align"`) each recurrent layer keeps its
state as views into the shared block pool, one page per block id: `layer.kv_cache[i][block]`
is state tensor i (gated delta net: conv state, then SSM state) of the request or cached
boundary that owns `block`. A checkpoint over one block reads every state tensor of every
recurrent layer of the group, in layer order, and yields both keys of
`kvclaims.statemachine.checkpoint` (same digest):

- `payload_hash`: the stored bytes, in memory order (storage dtype): have the bytes changed?
- `value_hash`: the canonical logical value (kind, layer, shape, logical dtype, values in
  row-major order): does the state *mean* the same thing? Only this one establishes identity.

Each tensor's ABI metadata (kind, layer, shape, logical and storage dtype, layout tag) goes
into the trace with the hashes. A layout the ABI does not know (strides that are neither
row- nor column-major over the last two dimensions) makes the checkpoint `UnknownLayout`:
no value can be established, and the caller fails closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvclaims.spec.trace import Checkpoint, CheckpointTensor
from kvclaims.statemachine.checkpoint import Layout, digest

STATE_KINDS: tuple[str, ...] = ("conv_state", "ssm_state")
"""What state tensor i of a gated-delta-net layer is (vLLM's `MambaSpec.shapes` order)."""


@dataclass(frozen=True)
class StateView:
    """One state tensor of one layer at one block, as the backend realizes it."""

    kind: str
    layer: str
    tensor: torch.Tensor


@dataclass(frozen=True)
class UnknownLayout:
    """A state tensor whose layout the ABI does not know: no value can be established."""

    layer: str
    kind: str
    strides: tuple[int, ...]

    def describe(self) -> str:
        return f"{self.layer} {self.kind}: unknown layout (strides {list(self.strides)})"


def layout_of(tensor: torch.Tensor) -> Layout | None:
    """Row-major (C-contiguous), column-major over the last two dimensions, or unknown."""
    if tensor.is_contiguous():
        return Layout.row_major
    if tensor.dim() >= 2 and tensor.transpose(-1, -2).is_contiguous():
        return Layout.column_major
    return None


def _bytes(tensor: torch.Tensor) -> bytes:
    """The bytes of a contiguous tensor, in memory order."""
    return tensor.contiguous().view(torch.uint8).numpy().tobytes()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def views_at(layers: Sequence[tuple[str, Sequence[torch.Tensor]]], block_id: int) -> list[StateView]:
    """The state tensors of `layers` (name, per-kind pool tensors) at `block_id`."""
    return [
        StateView(STATE_KINDS[index] if index < len(STATE_KINDS) else f"state_{index}", name, pool[block_id])
        for name, pools in layers
        for index, pool in enumerate(pools)
    ]


def checkpoint_of(views: Sequence[StateView], boundary: int) -> Checkpoint | UnknownLayout:
    """Both keys and the ABI metadata of `views` at block boundary `boundary`."""
    payload: list[bytes] = []
    value: list[bytes] = []
    tensors: list[CheckpointTensor] = []
    for view in views:
        tensor = view.tensor
        layout = layout_of(tensor)
        if layout is None:
            return UnknownLayout(view.layer, view.kind, tuple(tensor.stride()))
        stored = tensor if layout is Layout.row_major else tensor.transpose(-1, -2)
        payload.append(_bytes(stored))
        logical = _dtype_name(tensor.dtype)
        header = f"{view.kind}|{view.layer}|{list(tensor.shape)}|{logical}|".encode()
        value.append(header + _bytes(tensor))
        tensors.append(
            CheckpointTensor(
                kind=view.kind,
                layer=view.layer,
                shape=list(tensor.shape),
                logical_dtype=logical,
                storage_dtype=_dtype_name(stored.dtype),
                layout=layout.value,
            )
        )
    return Checkpoint(
        boundary=boundary,
        payload_hash=digest(b"".join(payload)),
        value_hash=digest(b"".join(value)),
        tensors=tensors,
    )
