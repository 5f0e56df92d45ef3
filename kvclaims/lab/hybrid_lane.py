"""The hybrid lane: seed 002 on `vllm.LLM` with a tiny hybrid model (Qwen3-Next, gated delta
net + attention) in vLLM's hybrid alignment mode, with the binding's checkpoint connector.

One engine serves every run (each run starts a fresh arbiter on empty prefix caches, as the
engine lane does). `run_resume` is seed 002's acceptance test: a cold run of a prompt (another
cache salt, so nothing is cached), a two-key claim over the prompt's first 2 blocks (320
tokens: vLLM raises the block size to 160 for this model), then `repeats` resumes of the same
prompt attached to the claim, each compared with the cold run (tokens and the first step's raw
logits over the whole vocabulary: vLLM's `logprobs_mode="raw_logits"`), then one resume per seed 002
fault on a fresh claim, each of which must be caught. `run_silent_control` runs the negative
control (`silent_resume`): the corrupted resume is served, and its output is compared with
the cold run's to show the corruption was real.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvclaims.lab.engine_lane import eager, serve_on_one_thread
from kvclaims.lab.tiny_model import HYBRID_SERVED_MODEL_NAME, TINY_QWEN3_NEXT, cached_tiny_model
from kvclaims.vllm_binding.config import BindingConfig
from kvclaims.vllm_binding.plugin import require_supported_vllm

TRACE_SOURCE = "vllm hybrid lane (tiny Qwen3-Next, alignment mode) + kvclaims.vllm_binding"
PROMPT_TOKENS = 400
"""Long enough for 2 full blocks of 160 tokens (a hit needs a recurrent-state checkpoint at a
block boundary) and a partial third block to compute."""
BOUNDARY_BLOCKS = 2
VOCAB = int(TINY_QWEN3_NEXT["vocab_size"])
FAULTS: tuple[str, ...] = ("restore_transposed", "layout_alias", "unknown_layout")


def prompt(seed: int) -> list[int]:
    """A fixed pseudo-random prompt (ids 3.. below the vocabulary: 0-2 are pad/bos/eos)."""
    rng = random.Random(seed)
    return [rng.randrange(3, VOCAB) for _ in range(PROMPT_TOKENS)]


@dataclass(frozen=True)
class Output:
    """One finished request, as vLLM returned it."""

    cached_tokens: int
    token_ids: tuple[int, ...]
    first_logits: tuple[float, ...]
    """The first step's raw logit of every vocabulary entry (empty if none came back)."""
    finish_reason: str | None
    stop_reason: str | None

    def max_abs_diff(self, other: Output) -> float:
        """Largest first-step logit difference (infinite if either has none)."""
        if not self.first_logits or len(self.first_logits) != len(other.first_logits):
            return float("inf")
        return max(abs(a - b) for a, b in zip(self.first_logits, other.first_logits, strict=True))


class HybridLane:
    """One in-process vLLM engine on the tiny hybrid model with the checkpoint connector."""

    def __init__(self, *, model_dir: Path | None = None, max_tokens: int = 4) -> None:
        require_supported_vllm()
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        serve_on_one_thread()
        from vllm import LLM

        self.max_tokens = max_tokens
        started = time.perf_counter()
        self.llm = LLM(
            str(model_dir or cached_tiny_model(hybrid=True)),
            served_model_name=HYBRID_SERVED_MODEL_NAME,
            dtype="bfloat16",
            enforce_eager=True,
            skip_tokenizer_init=True,
            enable_prefix_caching=True,
            block_size=32,
            kv_cache_memory_bytes=64 << 20,
            max_num_seqs=4,
            max_model_len=1024,
            max_logprobs=VOCAB,
            logprobs_mode="raw_logits",
            seed=0,
            **BindingConfig(checkpoints=True).engine_kwargs(),
        )
        self.start_seconds = time.perf_counter() - started

    @property
    def scheduler(self) -> Any:
        return self.llm.llm_engine.engine_core.engine_core.scheduler

    def begin(self, trace_path: Path, *, negative_control: str | None = None) -> None:
        """A fresh arbiter writing `trace_path`, on empty prefix caches."""
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        config = BindingConfig.model_validate(
            {
                "trace_path": str(trace_path),
                "trace_source": "hybrid-lane",
                "checkpoints": True,
                "negative_control": negative_control,
            }
        )
        self.scheduler.kvclaims_restart(config)

    def end(self) -> None:
        """Close the current trace."""
        self.scheduler.kvclaims.close()

    def generate(
        self, tokens: Sequence[int], *, claim: dict[str, Any] | None = None, salt: str | None = None
    ) -> Output:
        """Run one request to completion (greedy, every first-step logit)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(
            max_tokens=self.max_tokens, temperature=0.0, logprobs=VOCAB, ignore_eos=True, extra_args=claim
        )
        request = TokensPrompt(prompt_token_ids=list(tokens))
        if salt is not None:
            request["cache_salt"] = salt
        with eager():
            (result,) = self.llm.generate([request], params, use_tqdm=False)
        completion = result.outputs[0]
        first = completion.logprobs[0] if completion.logprobs else {}
        return Output(
            cached_tokens=result.num_cached_tokens or 0,
            token_ids=tuple(completion.token_ids),
            first_logits=tuple(first[i].logprob for i in range(VOCAB)) if first else (),
            finish_reason=completion.finish_reason,
            stop_reason=completion.stop_reason if isinstance(completion.stop_reason, str) else None,
        )

    def inject(self, kind: str, claim_id: str) -> None:
        """Inject one seed 002 fault into the next verified resume of `claim_id`."""
        from kvclaims.vllm_binding.checkpoint_connector import set_checkpoint_fault

        self.llm.collective_rpc(
            set_checkpoint_fault, args=({"kind": kind, "claim_id": claim_id, "count": 1},)
        )

    def close(self) -> None:
        self.scheduler.kvclaims.close()
        self.llm.llm_engine.engine_core.shutdown()
        del self.llm


def submit(claim_id: str) -> dict[str, Any]:
    """Claim metadata: a hard_protected two-key claim over the prompt's first 2 blocks."""
    return {
        "kvclaims_claim_id": claim_id,
        "kvclaims_mode": "hard_protected",
        "kvclaims_footprint_blocks": BOUNDARY_BLOCKS,
        "kvclaims_checkpoint_boundary_blocks": BOUNDARY_BLOCKS,
    }


def attach(claim_id: str) -> dict[str, Any]:
    return {"kvclaims_claim_id": claim_id, "kvclaims_op": "attach"}


@dataclass
class ResumeRun:
    """What `run_resume` measured."""

    trace_path: Path
    cold: Output
    resumes: list[Output] = field(default_factory=list)
    caught: dict[str, Output] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def max_abs_diff(self) -> float:
        return max(resume.max_abs_diff(self.cold) for resume in self.resumes)


def run_resume(
    lane: HybridLane, trace_path: Path, *, repeats: int = 3, faults: Sequence[str] = FAULTS
) -> ResumeRun:
    """Cold run, claim, `repeats` resumes, then one caught fault per kind (fresh claim each)."""
    started = time.perf_counter()
    lane.begin(trace_path)
    tokens = prompt(0)
    run = ResumeRun(trace_path, cold=lane.generate(tokens, salt="cold"))
    lane.generate(tokens, claim=submit("claim:resume"))
    run.resumes = [lane.generate(tokens, claim=attach("claim:resume")) for _ in range(repeats)]
    for index, kind in enumerate(faults, start=1):
        claim_id = f"claim:{kind}"
        faulted = prompt(index)
        lane.generate(faulted, claim=submit(claim_id))
        lane.inject(kind, claim_id)
        run.caught[kind] = lane.generate(faulted, claim=attach(claim_id))
    lane.end()
    run.seconds = time.perf_counter() - started
    return run


@dataclass
class ControlRun:
    """The negative control: a corrupted resume served silently."""

    trace_path: Path
    cold: Output
    served: Output


def run_silent_control(
    lane: HybridLane, trace_path: Path, *, fault: str = "restore_transposed"
) -> ControlRun:
    """Inject `fault` with the binding's check replaced by a silent resume."""
    lane.begin(trace_path, negative_control="silent_resume")
    tokens = prompt(0)
    cold = lane.generate(tokens, salt="cold")
    lane.generate(tokens, claim=submit("claim:silent"))
    lane.inject(fault, "claim:silent")
    served = lane.generate(tokens, claim=attach("claim:silent"))
    lane.end()
    return ControlRun(trace_path, cold, served)
