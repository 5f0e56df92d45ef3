"""Two-key claims on a hybrid model (seed 002), end to end on `vllm.LLM`: the tiny Qwen3-Next
(gated delta net + attention) in vLLM's hybrid alignment mode with the checkpoint connector.

One engine serves the module (`kvclaims.lab.hybrid_lane`). The expected outputs are the cold
run's, produced by vLLM itself on a prompt with another cache salt (nothing cached); the
verdicts come from refinement.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvclaims.refinement import Outcome, check_trace
from kvclaims.spec.vocabulary import ConformanceRule

pytestmark = pytest.mark.vllm

REPEATS = 3
STATE_TOKENS = 2 * 160  # two blocks: vLLM raises the block size to 160 for this model


@pytest.fixture(scope="module")
def lane() -> Any:
    from conftest import require_vllm

    require_vllm()
    from kvclaims.lab.hybrid_lane import HybridLane

    engine = HybridLane()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def resume(lane: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from kvclaims.lab.hybrid_lane import run_resume

    return run_resume(lane, tmp_path_factory.mktemp("hybrid") / "resume.ndjson", repeats=REPEATS)


def events(path: Path, name: str) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return [e for e in map(json.loads, lines) if e["event"] == name]


def test_a_resumed_request_gives_the_cold_runs_first_step_logits_and_tokens(resume: Any) -> None:
    """Seed 002's acceptance criteria 1-2: repeated exact replay at a fixed boundary."""
    assert len(resume.resumes) == REPEATS
    for output in resume.resumes:
        assert output.cached_tokens == STATE_TOKENS, "the resume restored the claim's state"
        assert output.token_ids == resume.cold.token_ids
        assert len(output.first_logits) == 512
    assert resume.cold.cached_tokens == 0
    assert resume.max_abs_diff == 0.0


def test_materialization_records_the_checkpoint_with_its_abi_metadata(resume: Any) -> None:
    (materialized, *_) = events(resume.trace_path, "resident_claim_materialized")
    checkpoint = materialized["checkpoint"]
    assert checkpoint["boundary"] == 2
    kinds = [(t["layer"], t["kind"], t["logical_dtype"], t["layout"]) for t in checkpoint["tensors"]]
    assert kinds == [
        ("model.layers.0.linear_attn", "conv_state", "bfloat16", "row_major"),
        ("model.layers.0.linear_attn", "ssm_state", "float32", "row_major"),
        ("model.layers.2.linear_attn", "conv_state", "bfloat16", "row_major"),
        ("model.layers.2.linear_attn", "ssm_state", "float32", "row_major"),
    ]
    assert checkpoint["tensors"][1]["shape"] == [4, 64, 64]
    reused = [e for e in events(resume.trace_path, "request_reused") if e["claim_id"] == "claim:resume"]
    assert len(reused) == REPEATS
    assert all(e["predicate_satisfied"] and e["checkpoint"] == checkpoint for e in reused)


def claim_story(path: Path, claim_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The claim events and reuses naming `claim_id` from its materialization on, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    named = [
        e
        for e in map(json.loads, lines)
        if e.get("claim_id") == claim_id and e["event"].startswith(("resident_claim_", "request_reused"))
    ]
    start = next(i for i, e in enumerate(named) if e["event"] == "resident_claim_materialized")
    return [(e["event"], e) for e in named[start:]]


def test_each_resume_is_an_in_place_restore_before_the_reuse(resume: Any) -> None:
    """Seed 002: a hybrid resume is a restore of the non-KV state meeting the KV key at B: each
    reuse is preceded by its restore_required, the KV key's B blocks and the matching
    checkpoint, in that order."""
    story = claim_story(resume.trace_path, "claim:resume")
    recorded = story[0][1]["checkpoint"]
    resumes = [name for name, _ in story[1:] if name != "resident_claim_released"]
    one = [
        "resident_claim_restore_required",
        "resident_claim_restored",
        "resident_claim_checkpoint_restored",
        "request_reused",
    ]
    assert resumes == one * REPEATS
    for name, event in story:
        if name == "resident_claim_restored":
            assert event["restored_blocks"] == recorded["boundary"]
        if name == "resident_claim_checkpoint_restored":
            assert (event["boundary"], event["value_hash"]) == (recorded["boundary"], recorded["value_hash"])


def test_every_seed_002_fault_is_caught_before_the_request_proceeds(resume: Any) -> None:
    """A restore that keeps the stored payload but realizes another value, the same bytes read
    with another layout, and an unknown layout: each is a restoration failure with outcome
    demotion (issue 15: never a silent resume), then an unsatisfied reuse and an abort, with
    no token served."""
    from kvclaims.lab.hybrid_lane import FAULTS

    assert set(resume.caught) == set(FAULTS)
    for kind, output in resume.caught.items():
        assert output.finish_reason == "abort", kind
        assert output.stop_reason == f"kvclaims:refused:checkpoint_mismatch:claim:{kind}"
        assert output.token_ids == ()
    recorded = {
        e["claim_id"]: e["checkpoint"] for e in events(resume.trace_path, "resident_claim_materialized")
    }
    reused = {e["claim_id"]: e for e in events(resume.trace_path, "request_reused")}
    failed = {e["claim_id"]: e for e in events(resume.trace_path, "resident_claim_restoration_failed")}
    assert {e["outcome"] for e in failed.values()} == {"demotion"}
    assert not events(resume.trace_path, "resident_claim_demoted"), "the failure is the demotion"
    demoted = {claim_id: e["reason"] for claim_id, e in failed.items()}
    transposed = "claim:restore_transposed"
    assert "the stored payload is unchanged" in demoted[transposed]
    alias = reused["claim:layout_alias"]["checkpoint"]
    assert alias["payload_hash"] == recorded["claim:layout_alias"]["payload_hash"], "same bytes"
    assert alias["value_hash"] != recorded["claim:layout_alias"]["value_hash"], "another value"
    assert [t["layout"] for t in alias["tensors"]][1] == "column_major"
    assert "unknown layout" in demoted["claim:unknown_layout"]
    assert reused["claim:unknown_layout"].get("checkpoint") is None
    for kind in ("restore_transposed", "layout_alias", "unknown_layout"):
        assert reused[f"claim:{kind}"]["predicate_satisfied"] is False
        story = [name for name, _ in claim_story(resume.trace_path, f"claim:{kind}")]
        restore = ["resident_claim_restore_required", "resident_claim_restored"]
        if kind != "unknown_layout":  # an unknown layout has no value to report
            restore.append("resident_claim_checkpoint_restored")
        expected = [*restore, "resident_claim_restoration_failed", "request_reused"]
        assert story[1 : 1 + len(expected)] == expected, kind
    faults = [e["kind"] for e in events(resume.trace_path, "fault_injected")]
    assert faults == [f"checkpoint_{kind}" for kind in FAULTS]


def test_refinement_accepts_the_resume_trace(resume: Any) -> None:
    verdict = check_trace(resume.trace_path)
    assert verdict.outcome is Outcome.accepted, verdict.reason


def test_a_silent_resume_serves_a_different_output_and_refinement_rejects_it(
    lane: Any, tmp_path: Path
) -> None:
    """The negative control: the corrupted state is served as a satisfied reuse. Its first-step
    logits differ from the cold run's (the fault is real), and refinement rejects
    the trace under the two-key rule."""
    from kvclaims.lab.hybrid_lane import run_silent_control

    control = run_silent_control(lane, tmp_path / "silent.ndjson")
    assert control.served.cached_tokens == STATE_TOKENS
    assert control.served.max_abs_diff(control.cold) > 0.0
    verdict = check_trace(control.trace_path)
    assert verdict.outcome is Outcome.rejected and verdict.rule is ConformanceRule.hybrid_two_key, (
        verdict.reason
    )


def test_a_claim_over_an_already_cached_prefix_records_the_cached_state(lane: Any, tmp_path: Path) -> None:
    """The submitting request's hit lands on the boundary: no state is written this time, the
    checkpoint is taken of the cached one, and a resume from it is satisfied."""
    from kvclaims.lab.hybrid_lane import attach, prompt, submit

    trace = tmp_path / "cached-prefix.ndjson"
    lane.begin(trace)
    tokens = prompt(8)
    lane.generate(tokens)
    submitted = lane.generate(tokens, claim=submit("claim:cached"))
    resumed = lane.generate(tokens, claim=attach("claim:cached"))
    lane.end()
    assert submitted.cached_tokens == resumed.cached_tokens == STATE_TOKENS
    assert resumed.token_ids == submitted.token_ids
    (materialized,) = events(trace, "resident_claim_materialized")
    (reused,) = events(trace, "request_reused")
    assert reused["predicate_satisfied"] and reused["checkpoint"] == materialized["checkpoint"]
    verdict = check_trace(trace)
    assert verdict.outcome is Outcome.accepted, verdict.reason


def test_a_one_key_claim_is_rejected_on_a_hybrid_model(lane: Any, tmp_path: Path) -> None:
    from kvclaims.lab.hybrid_lane import prompt

    trace = tmp_path / "one-key.ndjson"
    lane.begin(trace)
    claim = {
        "kvclaims_claim_id": "one-key",
        "kvclaims_mode": "hard_protected",
        "kvclaims_footprint_blocks": 2,
    }
    output = lane.generate(prompt(7), claim=claim)
    lane.end()
    assert output.stop_reason is not None and output.stop_reason.startswith("kvclaims:claim_rejected:one-key")
    (rejected,) = events(trace, "resident_claim_rejected")
    assert "kvclaims_checkpoint_boundary_blocks" in rejected["reason"]


def _scheduler(specs: list[Any], *, mode: str = "align", connector: object = None) -> Any:
    groups = [SimpleNamespace(kv_cache_spec=spec) for spec in specs]
    return SimpleNamespace(
        kv_cache_config=SimpleNamespace(kv_cache_groups=groups),
        cache_config=SimpleNamespace(mamba_cache_mode=mode),
        block_size=160,
        connector=connector,
    )


def test_hybrid_layouts_without_alignment_mode_or_the_connector_are_refused(lane: Any) -> None:
    """The real engine's groups, with one condition broken at a time."""
    from kvclaims.vllm_binding.hybrid import HybridLayout, hybrid_layout

    real = lane.scheduler
    specs = [group.kv_cache_spec for group in real.kv_cache_config.kv_cache_groups]
    assert hybrid_layout(real) == HybridLayout(state_group=0, kv_group=1)
    assert "checkpoint connector" in str(hybrid_layout(_scheduler(specs)))
    assert "'none'" in str(hybrid_layout(_scheduler(specs, mode="none", connector=real.connector)))
    assert "KV cache groups" in str(hybrid_layout(_scheduler(specs[:1] * 2, connector=real.connector)))
