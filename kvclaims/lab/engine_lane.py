"""The engine lane: `vllm.LLM` end to end with the binding, its connector and a tiny model.

An `EngineLane` starts one in-process vLLM engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, so the
lane can reach the engine core's scheduler) on the tiny random-weight Llama of `tiny_model`,
with `ClaimScheduler`, the claim connector (`connector`), the CPU-platform offload worker
(`offload_spec`) and the claim-aware CPU policy (`cache_policy`): everything a deployment
would run, selected through vLLM's own configuration. The model really runs: prefills and
decodes produce tokens and logprobs, KV blocks are really copied to and from the host buffer.

Scenarios run one at a time (`begin` / `end`): each starts a fresh claim arbiter writing its
own trace, after vLLM's device and CPU prefix caches are reset, so one engine serves many
scenarios without one seeing another's blocks. Per scenario the lane sets the failure
injection plan (`set_load_fault_plan` through `collective_rpc`, as on any vLLM engine) and the
load-failure policy (the scheduler attribute `KVTransferConfig.kv_load_failure_policy` sets).

On a GPU machine the same lane runs unchanged under the CUDA `vllm==0.32.0` wheel (vLLM picks
its platform from the installed build): `ClaimCPUOffloadingSpec` then returns vLLM's own CUDA
offload worker, wrapped by the connector for failure reporting; nothing else changes.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kvclaims.lab.tiny_model import SERVED_MODEL_NAME, TINY_LLAMA, cached_tiny_model
from kvclaims.vllm_binding.config import BindingConfig, OffloadSettings
from kvclaims.vllm_binding.faults import LoadFaultPlan
from kvclaims.vllm_binding.plugin import require_supported_vllm

ENGINE_BLOCK_SIZE = 32
"""Tokens per block: vLLM's CPU attention needs a multiple of 32."""

VOCAB_LOW, VOCAB_HIGH = 3, TINY_LLAMA["vocab_size"] - 12
"""Token ids the lane's prompts draw from (clear of the model's special ids)."""

TRACE_SOURCE = "vllm 0.32.0 engine (vllm.LLM, in-process) + kvclaims.vllm_binding"


def engine_prompt(tag: str, num_tokens: int) -> list[int]:
    """A deterministic prompt per tag; different tags differ in their first token with
    overwhelming probability, so their block hashes do not collide."""
    rng = random.Random(f"kvclaims-engine:{tag}")
    return [rng.randrange(VOCAB_LOW, VOCAB_HIGH) for _ in range(num_tokens)]


@dataclass(frozen=True)
class EngineSpec:
    """One engine-lane engine: device pool, CPU tier and batch limits (fixed for its life)."""

    usable_blocks: int = 23
    cpu_chunks: int = 32
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 1024
    capture_kv_events: bool = False

    @property
    def max_model_len(self) -> int:
        return self.usable_blocks * ENGINE_BLOCK_SIZE

    @property
    def block_bytes(self) -> int:
        """KV bytes of one block over all layers (K and V, float32)."""
        heads, dim, layers = (
            TINY_LLAMA["num_key_value_heads"],
            TINY_LLAMA["head_dim"],
            TINY_LLAMA["num_hidden_layers"],
        )
        return 2 * layers * ENGINE_BLOCK_SIZE * heads * dim * 4


@dataclass
class Finished:
    """A finished request as the client saw it."""

    request_id: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str | None
    stop_reason: str | None
    num_cached_tokens: int


@dataclass
class ScenarioRun:
    """What one scenario submitted and got back."""

    trace_path: Path
    finished: dict[str, Finished] = field(default_factory=dict)
    internal_ids: dict[str, str] = field(default_factory=dict)
    steps: int = 0
    kv_events_path: Path | None = None


def serve_on_one_thread() -> None:
    """Torch's intra-op threads to 1 before an in-process engine starts, as vLLM means to serve
    on CPU (`set_torch_threads_for_runtime`: idle OMP workers spin after every parallel op)
    unless `OMP_NUM_THREADS` says otherwise. vLLM's CPU worker replaces `torch.set_num_threads`
    with a no-op before that runs in this process, so the engine kept every core's thread: the
    hybrid lane used 5 times the CPU, the engine lane 1.6 times."""
    if "OMP_NUM_THREADS" in os.environ:
        return
    import torch

    torch._C.set_num_threads(1)  # the function vLLM's worker hides behind `torch.set_num_threads`


def eager() -> AbstractContextManager[None]:
    """Run vLLM's steps as the lanes start it (`enforce_eager`) with its sampler included: the
    one `torch.compile` vLLM keeps outside its compilation config (the rank of each sampled
    token's logprob) runs eagerly too, giving the same integers; compiling it took 1.8 s of the
    engine lane's 6 s of CPU in `kvclaims demo`."""
    import torch

    return torch.compiler.set_stance("force_eager")  # type: ignore[no-any-return]


class EngineLane:
    """One in-process vLLM engine with the binding; scenarios run on it one after another."""

    def __init__(
        self, spec: EngineSpec | None = None, *, model_dir: Path | None = None, async_scheduling: bool = False
    ) -> None:
        require_supported_vllm()
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        serve_on_one_thread()
        from vllm import LLM

        spec = spec or EngineSpec()
        self.spec = spec
        self.model_dir = model_dir or cached_tiny_model()
        self.capture = None
        kwargs: dict[str, Any] = {}
        if spec.capture_kv_events:
            from kvclaims.lab.kv_events import KvEventCapture

            self.capture = KvEventCapture()
            kwargs["kv_events_config"] = self.capture.events_config()
        self.base = base_config(spec)
        started = time.perf_counter()
        if async_scheduling:
            kwargs["async_scheduling"] = True
        self.llm = LLM(str(self.model_dir), **llm_kwargs(spec), **self.base.engine_kwargs(), **kwargs)
        self.start_seconds = time.perf_counter() - started
        self._run: ScenarioRun | None = None

    # -- the engine core, reached in-process ------------------------------------------------

    @property
    def scheduler(self) -> Any:
        return self.llm.llm_engine.engine_core.engine_core.scheduler

    @property
    def arbiter(self) -> Any:
        return self.scheduler.kvclaims

    def set_fault_plan(self, plan: LoadFaultPlan) -> int:
        """Install a failure-injection plan in every worker; returns the failures the previous
        plan caused."""
        from kvclaims.vllm_binding.connector import set_load_fault_plan

        return sum(self.llm.collective_rpc(set_load_fault_plan, args=(plan.to_dict(),)))

    # -- scenarios ---------------------------------------------------------------------------

    def begin(
        self,
        trace_path: Path,
        *,
        binding: dict[str, Any] | None = None,
        kv_load_failure_policy: Literal["fail", "recompute"] = "fail",
        faults: LoadFaultPlan | None = None,
        kv_events_path: Path | None = None,
    ) -> ScenarioRun:
        """Start a scenario: fresh arbiter writing `trace_path` (with `binding` overrides of
        the lane's `BindingConfig`), empty prefix caches, this failure policy and plan."""
        if self._run is not None:
            raise RuntimeError("a scenario is already running on this lane")
        config = scenario_config(self.base, trace_path, TRACE_SOURCE, binding)
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        self.scheduler.kvclaims_restart(config)
        self.scheduler.recompute_kv_load_failures = kv_load_failure_policy == "recompute"
        self.set_fault_plan(faults or LoadFaultPlan())
        self._run = ScenarioRun(trace_path)
        if kv_events_path is not None:
            if self.capture is None:
                raise RuntimeError("this lane was started without capture_kv_events")
            self.capture.record(kv_events_path)
            self._run.kv_events_path = kv_events_path
        return self._run

    def add(
        self,
        name: str,
        prompt: Sequence[int],
        *,
        max_tokens: int = 2,
        claim: dict[str, Any] | None = None,
    ) -> str:
        """Submit a request (greedy, logprobs of the top 2, ignore EOS); returns vLLM's id."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        run = self._require_run()
        params = SamplingParams(
            max_tokens=max_tokens, temperature=0.0, logprobs=1, ignore_eos=True, extra_args=claim
        )
        engine = self.llm.llm_engine
        before = set(engine.output_processor.request_states)
        engine.add_request(name, TokensPrompt(prompt_token_ids=list(prompt)), params)
        added = set(engine.output_processor.request_states) - before
        run.internal_ids[name] = next(iter(added)) if len(added) == 1 else name
        return run.internal_ids[name]

    def drain(self, max_steps: int = 10_000) -> int:
        """Step the engine until every submitted request finished; returns the steps taken."""
        run = self._require_run()
        engine = self.llm.llm_engine
        steps = 0
        with eager():
            while engine.has_unfinished_requests():
                if steps >= max_steps:
                    raise RuntimeError(f"requests unfinished after {max_steps} engine steps (livelock?)")
                for output in engine.step():
                    if output.finished:
                        run.finished[output.request_id] = _finished(output)
                steps += 1
        run.steps += steps
        return steps

    def submit(self, name: str, prompt: Sequence[int], **kwargs: Any) -> Finished:
        """`add` one request and `drain`; returns how it finished."""
        self.add(name, prompt, **kwargs)
        self.drain()
        return self._require_run().finished[name]

    def end(self) -> ScenarioRun:
        """Finish the scenario: the trace is closed (fully written) before this returns."""
        run = self._require_run()
        self.arbiter.close()
        if self.capture is not None and run.kv_events_path is not None:
            self.capture.stop(self.scheduler.kv_event_publisher)
        self._run = None
        return run

    def _require_run(self) -> ScenarioRun:
        if self._run is None:
            raise RuntimeError("no scenario is running (call begin first)")
        return self._run

    def close(self) -> None:
        if self._run is not None:
            self.end()
        self.llm.llm_engine.engine_core.shutdown()
        if self.capture is not None:
            self.capture.close()


def base_config(spec: EngineSpec) -> BindingConfig:
    """The binding's config on a lane engine: defaults, with the claim connector's CPU tier."""
    return BindingConfig(offload=OffloadSettings(cpu_bytes=spec.cpu_chunks * spec.block_bytes))


def scenario_config(
    base: BindingConfig, trace_path: Path, source: str, binding: dict[str, Any] | None
) -> BindingConfig:
    """`base` writing `trace_path`, with a scenario's `binding` overrides."""
    return BindingConfig.model_validate(
        {
            **base.model_dump(exclude_none=True),
            "trace_path": str(trace_path),
            "trace_source": source,
            **(binding or {}),
        }
    )


def llm_kwargs(spec: EngineSpec) -> dict[str, Any]:
    """`vllm.LLM` arguments of a lane engine on the tiny model (the binding's come apart)."""
    return {
        "served_model_name": SERVED_MODEL_NAME,
        "skip_tokenizer_init": True,
        "enforce_eager": True,
        "dtype": "float32",
        "seed": 0,
        "block_size": ENGINE_BLOCK_SIZE,
        "max_model_len": spec.max_model_len,
        "num_gpu_blocks_override": spec.usable_blocks + 1,  # + vLLM's null block
        "kv_cache_memory_bytes": max(64 << 20, 2 * (spec.usable_blocks + 1) * spec.block_bytes),
        "max_num_seqs": spec.max_num_seqs,
        "max_num_batched_tokens": spec.max_num_batched_tokens,
        "disable_log_stats": True,
        "enable_prefix_caching": True,
    }


def _finished(output: Any) -> Finished:
    completion = output.outputs[0]
    logprobs = [
        step[token].logprob
        for token, step in zip(completion.token_ids, completion.logprobs or [], strict=False)
    ]
    stop = completion.stop_reason if isinstance(completion.stop_reason, str) else None
    return Finished(
        request_id=output.request_id,
        token_ids=list(completion.token_ids),
        logprobs=logprobs,
        finish_reason=completion.finish_reason,
        stop_reason=stop,
        num_cached_tokens=int(output.num_cached_tokens or 0),
    )
