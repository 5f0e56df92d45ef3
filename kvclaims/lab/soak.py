"""A bounded soak of a served engine: many concurrent clients against `kvclaims serve` (or stock
vLLM's OpenAI server, for the latency baseline), on loopback, with the tiny model.

`ServedEngine` starts one server process (`python -m kvclaims serve ...`, or vLLM's server
module for `binding=False`), waits for `/health`, finds the engine-core process (for SIGKILL
and its peak memory), and always kills what it started. `soak()` runs `clients` asyncio clients
that each loop over a weighted mix until `duration_s` passed or `max_requests` were sent
(whichever first; every request has a timeout, so the run stops by itself): plain requests,
claim submissions across owners and modes (hard_protected, demotable, expiring, best_effort,
and offloadable with the connector), attaches, releases and demotions of the owner's own
claims, requests too large to fit beside the protected claims (the binding refuses them),
requests longer than the model (vLLM answers 400), malformed claim metadata, and, with
`hostile`, one owner that floods ids, exceeds its budget and operates on others' claims.

`trace_facts()` reads a trace's events: counts by event type and whether every `seq` from 0
is present exactly once. Figures and the CLI: `bench/soak.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kvclaims.lab.local_server import free_port, wait_healthy
from kvclaims.vllm_binding.metadata import NOTE_PREFIX
from kvclaims.vllm_binding.outcome import response_note

BLOCK = 32
VOCABULARY = 500
"""Token ids stay below the tiny model's 512-token vocabulary (an id at or above it kills the
engine core)."""
MAX_MODEL_LEN = 736
SERVED_NAME = "kvclaims-tiny"
STARTUP_TIMEOUT_S = 600.0


def prompt(tag: str, blocks: int, extra: int = 1) -> list[int]:
    """`blocks` full blocks (plus `extra` tokens) of token ids determined by `tag`."""
    seed = sum(ord(c) * 31**i for i, c in enumerate(tag)) % 9973
    return [(seed * 97 + i * 7) % VOCABULARY + 1 for i in range(blocks * BLOCK + extra)]


# -- one server --------------------------------------------------------------------------------


@dataclass
class ServerSpec:
    """One server start. `binding=False` starts stock vLLM with the same engine arguments."""

    model: Path
    directory: Path
    binding: bool = True
    trace_name: str = "trace.ndjson"
    gpu_blocks: int = 32
    """31 usable blocks: a 22-block request fits alone, not beside 10 protected blocks."""
    max_num_seqs: int = 8
    binding_config: dict[str, Any] = field(default_factory=dict)
    file_size_limit: int | None = None
    """RLIMIT_FSIZE set on the engine core once the server is healthy: a full disk for the
    trace (Python ignores SIGXFSZ, so a write past it fails with EFBIG). Not at start: vLLM
    sizes its shared-memory queues with ftruncate, which the limit refuses."""

    def command(self, port: int) -> list[str]:
        engine = [
            "--port", str(port), "--served-model-name", SERVED_NAME, "--skip-tokenizer-init",
            "--enforce-eager", "--dtype", "float32", "--block-size", str(BLOCK),
            "--max-model-len", str(MAX_MODEL_LEN), "--num-gpu-blocks-override", str(self.gpu_blocks),
            "--max-num-seqs", str(self.max_num_seqs), "--max-num-batched-tokens", "1024",
        ]  # fmt: skip
        if not self.binding:
            stock = ["--host", "127.0.0.1", "--kv-cache-memory-bytes", str(64 << 20)]
            stock += ["--gpu-memory-utilization", "0.3", "--shutdown-timeout", "10"]
            return [
                sys.executable,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(self.model),
            ] + (engine + stock)
        binding = ["--trace", str(self.directory / self.trace_name)]
        if self.binding_config:
            binding += ["--binding-config", json.dumps(self.binding_config)]
        return [sys.executable, "-m", "kvclaims", "serve", str(self.model), *binding, *engine]


class ServedEngine:
    """A running server; use as a context manager (the process tree is killed on exit)."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.port = free_port()
        self.log_path = spec.directory / ("server.log" if spec.binding else "stock.log")
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s = 0.0
        self._engine_pid: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def trace(self) -> Path:
        return self.spec.directory / self.spec.trace_name

    def __enter__(self) -> ServedEngine:
        environment = {**os.environ, "VLLM_HOST_IP": "127.0.0.1", "VLLM_NO_USAGE_STATS": "1"}
        start = time.monotonic()
        self.process = subprocess.Popen(
            self.spec.command(self.port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment
        )
        # the log goes through a pipe: a file-size limit on the engine must not cut its log
        threading.Thread(target=_copy, args=(self.process.stdout, self.log_path), daemon=True).start()
        try:
            wait_healthy(self.url, timeout_s=STARTUP_TIMEOUT_S, process=self.process, log=self.log_path)
            limit = self.spec.file_size_limit
            if limit is not None:
                resource.prlimit(self.engine_core_pid(), resource.RLIMIT_FSIZE, (limit, limit))
        except BaseException:
            self.kill()
            raise
        self.startup_s = time.monotonic() - start
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def descendants(self) -> list[int]:
        """Process ids under the server (children first), from /proc."""
        assert self.process is not None
        found: list[int] = []
        frontier = [self.process.pid]
        while frontier:
            pid = frontier.pop()
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            found += [int(c) for c in children]
            frontier += [int(c) for c in children]
        return found

    def engine_core_pid(self) -> int:
        """The engine-core process (vLLM titles it `VLLM::EngineCore`)."""
        if self._engine_pid is None:
            for pid in self.descendants():
                try:
                    if b"EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        self._engine_pid = pid
                        break
                except OSError:
                    continue
        if self._engine_pid is None:
            raise RuntimeError("no engine-core process under the server")
        return self._engine_pid

    def peak_rss_bytes(self) -> dict[str, int]:
        """VmHWM (peak resident set) of the API server and the engine core, now."""
        assert self.process is not None
        return {
            "api_server": _peak_rss(self.process.pid),
            "engine_core": _peak_rss(self.engine_core_pid()),
        }

    def kill_engine_core(self) -> None:
        """SIGKILL the engine core (the crash the trace must reveal as truncated)."""
        os.kill(self.engine_core_pid(), signal.SIGKILL)

    def terminate(self, timeout_s: float = 120.0) -> int | None:
        """SIGTERM and wait (the binding closes the trace); the exit code, None if killed."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return self.process.returncode

    def kill(self) -> None:
        if self.process is None:
            return
        for pid in [*self.descendants(), self.process.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.process.wait(timeout=60)


def _copy(source: IO[bytes] | None, target: Path) -> None:
    assert source is not None
    with target.open("ab") as out:
        for line in iter(source.readline, b""):
            out.write(line)
            out.flush()


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


# -- the workload ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SoakPlan:
    """A bounded workload: it ends after `duration_s` or `max_requests`, whichever first."""

    clients: int = 32
    duration_s: float = 30.0
    max_requests: int = 100_000
    owners: tuple[str, ...] = ("tenant-0", "tenant-1", "tenant-2", "tenant-3")
    hostile: bool = False
    offload: bool = False
    seed: int = 0
    request_timeout_s: float = 120.0


KINDS: tuple[tuple[str, int], ...] = (
    ("plain", 30),
    ("submit", 22),
    ("attach", 16),
    ("release", 6),
    ("demote", 5),
    ("oversized", 5),
    ("too_long", 3),
    ("malformed", 3),
)
"""What a benign client sends, with weights."""

HOSTILE = "mallory"


@dataclass
class SoakResult:
    """What the clients saw."""

    sent: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    by_owner: dict[str, Counter[str]] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0

    def note(self, owner: str, outcome: str) -> None:
        self.outcomes[outcome] += 1
        self.by_owner.setdefault(owner, Counter())[outcome] += 1

    def latency(self, quantile: float) -> float:
        ordered = sorted(self.latencies_s)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]

    def summary(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "wall_s": round(self.wall_s, 1),
            "outcomes": dict(sorted(self.outcomes.items())),
            "by_owner": {k: dict(sorted(v.items())) for k, v in sorted(self.by_owner.items())},
            "latency_p50_s": round(self.latency(0.50), 4),
            "latency_p99_s": round(self.latency(0.99), 4),
            "served": len(self.latencies_s),
        }


class _Shared:
    """State the clients share: the budget and the claims each owner holds (as far as its
    clients know: a claim may expire or be demoted without their asking)."""

    def __init__(self, plan: SoakPlan) -> None:
        self.plan = plan
        self.deadline = time.monotonic() + plan.duration_s
        self.sent = 0
        self.claims: dict[str, list[tuple[str, str]]] = {owner: [] for owner in (*plan.owners, HOSTILE)}

    def take(self) -> bool:
        if self.sent >= self.plan.max_requests or time.monotonic() >= self.deadline:
            return False
        self.sent += 1
        return True


def classify(status: int, body: object) -> str:
    """A response as one outcome name: a claim note's kind (`claim_accepted`, `claim_rejected`,
    `refused_capacity` (a 429), ...), else `http_<status>`, or `served` (a 200 without a note)."""
    note = response_note(body)
    if note is None:
        if status != 200 or not isinstance(body, dict):
            return f"http_{status}"
        return "served" if body["choices"][0].get("finish_reason") != "abort" else "aborted"
    kind = note[len(NOTE_PREFIX) :].split(":", 2)
    if kind[0] == "refused":
        return f"refused_{kind[1]}"
    return kind[0]


async def _client(index: int, url: str, shared: _Shared, result: SoakResult, http: Any) -> None:
    plan = shared.plan
    rng = random.Random(plan.seed * 1000 + index)
    hostile = plan.hostile and index == 0
    owner = HOSTILE if hostile else plan.owners[index % len(plan.owners)]
    counter = 0
    while shared.take():
        counter += 1
        kind = _hostile_kind(rng) if hostile else rng.choices(*zip(*KINDS, strict=True))[0]
        tag = f"{plan.seed}-{index}-{counter}"  # claim ids differ between runs with other seeds
        tokens, xargs, max_tokens, on_accept = _request(kind, owner, tag, rng, shared)
        body: dict[str, Any] = {"model": SERVED_NAME, "prompt": tokens, "max_tokens": max_tokens}
        if xargs is not None and "kvclaims_claim_id" in xargs:
            body["vllm_xargs"] = xargs
        start = time.monotonic()
        try:
            answer = await http.post(f"{url}/v1/completions", json=body, timeout=plan.request_timeout_s)
            status, payload = answer.status_code, _json_or_none(answer)
        except Exception as error:  # a transport failure is an outcome here
            result.note(owner, f"transport_{type(error).__name__}")
            continue
        outcome = classify(status, payload)
        if status == 200:
            result.latencies_s.append(time.monotonic() - start)
        if xargs is not None and "kvclaims_claim_id" not in xargs:
            kind = "plain"  # an operation with nothing to operate on went out as a plain request
        result.note(owner, f"{kind}:{outcome}")
        if outcome == "claim_accepted" and on_accept is not None:
            shared.claims[owner].append(on_accept)
        if outcome in ("claim_released", "claim_demoted") and xargs is not None:
            held = shared.claims[owner]
            gone = xargs["kvclaims_claim_id"]
            held[:] = [c for c in held if c[0] != gone]


def _json_or_none(answer: Any) -> object:
    try:
        return answer.json()
    except ValueError:  # vLLM's plain-text errors
        return None


def _hostile_kind(rng: random.Random) -> str:
    return rng.choice(
        ("flood", "over_budget", "foreign_attach", "foreign_release", "foreign_demote", "plain")
    )


def _request(
    kind: str, owner: str, tag: str, rng: random.Random, shared: _Shared
) -> tuple[list[int], dict[str, Any] | None, int, tuple[str, str] | None]:
    """(prompt, vllm_xargs, max_tokens, the claim to remember if accepted) for one request."""
    plan = shared.plan
    base = {"kvclaims_owner": owner}
    if kind == "plain":
        return prompt(f"plain-{tag}", rng.randint(0, 4), rng.randint(1, 31)), None, rng.randint(1, 8), None
    if kind == "submit":
        obj = f"{owner}/obj{rng.randint(0, 5)}"
        blocks = 1 + sum(map(ord, obj)) % 4
        modes = ["hard_protected", "demotable", "expiring", "best_effort"] + (
            ["offloadable"] if plan.offload else []
        )
        mode = rng.choice(modes)
        claim_id = f"{owner}:{tag}"
        xargs = base | {
            "kvclaims_claim_id": claim_id,
            "kvclaims_mode": mode,
            "kvclaims_footprint_blocks": blocks,
            "kvclaims_object_id": obj.replace("/", "-"),
        }
        if mode == "expiring":
            xargs["kvclaims_duration_steps"] = rng.randint(5, 200)
        return prompt(obj, blocks, rng.randint(1, 20)), xargs, 2, (claim_id, obj)
    if kind in ("attach", "release", "demote"):
        held = shared.claims[owner]
        if not held:  # nothing to operate on yet: a plain request, told apart by its xargs
            return prompt(f"plain-{tag}", 1), base, 2, None
        claim_id, obj = rng.choice(held)
        blocks = 1 + sum(map(ord, obj)) % 4
        xargs = base | {"kvclaims_claim_id": claim_id, "kvclaims_op": kind}
        return prompt(obj if kind == "attach" else f"op-{tag}", blocks, rng.randint(1, 20)), xargs, 2, None
    if kind == "oversized":
        return prompt(f"big-{tag}", 21, 1), None, 20, None
    if kind == "too_long":
        return prompt(f"long-{tag}", 24, 1), None, 4, None
    if kind == "malformed":
        bad = rng.choice(
            ({"kvclaims_mode": "telepathic"}, {"kvclaims_footprint_blocks": True}, {"kvclaims_lease": 3})
        )
        return prompt(f"bad-{tag}", 1), base | {"kvclaims_claim_id": f"{owner}:{tag}"} | bad, 2, None
    return _hostile_request(kind, owner, tag, rng, shared)


def _hostile_request(
    kind: str, owner: str, tag: str, rng: random.Random, shared: _Shared
) -> tuple[list[int], dict[str, Any] | None, int, tuple[str, str] | None]:
    base = {"kvclaims_owner": owner}
    if kind == "flood":
        xargs = base | {"kvclaims_claim_id": f"{owner}:{tag}", "kvclaims_mode": "best_effort"}
        return prompt(f"flood-{tag}", 1), xargs | {"kvclaims_footprint_blocks": 1}, 1, None
    if kind == "over_budget":
        xargs = base | {"kvclaims_claim_id": f"{owner}:{tag}", "kvclaims_mode": "hard_protected"}
        return prompt(f"greedy-{tag}", 18), xargs | {"kvclaims_footprint_blocks": 18}, 1, None
    if kind.startswith("foreign_"):
        victims = [c for o in shared.plan.owners for c in shared.claims[o]]
        if victims:
            claim_id, obj = rng.choice(victims)
            op = kind.removeprefix("foreign_")
            return prompt(obj, 1), base | {"kvclaims_claim_id": claim_id, "kvclaims_op": op}, 1, None
    return prompt(f"m-{tag}", 1), base, 2, None


async def _soak(url: str, plan: SoakPlan) -> SoakResult:
    import httpx

    shared = _Shared(plan)
    result = SoakResult()
    limits = httpx.Limits(max_connections=plan.clients, max_keepalive_connections=plan.clients)
    start = time.monotonic()
    async with httpx.AsyncClient(limits=limits) as http:
        await asyncio.gather(*(_client(i, url, shared, result, http) for i in range(plan.clients)))
    result.wall_s = time.monotonic() - start
    result.sent = shared.sent
    return result


def soak(url: str, plan: SoakPlan) -> SoakResult:
    """Run `plan` against the server at `url` (loopback only) and return what the clients saw."""
    if not url.startswith(("http://127.", "http://localhost")):
        raise ValueError("the soak talks to loopback servers only")
    return asyncio.run(_soak(url, plan))


# -- the trace ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceFacts:
    events: Counter[str]
    seq_complete: bool
    """Every seq from 0 to the last is present exactly once, in order."""
    closed: bool
    accepted_claims: frozenset[str]


def trace_facts(path: Path) -> TraceFacts:
    """Counts by event type, seq completeness, whether the trace is closed, accepted claims."""
    events: Counter[str] = Counter()
    seqs: list[int] = []
    accepted: set[str] = set()
    closed = False
    for line in iter_lines(path):
        event = json.loads(line)
        events[event["event"]] += 1
        seqs.append(event["seq"])
        closed = event["event"] == "trace_closed"
        if event["event"] == "resident_claim_accepted":
            accepted.add(event["claim_id"])
    return TraceFacts(events, seqs == list(range(len(seqs))), closed, frozenset(accepted))


def iter_lines(path: Path) -> Iterator[str]:
    """The event lines of a trace (after the header; a torn last line is left out)."""
    with path.open() as lines:
        next(lines, None)
        for line in lines:
            if line.endswith("\n"):
                yield line
