from __future__ import annotations

from pathlib import Path

from kvclaims.bundled import DESCRIPTORS, TRACES
from kvclaims.lab.micro_scenarios import run_scenario
from kvclaims.microruntime.tracing import write_trace
from kvclaims.report.verdicts import (
    CheckJob,
    anchored_checks,
    check_traces,
    folder_traces,
    judge,
    lane_traces,
)
from kvclaims.spec.descriptor import Descriptor, load_descriptor


def _write(out: Path, scenario: str, as_name: str) -> None:
    run = run_scenario(scenario).runs[0]
    write_trace(out / "scenarios" / f"{as_name}.ndjson", run.header, run.events)


def test_positives_must_be_accepted_and_controls_must_not(tmp_path: Path) -> None:
    _write(tmp_path, "hard-claim-60-70-80", "hard-claim-60-70-80")
    _write(tmp_path, "control-silent-harm", "control-silent-harm")
    # an accepted run filed as a control: the check must flag it
    _write(tmp_path, "native-60-70-80", "control-looks-fine")
    checks = {c.scenario: c for c in check_traces(lane_traces(tmp_path))}
    assert checks["hard-claim-60-70-80"].outcome == "accepted" and checks["hard-claim-60-70-80"].as_expected
    silent = checks["control-silent-harm"]
    assert silent.outcome == "rejected" and silent.rule == "no_silent_harm" and silent.as_expected
    assert "no_silent_harm" in silent.reason
    assert checks["control-looks-fine"].outcome == "accepted" and not checks["control-looks-fine"].as_expected


def test_traces_older_than_the_run_are_not_judged(tmp_path: Path) -> None:
    _write(tmp_path, "hard-claim-60-70-80", "old")
    newer_than_everything = (tmp_path / "scenarios" / "old.ndjson").stat().st_mtime_ns + 1
    assert lane_traces(tmp_path, since_ns=newer_than_everything) == []


def test_engine_controls_are_judged_by_their_named_expectation() -> None:
    # control-fallback-recompute names: rejected by rule offload_order
    assert judge("vllm-engine", "control-fallback-recompute", "rejected", "offload_order")[1]
    assert not judge("vllm-engine", "control-fallback-recompute", "rejected", "identity")[1]
    assert not judge("vllm-engine", "control-fallback-recompute", "accepted", None)[1]
    # an unknown engine scenario falls back to the plain rule
    assert not judge("vllm-engine", "control-unheard-of", "accepted", None)[1]


def test_a_folder_of_user_traces_is_judged_by_name_and_shown_relative_to_its_parent(tmp_path: Path) -> None:
    _write(tmp_path, "hard-claim-60-70-80", "mine")
    _write(tmp_path, "native-60-70-80", "control-should-fail")
    root = tmp_path / "scenarios"
    checks = check_traces(folder_traces("your traces", root, sorted(root.glob("*.ndjson"))))
    assert [(c.trace, c.lane, c.as_expected) for c in checks] == [
        ("scenarios/control-should-fail.ndjson", "your traces", False),
        ("scenarios/mine.ndjson", "your traces", True),
    ]


# --- descriptor anchors say how the traces they cite are re-checked -----------------------------


def _shipped_kv_event_descriptors() -> list[Descriptor]:
    return [
        load_descriptor(DESCRIPTORS / name)
        for name in ("sglang_0_5_23_kv_events.yaml", "tensorrt_llm_kv_events_ed53795.yaml")
    ]


def test_the_bundled_captures_are_accepted_when_checked_as_their_anchors_say() -> None:
    root = TRACES / "runtime-kv-events"
    files = sorted(p for p in root.iterdir() if p.suffix in (".kvevents", ".jsonl"))
    anchored = anchored_checks(_shipped_kv_event_descriptors())
    checks = check_traces(folder_traces("bundled corpus", TRACES, files, anchored))
    assert [(c.trace, c.outcome, c.as_expected) for c in checks] == [
        ("evidence/runtime-kv-events/sglang-0.5.23.kvevents", "accepted", True),
        ("evidence/runtime-kv-events/trtllm-serializer.jsonl", "accepted", True),
    ]
    # the same files without their anchors: no registry, so undecided (and flagged), never accepted
    for check in check_traces(folder_traces("bundled corpus", TRACES, files)):
        assert check.outcome == "inconclusive" and not check.as_expected
        assert "needs a claim registry (--registry FILE)" in check.reason


def test_the_anchors_give_format_and_registry_and_a_trace_cited_two_ways_is_checked_both_ways(
    tmp_path: Path,
) -> None:
    (sglang, trtllm) = _shipped_kv_event_descriptors()
    capture = (TRACES / "runtime-kv-events" / "sglang-0.5.23.kvevents").resolve()
    registry = (TRACES / "runtime-kv-events" / "claim-sys.registry.yaml").resolve()
    assert anchored_checks([sglang])[capture] == [CheckJob("sglang-kv-events", registry)]
    # a second descriptor cites the same capture with no format: both readings are checked
    text = (DESCRIPTORS / "sglang_0_5_23_kv_events.yaml").read_text(encoding="utf-8")
    (tmp_path / "evidence").symlink_to(TRACES.resolve())
    detected = text.replace("      format: sglang-kv-events\n", "")
    (tmp_path / "auto.yaml").write_text(detected, encoding="utf-8")
    jobs = anchored_checks([sglang, load_descriptor(tmp_path / "auto.yaml"), trtllm])[capture]
    assert jobs == [CheckJob("sglang-kv-events", registry), CheckJob("auto", registry)]
    cited = [TRACES / "runtime-kv-events" / capture.name]
    found = folder_traces("bundled corpus", TRACES, cited, {capture: jobs})
    assert [(f.format, f.registry) for f in found] == [("sglang-kv-events", registry), ("auto", registry)]
