"""Seed 002's checkpoint ABI over torch tensors: payload bytes versus logical value.

The expected hashes are not computed by the code under test: equal and unequal pairs are built
from tensors whose bytes and values are known to agree or differ."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm  # torch comes with vLLM


def views(ssm: object, conv: object | None = None) -> list[object]:
    import torch

    from kvclaims.vllm_binding.state_checkpoint import StateView

    conv = torch.zeros(3, 8, dtype=torch.bfloat16) if conv is None else conv
    return [StateView("conv_state", "layers.0", conv), StateView("ssm_state", "layers.0", ssm)]


def test_the_same_bytes_read_column_major_keep_the_payload_and_change_the_value() -> None:
    import torch

    from kvclaims.spec.trace import Checkpoint
    from kvclaims.vllm_binding.state_checkpoint import checkpoint_of

    state = torch.arange(2 * 4 * 4, dtype=torch.float32).reshape(2, 4, 4)
    stored = checkpoint_of(views(state), 2)
    aliased = checkpoint_of(views(state.transpose(-1, -2)), 2)  # same memory, other layout
    assert isinstance(stored, Checkpoint) and isinstance(aliased, Checkpoint)
    assert aliased.payload_hash == stored.payload_hash
    assert aliased.value_hash != stored.value_hash
    assert [t.layout for t in aliased.tensors or []] == ["row_major", "column_major"]


def test_another_realization_of_the_same_value_keeps_the_value_hash() -> None:
    """A backend may store the state column-major: other bytes, the same logical value."""
    import torch

    from kvclaims.spec.trace import Checkpoint
    from kvclaims.vllm_binding.state_checkpoint import checkpoint_of

    state = torch.arange(2 * 4 * 4, dtype=torch.float32).reshape(2, 4, 4)
    column_major = state.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values
    assert torch.equal(column_major, state) and not column_major.is_contiguous()
    stored, realized = checkpoint_of(views(state), 2), checkpoint_of(views(column_major), 2)
    assert isinstance(stored, Checkpoint) and isinstance(realized, Checkpoint)
    assert realized.value_hash == stored.value_hash
    assert realized.payload_hash != stored.payload_hash


def test_metadata_names_kind_layer_shape_and_both_dtypes() -> None:
    import torch

    from kvclaims.spec.trace import Checkpoint
    from kvclaims.vllm_binding.state_checkpoint import checkpoint_of

    checkpoint = checkpoint_of(views(torch.ones(2, 4, 4)), 3)
    assert isinstance(checkpoint, Checkpoint) and checkpoint.boundary == 3
    first, second = checkpoint.tensors or []
    assert (first.kind, first.layer, first.shape, first.logical_dtype) == (
        "conv_state",
        "layers.0",
        [3, 8],
        "bfloat16",
    )
    assert (second.kind, second.shape, second.storage_dtype) == ("ssm_state", [2, 4, 4], "float32")


def test_a_changed_value_or_dtype_changes_the_value_hash() -> None:
    import torch

    from kvclaims.vllm_binding.state_checkpoint import checkpoint_of

    state = torch.ones(2, 4, 4)
    changed = state.clone()
    changed[1, 2, 3] = 2.0
    hashes = {
        checkpoint_of(views(t), 2).value_hash  # type: ignore[union-attr]
        for t in (state, changed, state.to(torch.float64))
    }
    assert len(hashes) == 3


def test_an_unknown_layout_establishes_no_value() -> None:
    import torch

    from kvclaims.vllm_binding.state_checkpoint import UnknownLayout, checkpoint_of

    strided = torch.ones(4, 2, 4).transpose(0, 1)  # neither row- nor column-major
    result = checkpoint_of(views(strided), 2)
    assert isinstance(result, UnknownLayout)
    assert "unknown layout" in result.describe() and "ssm_state" in result.describe()
