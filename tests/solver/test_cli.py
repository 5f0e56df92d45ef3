"""The `prove` and `adversary` commands: exit codes, outputs, bad names."""

import json
from pathlib import Path

from kvclaims.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_prove_lists_its_obligations(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["prove", "--list"]) == 0
    assert "lifecycle.no_harm_after_demotion_or_expiry" in capsys.readouterr().out


def test_prove_a_prefix_writes_only_those_results(tmp_path: Path) -> None:
    assert main(["prove", "capacity.", "--out", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == [
        "capacity.anchor_live_trace_numbers_rejected.json",
        "capacity.refusal_justified_by_reserved_blocks.json",
        "capacity.refusal_only_when_over_capacity.json",
    ]
    assert json.loads((tmp_path / written[0]).read_text())["verdict"] == "proved"


def test_prove_check_against_the_committed_proofs_passes_for_a_subset(tmp_path: Path) -> None:
    assert main(["prove", "requests.", "--check", "--out", str(ROOT / "proofs")]) == 0


def test_prove_check_reports_drift(tmp_path: Path) -> None:
    assert main(["prove", "capacity.", "--check", "--out", str(tmp_path)]) == 1


def test_prove_rejects_an_unknown_obligation(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["prove", "lowering.no_such_thing"]) == 2
    assert "unknown obligation" in capsys.readouterr().err


def test_adversary_with_no_budget_is_incomplete_and_says_so(tmp_path: Path) -> None:
    code = main(
        [
            "adversary",
            "--out",
            str(tmp_path),
            "--budget",
            "0",
            "--no-traces",
            "--descriptors",
            str(ROOT / "descriptors"),
        ]
    )
    assert code == 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["complete"] is False and summary["distinct_descriptors"] >= 1


def test_prove_gives_the_same_results_on_one_worker_and_on_two(tmp_path: Path) -> None:
    for jobs in ("1", "2"):
        assert main(["prove", "requests.", "capacity.", "--jobs", jobs, "--out", str(tmp_path / jobs)]) == 0
    one, two = (sorted((tmp_path / j).iterdir()) for j in ("1", "2"))
    assert [p.name for p in one] == [p.name for p in two] and len(one) == 6
    assert all(a.read_text() == b.read_text() for a, b in zip(one, two, strict=True))
