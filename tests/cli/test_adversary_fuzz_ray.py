"""`kvclaims adversary --ray` and `kvclaims fuzz --seeds N --ray`: positive rows and fuzzing seeds
run as Ray tasks give what a run in this process gives (the same descriptor files and index; the
same per-seed outcomes).

Ray runs inside a loopback-only network namespace (tests/support/loopback.py), as in
test_check_ray.py; the lane is marked `ray`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import require_lane
from support.loopback import run_in_loopback, why_no_loopback_ray

from kvclaims.lab.micro_fuzzing import SeededBatch
from kvclaims.solver.adversary import run_adversary
from kvclaims.solver.positives import positive_rows

pytestmark = pytest.mark.ray


@pytest.fixture(autouse=True, scope="module")
def _loopback_ray() -> None:
    require_lane(why_no_loopback_ray(), "make setup")


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root`, by its path relative to `root`."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_adversary_on_ray_writes_the_local_descriptors(tmp_path: Path) -> None:
    descriptors = tmp_path / "descriptors-in"
    descriptors.mkdir()  # no shipped descriptors: the fixture rows only, to keep the lane short
    rows = positive_rows(descriptors)
    local = run_adversary(rows, tmp_path / "local", jobs=1)
    argv = [sys.executable, "-m", "kvclaims", "adversary", "--ray", "--jobs", "2", "--no-traces", "--json"]
    argv += ["--descriptors", str(descriptors), "-o", str(tmp_path / "ray")]
    done = run_in_loopback(argv, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    summary = json.loads(done.stdout.decode().splitlines()[-1])
    assert summary["distinct_descriptors"] == local.distinct > 0
    assert summary["complete"] and local.complete
    written = tree(tmp_path / "ray" / "descriptors")
    assert written == tree(tmp_path / "local" / "descriptors")
    assert "index.json" in written and len(written) == local.distinct + 1


def test_fuzz_seeds_on_ray_have_the_outcomes_of_one_process() -> None:
    batch = SeededBatch("full_arbiter", examples=8)
    here = [batch(seed).to_json() for seed in range(3, 7)]
    argv = [sys.executable, "-m", "kvclaims", "fuzz", "--seeds", "4", "--first-seed", "3", "--examples", "8"]
    done = run_in_loopback([*argv, "--ray", "--jobs", "2", "--json"], timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    on_ray = json.loads(done.stdout.decode().splitlines()[-1])
    assert on_ray["seeds"] == here
    assert [s["seed"] for s in here] == [3, 4, 5, 6]
    assert len({json.dumps(s["phases"]) + str(s["rule_steps"]) for s in here}) > 1  # seeds differ
    assert on_ray["examples"] == str(sum(s["examples"] for s in here))
