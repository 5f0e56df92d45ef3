"""Engines as deployments run them: the multiprocess engine core and data-parallel servers.

The engine lane (`engine_lane`) keeps vLLM's engine core in the test's process so that many
scenarios can share one engine. Deployments do not: vLLM's server, and `vllm.LLM` by default,
run the engine core (scheduler, binding, trace writer) in a process of its own, and
`--data-parallel-size N` runs N such engines behind one front end. This module runs the same
binding that way, on CPU with the tiny model:

- `MultiprocessLane`: an engine lane whose engine core is a separate process
  (`VLLM_ENABLE_V1_MULTIPROCESSING=1`, vLLM's default). The scheduler is out of reach, so each
  scenario gets an engine of its own: `begin` starts it with the scenario's binding config
  and trace path, `end` shuts it down, which is what closes the trace. Every engine-lane
  scenario runs on it unchanged (`kvclaims vllm scenario NAME --lane engine --engine-core
  multiprocess`).
- `DataParallelServer`: vLLM's OpenAI server with `--data-parallel-size 2` (mp backend, each
  engine on its own core), the claim scheduler and one trace stream per engine
  (`BindingConfig.trace_template`); requests are pinned to an engine with vLLM's
  `X-data-parallel-rank` header.
- `resolved_async_scheduling`: what vLLM makes of a request for async scheduling on this
  platform (the CPU platform turns it off: `vllm/platforms/cpu.py`, "async scheduling is not
  required on CPU"), without starting an engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kvclaims.lab.engine_lane import (
    ENGINE_BLOCK_SIZE,
    EngineLane,
    EngineSpec,
    ScenarioRun,
    base_config,
    llm_kwargs,
    scenario_config,
)
from kvclaims.lab.local_server import post_json
from kvclaims.lab.tiny_model import SERVED_MODEL_NAME, cached_tiny_model
from kvclaims.vllm_binding.config import DP_RANK_PLACEHOLDER, BindingConfig
from kvclaims.vllm_binding.faults import LoadFaultPlan
from kvclaims.vllm_binding.http import MIDDLEWARE
from kvclaims.vllm_binding.outcome import response_note
from kvclaims.vllm_binding.plugin import require_supported_vllm

MULTIPROCESS_SOURCE = "vllm engine (vllm.LLM, multiprocess engine core) + kvclaims.vllm_binding"

SHUTDOWN_TIMEOUT_SECONDS = 60.0
"""How long the front end waits for the engine core to exit after SIGTERM before it kills it.
The engine core closes the trace on its way out; measured 14 s on a loaded 2-core machine, and
a 10 s timeout there killed it with the trace's last lines unwritten."""


class MultiprocessLane(EngineLane):
    """The engine lane with vLLM's multiprocess engine core: one engine per scenario.

    Invariant: an engine runs only between `begin` and `end`; its trace is complete once `end`
    returns (the engine core closed it while shutting down).
    """

    def __init__(self, spec: EngineSpec | None = None, *, model_dir: Path | None = None) -> None:
        require_supported_vllm()
        self.spec = spec or EngineSpec()
        self.model_dir = model_dir or cached_tiny_model()
        self.capture = None  # KV-event capture needs the in-process lane
        self.base = base_config(self.spec)
        self.llm: Any = None
        self.start_seconds = 0.0
        self._run: ScenarioRun | None = None

    @property
    def scheduler(self) -> Any:
        raise RuntimeError("the multiprocess engine core's scheduler lives in another process")

    def begin(
        self,
        trace_path: Path,
        *,
        binding: dict[str, Any] | None = None,
        kv_load_failure_policy: Literal["fail", "recompute"] = "fail",
        faults: LoadFaultPlan | None = None,
        kv_events_path: Path | None = None,
    ) -> ScenarioRun:
        """Start this scenario's engine (config, trace, failure policy fixed at start)."""
        if self._run is not None:
            raise RuntimeError("a scenario is already running on this lane")
        if kv_events_path is not None:
            raise RuntimeError("KV-event capture runs on the in-process engine lane only")
        config = scenario_config(self.base, trace_path, MULTIPROCESS_SOURCE, binding)
        assert config.offload is not None
        offload = config.offload.model_copy(
            update={
                "kv_load_failure_policy": kv_load_failure_policy,
                "load_faults": None if faults is None else faults.to_dict(),
            }
        )
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        config = config.model_copy(update={"offload": offload})
        self.llm = start_multiprocess_llm(self.model_dir, self.spec, config)
        self.start_seconds += time.perf_counter() - started
        self._run = ScenarioRun(trace_path)
        return self._run

    def set_fault_plan(self, plan: LoadFaultPlan) -> int:
        """Not while serving here: `collective_rpc` cannot ship a function to a multiprocess
        engine core unless vLLM may pickle (`VLLM_ALLOW_INSECURE_SERIALIZATION=1`), so this
        lane sets each scenario's plan at start-up (`OffloadSettings.load_faults`)."""
        del plan
        raise RuntimeError(
            "the multiprocess lane sets failure plans at engine start only (collective_rpc "
            "cannot send a function to the engine core without VLLM_ALLOW_INSECURE_SERIALIZATION=1)"
        )

    def end(self) -> ScenarioRun:
        """Shut the engine down; the engine core closes the trace on its way out."""
        run = self._require_run()
        self.llm.llm_engine.engine_core.shutdown(timeout=SHUTDOWN_TIMEOUT_SECONDS)
        self.llm = None
        self._run = None
        return run

    def close(self) -> None:
        if self._run is not None:
            self.end()


class AsyncEngineLane(EngineLane):
    """The in-process engine lane with async scheduling on a CPU engine.

    vLLM's CPU platform turns async scheduling off whatever was asked ("async scheduling is
    not required on CPU", `CpuPlatform.check_and_update_config`). This lane keeps the value
    asked for while the engine is configured, so the engine core runs `ClaimAsyncScheduler`
    with a batch queue: the model output of step N arrives after `schedule()` of step N+1,
    with the connector's loads in flight, on the real CPU model runner. vLLM does not ship
    this configuration on CPU; it exercises the binding's async path end to end, which a GPU
    engine runs by default (`make gpu-lane`).
    """

    def __init__(self, spec: EngineSpec | None = None, *, model_dir: Path | None = None) -> None:
        from vllm.platforms.cpu import CpuPlatform

        resolve = CpuPlatform.__dict__["check_and_update_config"]

        def keep_async_scheduling(cls: type, vllm_config: Any) -> None:
            asked = vllm_config.scheduler_config.async_scheduling
            resolve.__func__(cls, vllm_config)
            vllm_config.scheduler_config.async_scheduling = asked

        CpuPlatform.check_and_update_config = classmethod(keep_async_scheduling)  # type: ignore[method-assign,assignment]
        try:
            super().__init__(spec, model_dir=model_dir, async_scheduling=True)
        finally:
            CpuPlatform.check_and_update_config = resolve  # type: ignore[method-assign]

    @property
    def batch_queue_size(self) -> int:
        """Scheduled batches the engine core keeps in flight (1: synchronous)."""
        return int(self.llm.llm_engine.engine_core.engine_core.batch_queue_size)


def start_multiprocess_llm(model_dir: Path, spec: EngineSpec, config: BindingConfig, **extra: Any) -> Any:
    """`vllm.LLM` with the binding and its engine core in a separate process.

    vLLM reads `VLLM_ENABLE_V1_MULTIPROCESSING` when the engine starts, and caches its
    environment once an in-process engine has run: such a process cannot start this one.
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
    import vllm.envs as envs
    from vllm import LLM

    if not envs.VLLM_ENABLE_V1_MULTIPROCESSING:
        raise RuntimeError(
            "vLLM cached VLLM_ENABLE_V1_MULTIPROCESSING=0 (an in-process engine ran in this "
            "process): start the multiprocess lane in a fresh process"
        )
    return LLM(str(model_dir), **llm_kwargs(spec), **config.engine_kwargs(), **extra)


def resolved_async_scheduling(requested: bool) -> bool:
    """Whether vLLM, asked for `async_scheduling=requested`, runs this platform's lane engine
    with async scheduling (its resolved `SchedulerConfig`; no engine is started)."""
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(str(cached_tiny_model()), **llm_kwargs(EngineSpec()), async_scheduling=requested)
    return bool(args.create_engine_config().scheduler_config.async_scheduling)


# -- data parallel: vLLM's OpenAI server with two engines ---------------------------------------


@dataclass(frozen=True)
class Completion:
    """One completion as the HTTP client saw it: the status (a refusal is a 429/503 without
    choices), the finish reason, the claim note (`outcome.response_note`)."""

    status: int
    finish_reason: str | None
    claim_note: str | None


class DataParallelServer:
    """`python -m vllm.entrypoints.openai.api_server --data-parallel-size N` on loopback with
    the claim scheduler; engine k writes `trace_template(k)` and runs on core k.

    Invariant: the server runs between `start` and `stop`; after `stop` every engine has
    exited and closed its trace.
    """

    def __init__(self, out: Path, port: int, *, engines: int = 2, spec: EngineSpec | None = None) -> None:
        self.out = out
        self.port = port
        self.engines = engines
        self.spec = spec or EngineSpec()
        self.binding = BindingConfig(trace_path=str(out / f"claims-{DP_RANK_PLACEHOLDER}.ndjson"))
        self.log_path = out / "server.log"
        self._process: subprocess.Popen[bytes] | None = None

    def trace(self, rank: int) -> Path:
        template = self.binding.trace_template(rank)
        assert template is not None
        return Path(template.replace(DP_RANK_PLACEHOLDER, str(rank)))

    def command(self) -> list[str]:
        kwargs = self.binding.engine_kwargs()
        model = llm_kwargs(self.spec)
        return [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(cached_tiny_model()),
            "--served-model-name",
            SERVED_MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-parallel-size",
            str(self.engines),
            "--data-parallel-backend",
            "mp",
            "--middleware",
            MIDDLEWARE,
            "--skip-tokenizer-init",
            "--enforce-eager",
            "--dtype",
            "float32",
            "--block-size",
            str(ENGINE_BLOCK_SIZE),
            "--max-model-len",
            str(model["max_model_len"]),
            "--num-gpu-blocks-override",
            str(model["num_gpu_blocks_override"]),
            "--kv-cache-memory-bytes",
            str(model["kv_cache_memory_bytes"]),
            "--gpu-memory-utilization",
            "0.3",
            "--max-num-seqs",
            str(model["max_num_seqs"]),
            "--enable-prefix-caching",
            "--disable-log-stats",
            "--shutdown-timeout",
            str(int(SHUTDOWN_TIMEOUT_SECONDS)),
            "--scheduler-cls",
            kwargs["scheduler_cls"],
            "--additional-config",
            json.dumps(kwargs["additional_config"]),
        ]

    def start(self, timeout: float = 240.0) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        environment = {
            **os.environ,
            "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_CPU_OMP_THREADS_BIND": "|".join(
                str(rank % (os.cpu_count() or 1)) for rank in range(self.engines)
            ),
        }
        started = time.perf_counter()
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=environment
            )
        while time.perf_counter() - started < timeout:
            if self._process.poll() is not None:
                raise RuntimeError(f"the server exited with {self._process.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the server was not healthy within {timeout} s; see {self.log_path}")

    def complete(
        self, rank: int, prompt: Sequence[int], *, claim: dict[str, Any] | None = None
    ) -> Completion:
        """One greedy 2-token completion on engine `rank` (vLLM's `X-data-parallel-rank`)."""
        body: dict[str, Any] = {
            "model": SERVED_MODEL_NAME,
            "prompt": list(prompt),
            "max_tokens": 2,
            "temperature": 0.0,
            "ignore_eos": True,
        }
        if claim is not None:
            body["vllm_xargs"] = claim
        status, answer = post_json(
            f"http://127.0.0.1:{self.port}/v1/completions",
            body,
            headers={"X-data-parallel-rank": str(rank)},
            timeout_s=120,
        )
        choices = answer.get("choices") if status == 200 else None
        finish = choices[0].get("finish_reason") if choices else None
        return Completion(status, finish, response_note(answer))

    def stop(self) -> int | None:
        """SIGTERM, as an orchestrator stops a server; waits for every engine to exit."""
        if self._process is None:
            return None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=SHUTDOWN_TIMEOUT_SECONDS + 30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        code = self._process.returncode
        self._process = None
        return code
