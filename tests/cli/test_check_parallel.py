"""`kvclaims check DIR --jobs N`: parallel checking gives the verdicts, order, totals and exit
code of the sequential run, and fails the same way on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvclaims.cli import main
from kvclaims.refinement.testing import TraceBuilder


def kvclaims_check(*argv: str) -> int:
    """`kvclaims check ...` through the command line's own entry (`kvclaims.cli.main`)."""
    return main(["check", *argv])


def materialized(trace: TraceBuilder, claim_id: str) -> TraceBuilder:
    return trace.accept(claim_id).store_prefix(claim_id, 4).materialize(claim_id, 4)


def a_mixed_directory(root: Path) -> dict[str, str]:
    """Traces of every outcome in nested folders; returns file name -> the outcome it must get."""
    expected = {}
    for i in range(6):
        trace = materialized(TraceBuilder(usable_blocks=80), f"claim:{i}")
        trace.admit("r").reuse("r", f"claim:{i}", 4)
        expected[f"ok/accepted-{i}.ndjson"] = "accepted"
        (root / "ok").mkdir(parents=True, exist_ok=True)
        (root / "ok" / f"accepted-{i}.ndjson").write_bytes(trace.finish("r").ndjson())
    (root / "bad").mkdir()
    harm_after_demotion = materialized(TraceBuilder(usable_blocks=80), "C").claim_event("demoted", "C")
    harm_after_demotion.remove_block("C", 0)
    harm_after_demotion.claim_event("harmed", "C", leading_blocks=0, required_blocks=4)
    (root / "bad" / "rejected.ndjson").write_bytes(harm_after_demotion.ndjson())
    (root / "bad" / "truncated.jsonl").write_bytes(b'{"kvclaims_trace": 1}\n{"seq": 1, "event"')
    unknown = materialized(TraceBuilder(usable_blocks=80), "D").add("something_new")
    (root / "bad" / "unknown.ndjson").write_bytes(unknown.ndjson())
    (root / "bad" / "notes.txt").write_text("not a trace suffix: never checked\n")
    expected |= {
        "bad/rejected.ndjson": "rejected",
        "bad/truncated.jsonl": "invalid",
        "bad/unknown.ndjson": "inconclusive",
    }
    return expected


def test_parallel_and_sequential_runs_give_the_same_verdicts_in_file_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = a_mixed_directory(tmp_path)
    runs = {}
    for jobs in ("1", "4"):
        code = kvclaims_check(str(tmp_path), "--jobs", jobs, "--json")
        runs[jobs] = (code, [json.loads(line) for line in capsys.readouterr().out.splitlines()])
    assert runs["1"] == runs["4"]
    code, verdicts = runs["4"]
    assert code == 2  # the worst outcome is an invalid trace
    names = [str(Path(v["path"]).relative_to(tmp_path)) for v in verdicts]
    assert names == sorted(expected)
    assert {name: v["outcome"] for name, v in zip(names, verdicts, strict=True)} == expected
    rejected = verdicts[names.index("bad/rejected.ndjson")]
    assert rejected["rule"] == "lifecycle" and rejected["counterexample"]["minimal_prefix"]


def test_the_summary_table_lists_every_trace_and_the_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_mixed_directory(tmp_path)
    tables = {}
    for jobs in ("1", "3"):
        assert kvclaims_check(str(tmp_path / "ok"), str(tmp_path / "bad"), "--jobs", jobs) == 2
        captured = capsys.readouterr()
        tables[jobs] = captured.out
        assert "9 traces: 6 accepted, 1 inconclusive, 1 rejected, 1 invalid" in captured.err
    assert tables["1"] == tables["3"]
    header, *rows = tables["3"].strip().splitlines()
    assert header.split("\t") == ["trace", "format", "outcome", "rule / class", "events", "reason"]
    assert [row.split("\t")[2] for row in rows] == ["accepted"] * 6 + ["rejected", "invalid", "inconclusive"]


def test_evidence_export_works_from_a_parallel_run(tmp_path: Path) -> None:
    a_mixed_directory(tmp_path)
    out = tmp_path / "evidence.yaml"
    assert kvclaims_check(str(tmp_path / "ok"), "--jobs", "4", "--evidence-out", str(out)) == 0
    assert "evidence:" in out.read_text()
    assert kvclaims_check(str(tmp_path), "--jobs", "4", "--evidence-out", str(tmp_path / "none.yaml")) == 2
    assert not (tmp_path / "none.yaml").exists()


def test_a_bad_registry_is_invalid_input_in_parallel_as_in_sequence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text('{"seq": 0, "ts": 1.0, "events": []}\n')
    for jobs in ("1", "2"):
        assert kvclaims_check(str(tmp_path), "--format", "vllm-kv-events", "--jobs", jobs) == 2
        printed = capsys.readouterr()
        assert "registry" in printed.err and "Traceback" not in printed.err and printed.out == ""


@pytest.mark.parametrize("jobs", ["0", "-2", "many"])
def test_jobs_must_be_a_positive_integer(jobs: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert kvclaims_check(".", "--jobs", jobs) == 2
    assert "--jobs" in capsys.readouterr().err


RUNTIME_CAPTURES = Path(__file__).parents[2] / "descriptors" / "evidence" / "runtime-kv-events"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_capture_without_a_registry_is_inconclusive_while_its_neighbours_are_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    a_mixed_directory(tmp_path)
    for capture in ("sglang-0.5.23.kvevents", "trtllm-serializer.jsonl"):
        (tmp_path / "ok" / capture).write_bytes((RUNTIME_CAPTURES / capture).read_bytes())
    code = kvclaims_check(str(tmp_path / "ok"), "--jobs", jobs, "--json")
    printed = capsys.readouterr()
    assert code == 3 and "Traceback" not in printed.err
    outcomes = {Path(v["path"]).name: v for v in map(json.loads, printed.out.splitlines())}
    assert {name: v["outcome"] for name, v in outcomes.items()} == {
        **{f"accepted-{i}.ndjson": "accepted" for i in range(6)},
        "sglang-0.5.23.kvevents": "inconclusive",
        "trtllm-serializer.jsonl": "inconclusive",
    }
    assert "needs a claim registry (--registry FILE)" in outcomes["trtllm-serializer.jsonl"]["reason"]
