"""`kvclaims vllm`: scenario listing and runs, sweep, fuzz; a clear error without vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvclaims.cli import main
from kvclaims.cli import vllm as vllm_cli
from kvclaims.cli._common import Exit
from kvclaims.cli.app import COMMANDS
from kvclaims.lab.scheduler_scenarios import SCENARIOS
from kvclaims.vllm_binding import plugin


def run_cli(argv: list[str]) -> int:
    """`kvclaims vllm ...` through the command line's own entry (`kvclaims.cli.main`)."""
    return main(argv)


def test_vllm_is_a_kvclaims_command() -> None:
    assert "vllm" in COMMANDS


def test_list_prints_names_one_per_line_without_vllm(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugin, "installed_vllm_version", lambda: None)
    assert run_cli(["vllm", "scenario", "--list", "--lane", "scheduler"]) == Exit.ok
    names = capsys.readouterr().out.splitlines()
    assert names == list(SCENARIOS)
    controls = [n for n in names if n.startswith("control-")]
    assert controls == ["control-unenforced-claim", "control-late-demotion", "control-continuum-silent-unpin"]
    assert {"native-60-70-80", "hard-60-70-80", "live-pressure-40-46", "defer-until-materialized"} <= set(
        names
    )


def test_running_without_vllm_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugin, "installed_vllm_version", lambda: None)
    assert (
        run_cli(["vllm", "scenario", "hard-60-70-80", "-o", str(tmp_path / "t.ndjson")]) == Exit.invalid_input
    )
    err = capsys.readouterr().err
    assert "vLLM is not installed" in err and "make setup-vllm" in err
    assert not (tmp_path / "t.ndjson").exists()


def test_unknown_scenario_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["vllm", "scenario", "no-such-scenario"]) == Exit.invalid_input
    assert "unknown scenario" in capsys.readouterr().err


@pytest.mark.vllm
def test_scenario_writes_an_accepted_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "hard.ndjson"
    assert (
        run_cli(["vllm", "scenario", "hard-60-70-80", "--lane", "scheduler", "-o", str(trace), "--json"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "accepted" and report["trace"] == str(trace)
    assert report["numbers"]["capacity_shortfall_blocks"] == 50
    assert trace.exists()


@pytest.mark.vllm
def test_a_control_scenario_succeeds_when_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "control.ndjson"
    assert run_cli(["vllm", "scenario", "control-unenforced-claim", "-o", str(trace)]) == Exit.ok
    assert "expected rejected" in capsys.readouterr().out


@pytest.mark.vllm
def test_sweep_prints_one_row_per_capacity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["vllm", "sweep", "-o", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["usable_blocks"] for row in report["rows"]] == list(range(80, 151, 10))
    assert set(report["verdicts"].values()) == {"accepted"}


@pytest.mark.vllm
def test_fuzz_command_runs_a_short_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvclaims.lab import scheduler_fuzzing

    scheduler_fuzzing.STATS.__init__()  # type: ignore[misc]
    code = run_cli(
        ["vllm", "fuzz", "--examples", "5", "--steps", "10", "--derandomize", "-o", str(tmp_path), "--json"]
    )
    scheduler_fuzzing.SchedulerFuzz.trace_dir = None
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["failure"] is None
    assert report["examples"] >= 5 and report["rule_steps"] > 0


def test_demo_stage_says_when_it_did_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugin, "installed_vllm_version", lambda: None)
    assert vllm_cli.demo_stage(tmp_path).startswith("not run: vLLM is not installed")
    assert not (tmp_path / "vllm").exists()


@pytest.mark.vllm
def test_demo_stage_runs_every_scenario(tmp_path: Path) -> None:
    headline = vllm_cli.demo_stage(tmp_path)
    assert f"{len(SCENARIOS)} scenarios" in headline and "130 > 80" in headline
    summary = json.loads((tmp_path / "vllm" / "summary.json").read_text())
    assert set(summary) == set(SCENARIOS)


ENGINE_NAMES = [
    "path-a-restore",
    "path-b-restore-failure",
    "path-c-multi-claim",
    "control-wrong-claim-failure",
    "control-unclaimed-failure",
    "control-fallback-recompute",
    "control-offload-without-claim",
    "control-generic-counters",
]


def test_engine_lane_list_without_vllm(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugin, "installed_vllm_version", lambda: None)
    assert run_cli(["vllm", "scenario", "--list", "--lane", "engine"]) == Exit.ok
    names = capsys.readouterr().out.splitlines()
    assert set(ENGINE_NAMES) <= set(names) and len(names) == len(set(names))
    assert {"hard-refusal", "demote-before-loss", "recompute-persistent-fault"} <= set(names)
    assert [n for n in names if n.startswith("control-")] == [
        n for n in ENGINE_NAMES if n.startswith("control-")
    ]


def test_engine_lane_unknown_scenario_and_bad_runs_are_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["vllm", "scenario", "hard-60-70-80", "--lane", "engine"]) == Exit.invalid_input
    assert "unknown engine-lane scenario" in capsys.readouterr().err
    assert run_cli(["vllm", "repeat", "--runs", "0"]) == Exit.invalid_input


def test_descriptor_check_confirms_the_committed_descriptor(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[2] / "descriptors"
    code = run_cli(
        [
            "vllm",
            "descriptor",
            "--from",
            str(root / "evidence" / "kvclaims-vllm"),
            "-o",
            str(root / "kvclaims-vllm.yaml"),
            "--check",
        ]
    )
    assert code == Exit.ok, capsys.readouterr()


@pytest.mark.vllm
def test_engine_scenario_runs_vllm_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "path-b.ndjson"
    code = run_cli(
        ["vllm", "scenario", "path-b-restore-failure", "--lane", "engine", "-o", str(trace), "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == Exit.ok and report["verdict"] == "accepted" and report["as_expected"]
    assert report["numbers"]["reuse_refused_blocking"] == ["claim:A"]
    assert "restoration_failure_outcome" in report["evidenced"]


@pytest.mark.vllm
def test_repeat_runs_fresh_processes_and_aggregates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenarios = "path-b-restore-failure,control-generic-counters"
    code = run_cli(
        ["vllm", "repeat", "--runs", "1", "--out", str(tmp_path), "--scenarios", scenarios, "--json"]
    )
    summary = json.loads(capsys.readouterr().out)
    assert code == Exit.ok, summary
    assert summary["runs"] == 1 and summary["processes_completed"] == 1
    assert summary["gates"]["path-b-restore-failure"]["passes"] == 1
    assert summary["controls"] == {"runs": 1, "passes": 0, "note": summary["controls"]["note"]}
    assert summary["latency_path_b"]["failure_to_outcome_ns"]["samples"] == 1
    assert (tmp_path / "aggregate.md").read_text().startswith("# Engine-lane repetitions")


@pytest.mark.vllm
def test_engine_demo_stage_runs_every_engine_scenario(tmp_path: Path) -> None:
    from kvclaims.lab.engine_scenarios import ENGINE_SCENARIOS

    headline = vllm_cli.engine_demo_stage(tmp_path)
    assert (
        f"{len(ENGINE_SCENARIOS)} scenarios on vllm.LLM" in headline and "refused naming claim:A " in headline
    )
    summary = json.loads((tmp_path / "vllm-engine" / "summary.json").read_text())
    assert set(summary) == set(ENGINE_SCENARIOS)


@pytest.mark.vllm
def test_tiny_model_hybrid_builds_the_qwen3_next_the_hybrid_lane_runs(tmp_path: Path) -> None:
    from kvclaims.lab.tiny_model import TINY_QWEN3_NEXT, is_tiny_model

    target = tmp_path / "hybrid"
    assert run_cli(["vllm", "tiny-model", "--hybrid", str(target)]) == Exit.ok
    assert is_tiny_model(target, hybrid=True) and not is_tiny_model(target)
    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["Qwen3NextForCausalLM"]
    assert config["layer_types"] == TINY_QWEN3_NEXT["layer_types"]
