"""`kvclaims check`: exit codes, JSON, the multi-trace summary, counterexample rendering and
evidence export closing the loop trace -> evidence -> descriptor -> label."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from support.runs import offloadable_run, rejected_run

from kvclaims.cli import main
from kvclaims.cli.app import COMMANDS
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.spec.descriptor import load_descriptor
from kvclaims.spec.evidence import LoweringRow
from kvclaims.spec.lowering import lower_row
from kvclaims.spec.vocabulary import AdapterDepth, Label, Obligation, ProtectionMode


def kvclaims_check(*argv: str) -> int:
    """`kvclaims check ...` through the command line's own entry (`kvclaims.cli.main`)."""
    return main(["check", *argv])


def write(path: Path, trace: TraceBuilder) -> Path:
    path.write_bytes(trace.ndjson())
    return path


def test_check_is_a_registered_command() -> None:
    assert "check" in COMMANDS


def test_exit_codes_follow_the_worst_outcome(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path / "good.ndjson", offloadable_run())
    bad = write(tmp_path / "bad.ndjson", rejected_run())
    unknown = tmp_path / "unknown.ndjson"
    unknown.write_bytes(offloadable_run().add("something_new").ndjson())
    broken = tmp_path / "broken.ndjson"
    broken.write_bytes(b'{"kvclaims_trace": 1}\n{"seq": 1, "event"')
    assert kvclaims_check(str(good)) == 0
    assert kvclaims_check(str(bad)) == 1
    assert kvclaims_check(str(broken)) == 2
    assert kvclaims_check(str(unknown)) == 3
    assert kvclaims_check(str(good), str(unknown)) == 3
    assert kvclaims_check(str(good), str(unknown), str(bad)) == 1
    assert kvclaims_check(str(good), str(bad), str(broken)) == 2
    capsys.readouterr()


def test_a_rejection_prints_its_counterexample_with_surrounding_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert kvclaims_check(str(write(tmp_path / "bad.ndjson", rejected_run()))) == 1
    out = capsys.readouterr().out
    assert "rejected" in out and "rule: lifecycle" in out
    assert "surrounding events:" in out and "the lines that show the violation" in out
    assert "resident_claim_harmed" in out


def test_json_output_and_the_summary_table_for_many_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    write(folder / "a.jsonl", offloadable_run())
    write(folder / "b.jsonl", rejected_run())
    kvclaims_check(str(folder), "--json")
    verdicts = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [v["outcome"] for v in verdicts] == ["accepted", "rejected"]
    assert verdicts[1]["counterexample"]["rule"] == "lifecycle"
    kvclaims_check(str(folder))
    header, *rows = capsys.readouterr().out.strip().splitlines()
    assert header.split("\t")[:3] == ["trace", "format", "outcome"] and len(rows) == 2


def test_evidence_export_feeds_a_descriptor_that_lowers_offloadable(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    trace = write(tmp_path / "runs" / "offload.ndjson", offloadable_run())
    out = tmp_path / "descriptors" / "evidence.yaml"
    assert kvclaims_check(str(trace), "--evidence-out", str(out)) == 0
    items = yaml.safe_load(out.read_text())["evidence"]
    anchors = [item["anchor"] for item in items]
    assert all(a["kind"] == "trace" and a["path"] == "../runs/offload.ndjson" for a in anchors)
    assert all(a["sha256"] and a["ordering"] and a["claim_scope"] and a["claim_ids"] for a in anchors)
    evidenced = {Obligation(item["obligation"]) for item in items}
    assert {Obligation.offload_restorability, Obligation.restoration_failure_outcome} <= evidenced
    assert Obligation.victim_exclusion_before_violation not in evidenced
    descriptor = out.parent / "runtime.yaml"
    descriptor.write_text(
        yaml.safe_dump(
            {
                "descriptor": 1,
                "runtime": "example",
                "surface": "example 1.0",
                "version": "1.0",
                "native": items,
            }
        )
    )
    loaded = load_descriptor(descriptor)
    assert all(anchor.counts for anchor in loaded.anchors()), [a.problems() for a in loaded.anchors()]
    verdict = lower_row(loaded, LoweringRow(mode=ProtectionMode.offloadable, depth=AdapterDepth.none))
    assert verdict.label is Label.native_sound, verdict.reasons


def test_evidence_of_a_modified_trace_no_longer_counts(tmp_path: Path) -> None:
    trace = write(tmp_path / "offload.ndjson", offloadable_run())
    out = tmp_path / "evidence.yaml"
    kvclaims_check(str(trace), "--evidence-out", str(out))
    items = yaml.safe_load(out.read_text())["evidence"]
    trace.write_bytes(trace.read_bytes() + b"\n")
    descriptor = tmp_path / "runtime.yaml"
    descriptor.write_text(
        yaml.safe_dump({"descriptor": 1, "runtime": "x", "surface": "x", "version": "1", "native": items})
    )
    assert not any(anchor.counts for anchor in load_descriptor(descriptor).anchors())


def test_no_evidence_is_written_unless_every_trace_is_accepted(tmp_path: Path) -> None:
    good = write(tmp_path / "good.ndjson", offloadable_run())
    bad = write(tmp_path / "bad.ndjson", rejected_run())
    out = tmp_path / "evidence.json"
    assert kvclaims_check(str(good), str(bad), "--evidence-out", str(out)) == 1
    assert not out.exists()


def test_a_kv_event_capture_found_without_a_registry_is_inconclusive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "capture.jsonl"
    capture.write_text('{"seq": 0, "ts": 1.0, "events": []}\n')
    assert kvclaims_check(str(capture)) == 3
    assert "needs a claim registry (--registry FILE)" in capsys.readouterr().out


def test_a_kv_event_format_named_without_a_registry_is_invalid_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "capture.jsonl"
    capture.write_text('{"seq": 0, "ts": 1.0, "events": []}\n')
    assert kvclaims_check(str(capture), "--format", "vllm-kv-events") == 2
    printed = capsys.readouterr()
    assert "--registry" in printed.err and printed.out == ""


def test_no_trace_files_is_invalid_input(tmp_path: Path) -> None:
    assert kvclaims_check(str(tmp_path)) == 2


def test_an_unknown_event_before_a_rejection_exits_inconclusive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 3 naming the unknown line, not 1 blaming the later one; the twin without the
    unknown event exits 1."""
    typo = offloadable_run().add("resident_claim_demotd", claim_id="C")
    typo.claim_event("harmed", "C", leading_blocks=0, required_blocks=4)
    assert kvclaims_check(str(write(tmp_path / "typo.ndjson", typo))) == 3
    assert "did you mean 'resident_claim_demoted'" in capsys.readouterr().out
    assert kvclaims_check(str(write(tmp_path / "twin.ndjson", rejected_run()))) == 1


def test_strict_refuses_context_fields_that_are_otherwise_kept(tmp_path: Path) -> None:
    trace = offloadable_run()
    trace.events[-1]["mono_ns"] = 3  # a runtime's own context field
    path = write(tmp_path / "context.ndjson", trace)
    assert kvclaims_check(str(path)) == 0
    assert kvclaims_check(str(path), "--strict") == 2


def test_a_directory_includes_gzip_compressed_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gzip

    (tmp_path / "a.ndjson.gz").write_bytes(gzip.compress(offloadable_run().ndjson()))
    (tmp_path / "notes.txt.gz").write_bytes(gzip.compress(b"not a trace"))
    kvclaims_check(str(tmp_path), "--json")
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["outcome"] == "accepted" and verdict["path"].endswith("a.ndjson.gz")


def test_evidence_paths_follow_the_descriptor_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written from another working directory, with relative arguments, the anchors are
    relative to the evidence file's folder: the descriptor next to it still counts them after
    the whole tree moves; moved alone, each item names the path it tried."""
    (tmp_path / "tree" / "runs").mkdir(parents=True)
    write(tmp_path / "tree" / "runs" / "offload.ndjson", offloadable_run())
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    out = Path("../tree/descriptors/evidence.yaml")
    assert kvclaims_check("../tree/runs/offload.ndjson", "--evidence-out", str(out)) == 0
    items = yaml.safe_load(out.read_text())["evidence"]
    document = {"descriptor": 1, "runtime": "x", "surface": "x", "version": "1", "native": items}
    (tmp_path / "tree" / "descriptors" / "runtime.yaml").write_text(yaml.safe_dump(document))
    moved = tmp_path / "moved"
    (tmp_path / "tree").rename(moved)
    assert all(a.counts for a in load_descriptor(moved / "descriptors" / "runtime.yaml").anchors())
    alone = tmp_path / "alone.yaml"
    (moved / "descriptors" / "runtime.yaml").rename(alone)
    problems = {p for a in load_descriptor(alone).anchors() for p in a.problems()}
    assert problems == {f"anchored trace file does not exist: {tmp_path.parent / 'runs' / 'offload.ndjson'}"}


def test_a_kv_event_captures_evidence_says_how_to_recheck_it(tmp_path: Path) -> None:
    """Evidence exported from a joined capture names its format and claim registry (relative,
    with its digest), so a descriptor citing it is re-checked as it was checked."""
    from kvclaims.refinement import Outcome, check_trace
    from kvclaims.report.verdicts import CheckJob, anchored_checks

    shipped = Path(__file__).parents[2] / "descriptors" / "evidence" / "runtime-kv-events"
    (tmp_path / "runs").mkdir()
    for name in ("trtllm-serializer.jsonl", "claim-sys.registry.yaml"):
        (tmp_path / "runs" / name).write_bytes((shipped / name).read_bytes())
    capture = tmp_path / "runs" / "trtllm-serializer.jsonl"
    registry = tmp_path / "runs" / "claim-sys.registry.yaml"
    out = tmp_path / "descriptors" / "evidence.yaml"
    assert kvclaims_check(str(capture), "--registry", str(registry), "--evidence-out", str(out)) == 0
    items = yaml.safe_load(out.read_text())["evidence"]
    assert {(i["anchor"]["format"], i["anchor"]["registry"]) for i in items} == {
        ("trtllm-kv-events", "../runs/claim-sys.registry.yaml")
    }
    digest = hashlib.sha256(registry.read_bytes()).hexdigest()
    assert {i["anchor"]["registry_sha256"] for i in items} == {digest}
    document = {"descriptor": 1, "runtime": "x", "surface": "x", "version": "1", "native": items}
    (tmp_path / "descriptors" / "runtime.yaml").write_text(yaml.safe_dump(document))
    descriptor = load_descriptor(tmp_path / "descriptors" / "runtime.yaml")
    assert all(a.counts for a in descriptor.anchors())
    (job,) = anchored_checks([descriptor])[capture.resolve()]
    assert job == CheckJob("trtllm-kv-events", registry.resolve())
    assert check_trace(capture, format=job.format, registry=job.registry).outcome is Outcome.accepted
