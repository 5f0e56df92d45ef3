"""The engine lane's model: a tiny random-weight Llama built locally (no hub, no download).

Two layers, hidden 256, 4 attention heads and 2 KV heads of 64 dimensions (the head size vLLM's
CPU attention supports), a 512-token vocabulary, float32, about 5.6 MB. Weights come from
`transformers`' own initialisation under a fixed seed, so a given `transformers`/`torch` pair
builds the same model every time; nothing about serving depends on the weights being useful,
only on them being fixed (equal prompts must give equal logits).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

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

SEED = 0
SERVED_MODEL_NAME = "kvclaims-tiny-llama"
"""The name the engine lane serves it under (traces name the model by it, not by a path)."""

_FILES = ("config.json", "model.safetensors")


def build_tiny_model(directory: str | Path, *, seed: int = SEED) -> Path:
    """Write the tiny Llama (config.json + model.safetensors) into `directory`; returns it.

    Raises `ImportError` when `transformers` (installed with vLLM) is missing."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA, torch_dtype="float32"))
    model.save_pretrained(target, safe_serialization=True)
    return target


def is_tiny_model(directory: str | Path) -> bool:
    """Whether `directory` holds a model built by `build_tiny_model` (same config fields)."""
    path = Path(directory)
    if not all((path / name).is_file() for name in _FILES):
        return False
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return all(config.get(key) == value for key, value in TINY_LLAMA.items())


def cached_tiny_model() -> Path:
    """A stable per-user copy of the tiny model (built on first use), so repeated engine
    starts reuse vLLM's model-inspection cache. `KVCLAIMS_CACHE_DIR` overrides the root."""
    text = json.dumps({"config": TINY_LLAMA, "seed": SEED}, sort_keys=True)
    root = Path(os.environ.get("KVCLAIMS_CACHE_DIR", Path.home() / ".cache" / "kvclaims"))
    directory = root / f"tiny-llama-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    if is_tiny_model(directory):
        return directory
    staging = root / f".tiny-llama-{os.getpid()}"
    build_tiny_model(staging)
    try:
        staging.replace(directory)  # atomic; fails when another process got there first
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    if not is_tiny_model(directory):
        raise RuntimeError(f"could not build the tiny model in {directory}")
    return directory
