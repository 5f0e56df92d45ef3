"""The binding's offloading spec: vLLM's CPU tier, with a worker that also runs on CPU engines.

Selected with `kv_connector_extra_config = {"spec_name": "ClaimCPUOffloadingSpec",
"spec_module_path": "kvclaims.vllm_binding.offload_spec"}` (or the registered name
`KVClaimsCPUOffloadingSpec`). The scheduler side is vLLM's own `CPUOffloadingSpec` /
`CPUOffloadingManager` unchanged (the claim-aware policy is chosen by `eviction_policy`). The
worker side differs only where the stock spec refuses to run:

- on a GPU platform (CUDA-alike or XPU) `get_worker` returns vLLM's own `CPUOffloadingWorker`
  (CUDA streams, pinned or shared host memory), exactly as the stock spec does;
- on a CPU platform, where the stock spec raises "CPU Offloading is currently only supported on
  CUDA-alike and XPU GPUs", it returns `HostCopyWorker`, which really copies KV blocks between
  the engine's KV cache tensors and a host buffer (synchronously: a CPU engine has no copy
  engine to overlap with), with the same block/chunk addressing as vLLM's worker.

Failure reporting is not here but in the connector's worker (`connector`), which wraps whichever
worker this returns; so the GPU path is the stock CUDA worker wrapped for failure reporting.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import torch
from vllm.platforms import current_platform
from vllm.v1.kv_offload.base import (
    BlockIDsLoadStoreSpec,
    CanonicalKVCaches,
    GPULoadStoreSpec,
    LoadStoreSpec,
    OffloadingWorker,
    TransferResult,
)
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec


def on_gpu_platform() -> bool:
    """Whether vLLM's own CUDA/XPU offload worker can run here."""
    return bool(current_platform.is_cuda_alike() or current_platform.is_xpu())


class HostCopyWorker(OffloadingWorker):
    """Copies KV blocks between the engine's KV cache tensors and a host buffer.

    `kv_caches.tensors[i]` is an int8 view `(num_blocks, page_bytes)` over the engine's KV
    memory; the host buffer of tensor i is `(num_chunks * blocks_per_chunk, page_bytes)`, chunk
    c holding blocks `c * blocks_per_chunk ...`. A transfer's logical blocks are addressed as in
    vLLM's `SingleDirectionOffloadingHandler`: per KV group, `group_sizes[g]` blocks starting at
    request block `block_indices[g]`, the first CPU chunk skipping `block_indices[g] %
    blocks_per_chunk` sub-blocks. Copies are whole pages (the direct, worker-private layout).
    Transfers complete in submission order; `get_finished` reports each once.
    """

    def __init__(self, kv_caches: CanonicalKVCaches, blocks_per_chunk: int, num_chunks: int) -> None:
        self.blocks_per_chunk = blocks_per_chunk
        self.device_tensors = [
            t.tensor.view(torch.int8).view((-1, t.page_size_bytes)) for t in kv_caches.tensors
        ]
        self.host_tensors = [
            torch.zeros((num_chunks * blocks_per_chunk, t.shape[1]), dtype=torch.int8)
            for t in self.device_tensors
        ]
        self.tensor_ids_per_group = [
            sorted({ref.tensor_idx for ref in refs}) for refs in kv_caches.group_data_refs
        ]
        self._finished: deque[TransferResult] = deque()

    def _rows(
        self, spec: GPULoadStoreSpec, cpu: BlockIDsLoadStoreSpec
    ) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Per group: (group index, device block rows, host rows) of one transfer."""
        rows = []
        gpu_offset = cpu_offset = 0
        per_chunk = self.blocks_per_chunk
        for group, (size, first) in enumerate(zip(spec.group_sizes, spec.block_indices, strict=True)):
            if size == 0:
                continue
            skip = first % per_chunk
            logical = np.arange(skip, skip + size)
            chunks = cpu.block_ids[cpu_offset : cpu_offset + -(-(skip + size) // per_chunk)]
            host = chunks[logical // per_chunk].astype(np.int64) * per_chunk + logical % per_chunk
            rows.append((group, spec.block_ids[gpu_offset : gpu_offset + size].astype(np.int64), host))
            gpu_offset += size
            cpu_offset += len(chunks)
        return rows

    def _copy(self, job_id: int, gpu: GPULoadStoreSpec, cpu: LoadStoreSpec, *, to_host: bool) -> bool:
        assert isinstance(cpu, BlockIDsLoadStoreSpec)
        start = time.perf_counter()
        copied = 0
        for group, device_rows, host_rows in self._rows(gpu, cpu):
            device_index = torch.from_numpy(device_rows)
            host_index = torch.from_numpy(host_rows)
            for t in self.tensor_ids_per_group[group]:
                device, host = self.device_tensors[t], self.host_tensors[t]
                if to_host:
                    host[host_index] = device[device_index]
                else:
                    device[device_index] = host[host_index]
                copied += len(device_rows) * device.shape[1]
        self._finished.append(
            TransferResult(
                job_id=job_id,
                success=True,
                transfer_size=copied,
                transfer_time=time.perf_counter() - start,
            )
        )
        return True

    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec, dst_spec: LoadStoreSpec) -> bool:
        return self._copy(job_id, src_spec, dst_spec, to_host=True)

    def submit_load(
        self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec, expedited: bool = False
    ) -> bool:
        del expedited  # vLLM 0.33's priority hint: copies here are synchronous anyway
        return self._copy(job_id, dst_spec, src_spec, to_host=False)

    def get_finished(self) -> list[TransferResult]:
        finished = list(self._finished)
        self._finished.clear()
        return finished

    def wait(self, job_ids: set[int]) -> None:
        del job_ids  # copies are synchronous: every submitted job is already complete

    def shutdown(self) -> None:
        self._finished.clear()
        self.host_tensors.clear()


class ClaimCPUOffloadingSpec(CPUOffloadingSpec):
    """`CPUOffloadingSpec` whose worker also runs on CPU platforms (see module docstring)."""

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self._worker is None:
            if on_gpu_platform():
                self._worker = self.create_worker(kv_caches)
            else:
                if self.config.canonical_layout:
                    raise ValueError("the CPU-platform host-copy worker supports the direct layout only")
                self._worker = HostCopyWorker(kv_caches, self.blocks_per_chunk, self.num_chunks)  # type: ignore[assignment]
        return self._worker  # type: ignore[return-value]
