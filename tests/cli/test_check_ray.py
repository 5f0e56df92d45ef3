"""`kvclaims check --ray`: traces checked as Ray tasks give the verdicts of a local run, in file
order, on the seed corpus and on 64 generated traces; a group of files is one unit of work.

Ray runs inside a loopback-only network namespace (tests/support/loopback.py): it listens on
every interface whatever address it is given. The lane needs the ray extra, root and `unshare`;
it is marked `ray` and takes about a minute on a loaded 2-core machine (Ray's start dominates).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import require_lane
from support.loopback import run_in_loopback, why_no_loopback_ray

from kvclaims.cli.check import CheckOptions, check_files, check_unit, trace_files
from kvclaims.refinement.corpus import default_corpus
from kvclaims.refinement.testing import generate_valid_trace

pytestmark = pytest.mark.ray


@pytest.fixture(autouse=True, scope="module")
def _loopback_ray() -> None:
    require_lane(why_no_loopback_ray(), "make setup")


GENERATED = 64
EVENTS = 1_500
RUNTIME_CAPTURES = Path(__file__).resolve().parents[2] / "descriptors" / "evidence" / "runtime-kv-events"


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The seed corpus (when present), 64 generated traces (one with its last line cut) and a
    TensorRT-LLM KV-event capture (joined with the registry every run is given)."""
    directory = tmp_path_factory.mktemp("generated")
    for seed in range(GENERATED):
        with (directory / f"generated-{seed:03d}.ndjson").open("wb") as out:
            generate_valid_trace(out, EVENTS, seed=seed)
    cut = directory / "generated-007.ndjson"
    cut.write_bytes(cut.read_bytes()[:-40])  # its last line cut: invalid
    corpus = default_corpus()
    capture = RUNTIME_CAPTURES / "trtllm-serializer.jsonl"
    return trace_files([directory, capture, *([corpus] if corpus.is_dir() else [])])


def test_ray_verdicts_are_the_local_verdicts_in_file_order(traces: list[Path]) -> None:
    registry = RUNTIME_CAPTURES / "claim-sys.registry.yaml"
    local = [v.to_json() for v in check_files(traces, jobs=2, registry=registry)]
    argv = [sys.executable, "-m", "kvclaims", "check", "--ray", "--jobs", "2", "--json"]
    done = run_in_loopback([*argv, "--registry", str(registry), *map(str, traces)], timeout=400)
    on_ray = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert on_ray == local, done.stderr.decode()[-2000:]
    assert len(on_ray) == len(traces) >= GENERATED
    assert {v["outcome"] for v in on_ray} >= {"accepted", "invalid"}
    assert "trtllm-kv-events" in {v["format"] for v in on_ray}
    assert done.returncode == 2  # the exit code of the worst outcome (invalid), as a local run's


GROUPED = """
import functools, json, sys
from pathlib import Path
from kvclaims.cli.check import CheckOptions, check_unit
from kvclaims.refinement import fanout
paths = [Path(p) for p in sys.argv[1:]]
units = [tuple(paths[:3]), tuple(paths[3:4]), tuple(paths[4:])]
work = functools.partial(check_unit, CheckOptions())
for verdicts in fanout.stream(work, units, jobs=2, ray_address=fanout.LOCAL):
    print(json.dumps([v.to_json() for v in verdicts]))
"""


def test_a_group_of_files_is_one_unit_and_comes_back_whole(traces: list[Path]) -> None:
    """The fan-out is generic over units: three files as one unit come back as one result of
    three verdicts, in the unit's order, equal to checking them here."""
    paths = traces[:6]
    done = run_in_loopback([sys.executable, "-c", GROUPED, *map(str, paths)], timeout=400)
    results = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [len(r) for r in results] == [3, 1, 2], done.stderr.decode()[-2000:]
    here = [
        [v.to_json() for v in check_unit(CheckOptions(), unit)] for unit in (paths[:3], paths[3:4], paths[4:])
    ]
    assert results == here
