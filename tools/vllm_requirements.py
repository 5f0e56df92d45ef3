"""Print the installed vLLM's requirements without its GPU stack, one per line.

The CUDA `vllm` wheel pins a CUDA torch and GPU kernel packages that a CPU-only machine
neither needs nor can use. `make test-vllm-033` installs that wheel with `--no-deps` next to
the CPU torch, then installs what this prints: every other requirement of the release, with
its environment markers evaluated here. The scheduler lane imports vLLM's v1 core only.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

GPU_STACK: frozenset[str] = frozenset(
    canonicalize_name(name)
    for name in (
        "torch",
        "torchaudio",
        "torchvision",
        "torchcodec",
        "PyNvVideoCodec",
        "flashinfer-python",
        "apache-tvm-ffi",
        "tilelang",
        "nvidia-cudnn-frontend",
        "nvidia-cutlass-dsl",
        "nvtx",
        "fastsafetensors",
        "instanttensor",
        "quack-kernels",
        "tokenspeed-mla",
        "humming-kernels",
    )
)
"""Requirements of vLLM's CUDA wheel that exist for the GPU (torch is installed separately,
as its CPU build)."""


def cpu_requirements(distribution: str = "vllm") -> list[str]:
    """`distribution`'s requirements that apply here, minus `GPU_STACK` (extras skipped)."""
    wanted: list[str] = []
    for line in requires(distribution) or []:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) in GPU_STACK:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirement.marker = None
        wanted.append(str(requirement))
    return wanted


def main() -> int:
    try:
        print("\n".join(cpu_requirements()))
    except PackageNotFoundError:
        print("vllm is not installed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
