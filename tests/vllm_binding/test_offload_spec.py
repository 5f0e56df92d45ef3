"""The CPU-platform offload worker moves real bytes, with vLLM's chunk addressing."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.vllm


def caches(num_blocks: int = 8, page: int = 16) -> tuple[Any, list[Any]]:
    import torch
    from vllm.v1.kv_offload.base import CanonicalKVCacheRef, CanonicalKVCaches, CanonicalKVCacheTensor

    generator = torch.Generator().manual_seed(0)
    raw = [
        torch.randint(-128, 127, (num_blocks, page), dtype=torch.int8, generator=generator) for _ in range(2)
    ]
    tensors = [CanonicalKVCacheTensor(tensor=t, page_size_bytes=page) for t in raw]
    refs = [[CanonicalKVCacheRef(tensor_idx=0, page_size_bytes=page), CanonicalKVCacheRef(1, page)]]
    return CanonicalKVCaches(tensors=tensors, group_data_refs=refs), raw


def specs(gpu: list[int], first: int, cpu: list[int]) -> tuple[Any, Any]:
    from vllm.v1.kv_offload.base import GPULoadStoreSpec
    from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec

    return GPULoadStoreSpec(gpu, group_sizes=[len(gpu)], block_indices=[first]), CPULoadStoreSpec(cpu)


@pytest.mark.parametrize(("per_chunk", "first"), [(1, 0), (2, 1), (4, 3)])
def test_a_stored_run_loads_back_byte_for_byte_into_other_blocks(per_chunk: int, first: int) -> None:
    import torch

    from kvclaims.vllm_binding.offload_spec import HostCopyWorker

    kv, raw = caches()
    worker = HostCopyWorker(kv, blocks_per_chunk=per_chunk, num_chunks=4)
    original = [t.clone() for t in raw]
    chunks = list(range(-(-(first % per_chunk + 3) // per_chunk)))
    gpu, cpu = specs([1, 2, 3], first, chunks)
    assert worker.submit_store(7, gpu, cpu)
    for tensor in raw:
        tensor[1:4] = 0  # the device copy is gone
    gpu_back, cpu_back = specs([5, 6, 7], first, chunks)
    assert worker.submit_load(8, cpu_back, gpu_back)
    for tensor, before in zip(raw, original, strict=True):
        assert torch.equal(tensor[5:8], before[1:4])
    results = worker.get_finished()
    assert [(r.job_id, r.success) for r in results] == [(7, True), (8, True)]
    assert results[0].transfer_size == 3 * 16 * 2 and worker.get_finished() == []
