"""vLLM's own scheduler and KV-connector unit tests, run against the binding's classes.

Fetches vLLM's source release (`vllm-<version>.tar.gz`, from the package index with pip),
extracts only its `tests/` tree into a temporary directory (vLLM's code is never copied into
this checkout), and runs `tests/v1/core` and `tests/v1/kv_connector/unit` three ways with the
installed vLLM:

- `stock`: as vLLM ships them;
- `binding`: a pytest plugin (written next to the extracted tests, loaded with `-p` before
  collection) substitutes `ClaimScheduler` / `ClaimAsyncScheduler` for vLLM's `Scheduler` /
  `AsyncScheduler` and `ClaimOffloadingConnector` for `OffloadingConnector`; no claims;
- `trace`: the same, each scheduler writing its own kvclaims trace (closed after its test),
  and every trace checked with `kvclaims.refinement.check_trace`.

Exit 0 only when every test that passes on stock passes in both binding runs (except the
`ALLOW_LIST`, each entry with its reason) and every trace is accepted.

    python bench/vllm_own_tests.py [--cache-dir DIR] [--keep DIR] [-k EXPR] [--vllm-version V]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

VLLM_VERSION = "0.32.0"
TEST_DIRS = ("tests/v1/core", "tests/v1/kv_connector/unit")
PLUGIN_NAME = "kvclaims_substitute"
TRACE_DIR_ENV = "KVCLAIMS_OWN_TESTS_TRACE_DIR"
FETCH_TIMEOUT_S = 600.0

_BYPASSES_INIT = (
    "constructs the scheduler with `object.__new__`, skipping `__init__`, and sets only the "
    "attributes vLLM's own method reads; the binding's hooks need `self.kvclaims`, which only "
    "`__init__` creates (no engine constructs a scheduler this way)"
)
ALLOW_LIST: dict[str, str] = {
    "tests.v1.core.test_scheduler::test_abort_request_when_structured_output_fsm_cannot_advance": (
        _BYPASSES_INIT
    ),
    "tests.v1.core.test_async_scheduler::test_abort_request_when_structured_output_fsm_cannot_advance": (
        _BYPASSES_INIT
    ),
}
"""Tests that may pass on stock and fail with the binding, each with the reason it is not an
incompatibility. Keys are pytest node ids relative to vLLM's source root."""

_OPT: dict[str, object] = {
    "architectures": ["OPTForCausalLM"],
    "model_type": "opt",
    "activation_function": "relu",
    "bos_token_id": 2,
    "eos_token_id": 2,
    "pad_token_id": 1,
    "max_position_embeddings": 2048,
    "torch_dtype": "float16",
    "vocab_size": 50272,
}
STAND_IN_CONFIGS: dict[str, dict[str, object]] = {
    "facebook/opt-125m": _OPT
    | {
        "do_layer_norm_before": True,
        "ffn_dim": 3072,
        "hidden_size": 768,
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "word_embed_proj_dim": 768,
    },
    "facebook/opt-350m": _OPT
    | {
        "do_layer_norm_before": False,
        "ffn_dim": 4096,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "num_hidden_layers": 24,
        "word_embed_proj_dim": 512,
    },
}
"""The hub models vLLM's scheduler tests name, as `config.json` only (their published
architecture values; no weights, no tokenizer): the tests build a `ModelConfig` from them and
never run a model. They are written into a private, offline Hugging Face cache because no
hub is reachable here; tests naming other models fail alike on stock and with the binding."""

_SUMMARY_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)")

PLUGIN_SOURCE = '''\
"""Written by kvclaims bench/vllm_own_tests.py: substitutes the binding's classes."""
import os
import re
import sys
from pathlib import Path

import vllm.v1.core.sched.async_scheduler as _async_mod
import vllm.v1.core.sched.scheduler as _sched_mod
import vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector as _off_mod
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

from kvclaims.vllm_binding import scheduler as _binding
from kvclaims.vllm_binding.config import ADDITIONAL_CONFIG_KEY
from kvclaims.vllm_binding.connector import ClaimOffloadingConnector

_REPLACEMENTS = {
    _sched_mod.Scheduler: _binding.ClaimScheduler,
    _async_mod.AsyncScheduler: _binding.ClaimAsyncScheduler,
    _off_mod.OffloadingConnector: ClaimOffloadingConnector,
}
_TRACE_DIR = os.environ.get("TRACE_DIR_ENV")
_open_arbiters = []
_current_test = ["outside-a-test"]


def _substitute(module):
    if module is None or module.__name__.startswith("kvclaims"):
        return
    for name, value in list(vars(module).items()):
        replacement = _REPLACEMENTS.get(value) if isinstance(value, type) else None
        if replacement is not None:
            setattr(module, name, replacement)


for _module in list(sys.modules.values()):
    _substitute(_module)
KVConnectorFactory._registry["OffloadingConnector"] = lambda: ClaimOffloadingConnector

if _TRACE_DIR is not None:
    _original_init = _binding.ClaimSchedulerMixin.__init__
    _count = [0]

    def _traced_init(self, *args, **kwargs):
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        _count[0] += 1
        test = re.sub(r"[^A-Za-z0-9_.-]+", "_", _current_test[0])[-150:]
        path = Path(_TRACE_DIR) / f"{_count[0]:06d}-{test}.ndjson"
        additional = dict(vllm_config.additional_config or {})
        additional[ADDITIONAL_CONFIG_KEY] = {"trace_path": str(path)}
        vllm_config.additional_config = additional
        _original_init(self, *args, **kwargs)
        _open_arbiters.append(self.kvclaims)

    _binding.ClaimSchedulerMixin.__init__ = _traced_init


def pytest_collectstart(collector):
    # Test modules import vLLM's names at collection; patch each module once it is loaded.
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) and "/tests/" in module.__file__:
            _substitute(module)


def pytest_collection_finish(session):
    for module in list(sys.modules.values()):
        _substitute(module)


def pytest_runtest_setup(item):
    _current_test[0] = item.nodeid


def pytest_runtest_teardown(item, nextitem):
    # A test's schedulers are done when the test is: end their traces as a shutdown would.
    while _open_arbiters:
        _open_arbiters.pop().close()
'''.replace("TRACE_DIR_ENV", TRACE_DIR_ENV)


@dataclass
class RunResult:
    """One pytest run: the summary counts and each test's outcome (node id -> outcome, and the
    first line of the failure message for failed / errored tests)."""

    name: str
    counts: dict[str, int]
    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def parse_summary(output: str) -> dict[str, int]:
    """Counts from pytest's final summary line (`== 3 failed, 10 passed in 1.2s ==`); keys
    are normalized to `passed`, `failed`, `errors`, `skipped`, `xfailed`, `xpassed`,
    `deselected`, `warnings`. Raises `ValueError` when the output has no summary line (the
    run died before the end: never read that as zero failures)."""
    for line in reversed(output.splitlines()):
        stripped = line.strip("= \t")
        if re.search(r"\bin [\d.]+s\b", stripped) and _SUMMARY_COUNT.search(stripped):
            counts: Counter[str] = Counter()
            for number, word in _SUMMARY_COUNT.findall(stripped):
                key = {"error": "errors", "warning": "warnings"}.get(word, word)
                counts[key] += int(number)
            return dict(counts)
    raise ValueError("pytest output has no summary line")


def session_complete(output: str) -> bool:
    """False when pytest's session broke off (INTERNALERROR): its summary then counts only the
    tests run before the break, which must not pass for the whole suite."""
    return "INTERNALERROR>" not in output


def parse_junit(xml_text: str) -> tuple[dict[str, str], dict[str, str]]:
    """Each test case of a JUnit XML report: outcome (`passed`, `failed`, `error`,
    `skipped`) by node id, and the first line of the message of the failed / errored ones."""
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        node = _node_id(case.get("classname", ""), case.get("name", ""))
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                text = child.get("message") or child.text or ""
                if outcome != "skipped":
                    messages[node] = text.strip().splitlines()[0][:300] if text.strip() else child.tag
                break
        # A teardown error on a passed test adds a second record: the worse outcome wins.
        if outcomes.get(node) not in ("failed", "error"):
            outcomes[node] = outcome
    return outcomes, messages


def _node_id(classname: str, name: str) -> str:
    """A test's identity in JUnit's terms (`tests.v1.core.test_x.TestC::test_y[param]`): the
    same in every run, so runs compare by it."""
    return f"{classname}::{name}" if classname else name


def regressions(stock: RunResult, other: RunResult) -> dict[str, str]:
    """Tests that pass on stock and do not pass in `other`, with their error line (a test
    missing from `other` counts as not passing)."""
    return {
        node: other.messages.get(node, other.outcomes.get(node, "missing from the run"))
        for node, outcome in stock.outcomes.items()
        if outcome == "passed" and other.outcomes.get(node) != "passed"
    }


def unexplained(found: dict[str, str], allow_list: dict[str, str] = ALLOW_LIST) -> dict[str, str]:
    """The regressions the allow-list does not explain."""
    return {node: message for node, message in found.items() if node not in allow_list}


def fetch_sdist(cache_dir: Path, version: str = VLLM_VERSION) -> Path:
    """vLLM's source release in `cache_dir` (downloaded once). `pip download --no-binary`
    saves the archive only after building it, which is slow and needs a toolchain; it is
    stopped as soon as the complete archive is in its private temporary directory."""
    name = f"vllm-{version}.tar.gz"
    target = cache_dir / name
    if target.is_file() and _gzip_ok(target):
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kvclaims-pip-") as scratch:
        env = {**os.environ, "TMPDIR": scratch}
        command = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps"]
        command += [f"vllm=={version}", "-d", scratch, "--no-cache-dir"]
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        try:
            found = _wait_for_archive(Path(scratch), name, process)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
        partial = target.with_suffix(".part")
        shutil.copyfile(found, partial)
        partial.replace(target)
    return target


def _wait_for_archive(scratch: Path, name: str, process: subprocess.Popen[bytes]) -> Path:
    deadline = time.monotonic() + FETCH_TIMEOUT_S
    while time.monotonic() < deadline:
        for candidate in scratch.rglob(name):
            if _gzip_ok(candidate):
                return candidate
        if process.poll() is not None:
            for candidate in scratch.rglob(name):
                if _gzip_ok(candidate):
                    return candidate
            stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"pip download ended ({process.returncode}) without {name}: {stderr[-2000:]}")
        time.sleep(1.0)
    raise RuntimeError(f"{name} not downloaded within {FETCH_TIMEOUT_S:.0f} s")


def _gzip_ok(path: Path) -> bool:
    """The whole archive decompresses (a download still in progress does not)."""
    try:
        with gzip.open(path, "rb") as stream:
            while stream.read(1 << 20):
                pass
    except (OSError, EOFError):
        return False
    return True


def write_stand_in_hub(hf_home: Path, configs: dict[str, dict[str, object]] = STAND_IN_CONFIGS) -> None:
    """An offline Hugging Face cache under `hf_home` holding `configs` (repo id -> config)."""
    revision = "0" * 40
    for repo, config in configs.items():
        entry = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
        snapshot = entry / "snapshots" / revision
        snapshot.mkdir(parents=True, exist_ok=True)
        (entry / "refs").mkdir(exist_ok=True)
        (entry / "refs" / "main").write_text(revision)
        (snapshot / "config.json").write_text(json.dumps(config))


def extract_tests(sdist: Path, destination: Path) -> Path:
    """Extract only the `tests/` tree of the source release into `destination`; returns the
    directory to run pytest in (it holds `tests/`)."""
    with tarfile.open(sdist, "r:gz") as archive:
        root = archive.getnames()[0].split("/")[0]
        members = [m for m in archive.getmembers() if m.name.startswith(f"{root}/tests/")]
        archive.extractall(destination, members=members, filter="data")
    return destination / root


def run_pytest(
    name: str, source: Path, work: Path, mode: str, trace_dir: Path | None, extra: list[str]
) -> RunResult:
    """Run vLLM's tests once; `mode` is `stock` or `binding`."""
    junit = work / f"{name}.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--confcutdir=tests/v1"]
    # --tb=native: pytest's own traceback rendering hit CPython 3.11's "AST constructor
    # recursion depth mismatch" on one failing test and ended the whole session (INTERNALERROR).
    command += [
        "--continue-on-collection-errors",
        "-W",
        "ignore::pytest.PytestUnknownMarkWarning",
        "--tb=native",
    ]
    command += [f"--junitxml={junit}", *extra, *TEST_DIRS]
    env = {k: v for k, v in os.environ.items() if k != TRACE_DIR_ENV}
    env |= {"HF_HOME": str(work / "hf"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if mode == "binding":
        command[3:3] = ["-p", PLUGIN_NAME]
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(work), env.get("PYTHONPATH", "")) if p)
    if trace_dir is not None:
        env[TRACE_DIR_ENV] = str(trace_dir)
    started = time.monotonic()
    completed = subprocess.run(command, cwd=source, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    (work / f"{name}.log").write_text(completed.stdout + completed.stderr)
    if not session_complete(completed.stdout + completed.stderr):
        raise RuntimeError(f"pytest run {name!r} broke off with INTERNALERROR; see {work / name}.log")
    counts = parse_summary(completed.stdout + completed.stderr)
    outcomes, messages = parse_junit(junit.read_text()) if junit.is_file() else ({}, {})
    return RunResult(name, counts, outcomes, messages, seconds)


EMPTY = "empty"
"""A trace whose scheduler never saw a request (the checker: `inconclusive`, no model step);
counted apart, since there is nothing in it to accept or reject."""


def trace_category(outcome: str, steps: int) -> str:
    """The bucket a trace verdict is counted in: its outcome, or `EMPTY` for an inconclusive
    trace with no model step."""
    return EMPTY if outcome == "inconclusive" and steps == 0 else outcome


def traces_pass(verdicts: Counter[str]) -> bool:
    """At least one trace was judged and every trace is accepted or empty."""
    return verdicts["accepted"] > 0 and set(verdicts) <= {"accepted", EMPTY}


def check_traces(trace_dir: Path) -> tuple[Counter[str], dict[str, str]]:
    """Verdict counts of every trace in `trace_dir` (by `trace_category`), and the reason of
    each neither accepted nor empty."""
    from kvclaims.refinement import check_trace

    verdicts: Counter[str] = Counter()
    problems: dict[str, str] = {}
    for path in sorted(trace_dir.glob("*.ndjson")):
        verdict = check_trace(path)
        outcome = trace_category(str(verdict.outcome), verdict.steps)
        verdicts[outcome] += 1
        if outcome not in ("accepted", EMPTY):
            problems[path.name] = verdict.reason[:500]
    return verdicts, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=Path.home() / ".cache" / "kvclaims", help="where the sdist is kept"
    )
    parser.add_argument(
        "--keep", type=Path, help="keep logs, JUnit reports and traces here (default: a temp dir)"
    )
    parser.add_argument("-k", dest="keyword", help="pytest -k expression (a subset, for a quick look)")
    parser.add_argument(
        "--vllm-version",
        default=VLLM_VERSION,
        help="whose tests (the installed vLLM's)",
    )
    args = parser.parse_args(argv)
    extra = ["-k", args.keyword] if args.keyword else []
    sdist = fetch_sdist(args.cache_dir, args.vllm_version)
    with tempfile.TemporaryDirectory(prefix="kvclaims-vllm-tests-") as scratch:
        work = Path(args.keep) if args.keep else Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        source = extract_tests(sdist, work / "src")
        (work / f"{PLUGIN_NAME}.py").write_text(PLUGIN_SOURCE)
        write_stand_in_hub(work / "hf")
        trace_dir = work / "traces"
        trace_dir.mkdir(exist_ok=True)
        stock = run_pytest("stock", source, work, "stock", None, extra)
        binding = run_pytest("binding", source, work, "binding", None, extra)
        traced = run_pytest("trace", source, work, "binding", trace_dir, extra)
        verdicts, trace_problems = check_traces(trace_dir)
        report = {
            "vllm": args.vllm_version,
            "runs": {r.name: {**r.counts, "seconds": round(r.seconds)} for r in (stock, binding, traced)},
            "regressions": {r.name: regressions(stock, r) for r in (binding, traced)},
            "allow_list": ALLOW_LIST,
            "trace_verdicts": dict(verdicts),
            "traces_not_accepted": trace_problems,
        }
        print(json.dumps(report, indent=2, sort_keys=True))
        bad = [unexplained(report["regressions"][r.name]) for r in (binding, traced)]
        return 0 if not any(bad) and traces_pass(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
