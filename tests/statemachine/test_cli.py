"""`kvclaims scenario`, `kvclaims lifecycle` and `kvclaims fuzz` as users and scripts see them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvclaims.cli import main
from kvclaims.lab.micro_scenarios import SCENARIOS


def kvclaims(*args: str) -> subprocess.CompletedProcess[str]:
    """The real entry point in a subprocess: what a shell script sees (and no traceback)."""
    return subprocess.run(
        [sys.executable, "-m", "kvclaims", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_list_prints_every_scenario_name_one_per_line() -> None:
    result = kvclaims("scenario", "--list")
    assert result.returncode == 0
    names = result.stdout.splitlines()
    assert names == list(SCENARIOS)
    assert any(n.startswith("control-") for n in names)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("scenario", "no-such-scenario"), "unknown scenario"),
        (("scenario", "hard-claim-60-70-80", "--usable-blocks", "0"), "positive number of usable blocks"),
        (("scenario", "hard-claim-60-70-80", "--usable-blocks", "-3"), "positive number of usable blocks"),
        (("scenario", "hard-claim-60-70-80", "--usable-blocks", "40"), "larger than the pool"),
        (("scenario",), "give a scenario NAME"),
    ],
)
def test_bad_scenario_input_is_a_clear_error_with_exit_2(args: tuple[str, ...], message: str) -> None:
    result = kvclaims(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_duplicate_claim_ids_in_a_scenario_file_exit_2(tmp_path: Path) -> None:
    claim = {"claim_id": "c", "object_id": "o", "mode": "hard_protected", "footprint_blocks": 4}
    spec = {"scenario": 1, "name": "dup", "usable_blocks": 16, "policy": "hard_protected",
            "steps": [{"claims": [claim, claim]}]}  # fmt: skip
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(spec))
    result = kvclaims("scenario", "--file", str(path))
    assert result.returncode == 2
    assert "duplicate claim id" in result.stderr and "Traceback" not in result.stderr


def test_json_summary_and_trace_file(tmp_path: Path) -> None:
    trace = tmp_path / "hard.ndjson"
    result = kvclaims("scenario", "hard-claim-60-70-80", "--json", "-o", str(trace))
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert report["summary"]["capacity_proof"]["capacity_shortfall_blocks"] == 50
    assert report["trace_checks"] == {"hard-claim-60-70-80": "accepted"}
    lines = trace.read_text().splitlines()
    assert json.loads(lines[0])["usable_blocks"] == 80
    assert any(json.loads(line)["event"] == "active_request_refused" for line in lines[1:])


def test_a_multi_run_scenario_writes_one_trace_per_run(tmp_path: Path) -> None:
    assert main(["scenario", "write-no-admit", "-o", str(tmp_path / "q2")]) == 0
    assert sorted(p.name for p in (tmp_path / "q2").iterdir()) == [
        "q2-native_lru.ndjson",
        "q2-write_no_admit.ndjson",
    ]


def test_a_control_exits_0_because_its_trace_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "control-null-block-shortfall"]) == 0
    out = capsys.readouterr().out
    assert "rejected: [capacity_arithmetic]" in out


def test_table_output_shows_the_measured_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "live-scheduler-pressure"]) == 0
    out = capsys.readouterr().out
    assert "capacity_proof.capacity_shortfall_blocks\t18" in out
    assert "40 + 46 = 86 vs 68 (shortfall 18)" in out


@pytest.mark.parametrize("fmt", ["mermaid", "dot", "table"])
def test_lifecycle_prints_the_diagram(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lifecycle", "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert "checkpoint_mismatch" in out and "harmed" in out


def test_lifecycle_for_one_mode_shows_only_its_reachable_phases(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lifecycle", "--mode", "best_effort", "--format", "mermaid"]) == 0
    out = capsys.readouterr().out
    assert "harmed" not in out and "offloaded" not in out and "materialized" in out
    assert main(["lifecycle", "--two-key"]) == 2


def test_fuzz_runs_with_a_budget_and_reports_coverage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--minutes", "0.02"]) == 0
    out = capsys.readouterr().out
    assert "phases reached" in out and "no invariant broke" in out


def test_fuzz_refuses_bad_options() -> None:
    assert main(["fuzz", "--minutes", "0"]) == 2
    assert main(["fuzz", "--policy", "nope"]) == 2
    assert main(["fuzz", "--ray"]) == 2  # a time budget is not reproducible: --ray needs --seeds
    assert main(["fuzz", "--seeds", "2", "--budget", "5"]) == 2
    assert main(["fuzz", "--seeds", "0"]) == 2


def test_fuzz_seeds_report_each_seed_and_their_merged_coverage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--seeds", "2", "--examples", "3", "--jobs", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert [s["seed"] for s in report["seeds"]] == [0, 1]
    assert int(report["examples"]) == sum(s["examples"] for s in report["seeds"]) >= 6
    assert int(report["rule steps"]) == sum(s["rule_steps"] for s in report["seeds"])


def test_lifecycle_by_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lifecycle", "--profile", "preserving-offloadable-two-key", "--format", "table"]) == 0
    assert "checkpoint_mismatch" in capsys.readouterr().out
    assert main(["lifecycle", "--profile", "nope"]) == 2
    assert main(["lifecycle", "--profile", "preserving", "--mode", "best_effort"]) == 2


def test_demo_stage_writes_scenario_traces_and_reports_headlines(tmp_path: Path) -> None:
    from kvclaims.cli.demo import STAGES
    from kvclaims.cli.scenario import demo_stage

    assert ("MicroRuntime scenarios", demo_stage) in STAGES
    headline = demo_stage(tmp_path)
    assert "60+70=130>80, shortfall 50" in headline and "3 controls rejected" in headline
    summary = json.loads((tmp_path / "scenarios" / "summary.json").read_text())
    assert summary["live-scheduler-pressure"]["summary"]["capacity_proof"]["capacity_shortfall_blocks"] == 18
    assert (tmp_path / "scenarios" / "capacity-sweep" / "hard_protected-80.ndjson").is_file()
