"""`kvclaims lower`, `matrix` and `report` re-check every trace a descriptor cites: the digest,
then the refinement verdict (accepted and closed only), then whether the trace's evidence
export witnesses the obligation for the claims the anchor names, one of the mode lowered, with
an event range that spans their events. Each hostile descriptor below has a twin that differs
only in the defect and counts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import runs

from kvclaims.cli import _recheck, main
from kvclaims.cli._recheck import cache_directory, load_rechecked
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.spec.evidence import LoweringRow
from kvclaims.spec.lowering import lower_row
from kvclaims.spec.verdict import ObligationFinding, Verdict
from kvclaims.spec.vocabulary import AdapterDepth, Label, Obligation, ProtectionMode

SHIPPED = Path(__file__).resolve().parents[2] / "descriptors"
KV_EVENTS = SHIPPED / "evidence" / "runtime-kv-events"


def offloadable_run() -> TraceBuilder:
    return runs.offloadable_run(hard_claim=True)


def rejected_run() -> TraceBuilder:
    return runs.rejected_run(hard_claim=True)


def exported(tmp_path: Path, trace: TraceBuilder, name: str = "run.ndjson") -> list[dict[str, Any]]:
    """The evidence `kvclaims check --evidence-out` writes for `trace` (written under tmp_path)."""
    path = tmp_path / name
    path.write_bytes(trace.ndjson())
    out = tmp_path / f"{name}.evidence.yaml"
    assert main(["check", str(path), "--evidence-out", str(out)]) == 0
    return yaml.safe_load(out.read_text())["evidence"]


def descriptor(tmp_path: Path, items: list[dict[str, Any]], name: str = "runtime.yaml") -> Path:
    document = {"descriptor": 1, "runtime": "x", "surface": "x 1", "version": "1", "native": items}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(json.loads(json.dumps(document))), encoding="utf-8")  # no aliases
    return path


def lowered(path: Path, mode: str) -> Verdict:
    ((_, loaded),) = load_rechecked([path])
    return lower_row(loaded, LoweringRow(mode=ProtectionMode(mode), depth=AdapterDepth.none))


def finding(verdict: Verdict, obligation: Obligation) -> ObligationFinding:
    return next(f for f in verdict.findings if f.obligation is obligation)


def reasons(verdict: Verdict, obligation: Obligation) -> str:
    return " | ".join(d.reason for d in finding(verdict, obligation).discounted)


def item(items: list[dict[str, Any]], obligation: Obligation) -> dict[str, Any]:
    return next(i for i in items if i["obligation"] == obligation.value)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_export_of_an_accepted_closed_trace_lowers_offloadable(tmp_path: Path) -> None:
    verdict = lowered(descriptor(tmp_path, exported(tmp_path, offloadable_run())), "offloadable")
    assert verdict.label is Label.native_sound, verdict.reasons


def test_each_exported_range_spans_every_event_of_every_claim_it_lists(tmp_path: Path) -> None:
    """Read independently of the checker: every line of the trace that names a listed claim,
    its outcome included, is inside the item's range (the model records the first claim's
    lines only; claims D and H are accepted later than C)."""
    trace = offloadable_run()
    items = exported(tmp_path, trace)
    lines = trace.ndjson().splitlines()
    named: dict[str, list[int]] = {}
    for number, line in enumerate(lines, start=1):
        event = json.loads(line)
        for claim in [event.get("claim_id"), *event.get("blocking_claim_ids", [])]:
            if claim:
                named.setdefault(claim, []).append(number)
    identity = item(items, Obligation.claim_identity)["anchor"]
    assert identity["claim_ids"] == ["C", "D", "H"]
    for exported_item in items:
        first, last = exported_item["anchor"]["event_range"]
        for claim in exported_item["anchor"]["claim_ids"]:
            assert first <= min(named[claim]) and max(named[claim]) <= last, (exported_item, claim)
    harm = item(items, Obligation.claim_harm_attribution)["anchor"]
    assert harm["claim_ids"] == ["D"] and harm["event_range"][1] == max(named["D"])


def _cite(tmp_path: Path, items: list[dict[str, Any]], trace: Path) -> list[dict[str, Any]]:
    """The same items citing `trace` (next to the descriptor) with its true digest."""
    return [{**i, "anchor": {**i["anchor"], "path": trace.name, "sha256": sha256(trace)}} for i in items]


def test_a_rejected_trace_with_the_right_digest_evidences_nothing(tmp_path: Path) -> None:
    items = exported(tmp_path, offloadable_run())
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(rejected_run().ndjson())
    verdict = lowered(descriptor(tmp_path, _cite(tmp_path, items, bad)), "offloadable")
    assert verdict.missing == [o for o in Obligation if o in {f.obligation for f in verdict.findings}]
    assert "the cited trace, re-checked, is rejected" in reasons(verdict, Obligation.claim_identity)
    assert "evidences nothing" in reasons(verdict, Obligation.claim_identity)
    good = tmp_path / "good.ndjson"
    good.write_bytes(offloadable_run().ndjson())
    assert lowered(
        descriptor(tmp_path, _cite(tmp_path, items, good), "twin.yaml"), "offloadable"
    ).label.is_sound


def test_an_open_trace_without_trace_closed_evidences_nothing(tmp_path: Path) -> None:
    items = exported(tmp_path, offloadable_run())
    cut = tmp_path / "open.ndjson"
    cut.write_bytes(offloadable_run().ndjson(closed=False))
    verdict = lowered(descriptor(tmp_path, _cite(tmp_path, items, cut)), "offloadable")
    assert not verdict.label.is_sound
    why = reasons(verdict, Obligation.offload_restorability)
    assert "re-checked, is inconclusive" in why and "trace_closed" in why


def test_a_range_that_omits_the_outcome_event_does_not_count(tmp_path: Path) -> None:
    items = exported(tmp_path, offloadable_run())
    failure = item(items, Obligation.restoration_failure_outcome)["anchor"]
    first, last = failure["event_range"]
    failure["event_range"] = [first, last - 1]
    verdict = lowered(descriptor(tmp_path, items), "offloadable")
    assert not finding(verdict, Obligation.restoration_failure_outcome).supplied
    assert f"event_range [{first}, {last - 1}] leaves out events of C" in reasons(
        verdict, Obligation.restoration_failure_outcome
    )
    failure["event_range"] = [first, last]
    assert lowered(descriptor(tmp_path, items, "twin.yaml"), "offloadable").label.is_sound


def test_an_absent_range_is_the_whole_trace(tmp_path: Path) -> None:
    items = exported(tmp_path, offloadable_run())
    for i in items:
        i["anchor"].pop("event_range")
    assert lowered(descriptor(tmp_path, items), "offloadable").label.is_sound


def test_evidence_for_a_claim_of_another_mode_does_not_count(tmp_path: Path) -> None:
    items = exported(tmp_path, offloadable_run())
    identity = item(items, Obligation.claim_identity)["anchor"]
    identity["claim_ids"] = ["H"]  # the hard_protected claim: witnessed, but not offloadable
    verdict = lowered(descriptor(tmp_path, items), "offloadable")
    assert not finding(verdict, Obligation.claim_identity).supplied
    assert "witnesses claim_identity for no offloadable claim" in reasons(verdict, Obligation.claim_identity)
    identity["claim_ids"] = ["C", "H"]
    assert finding(
        lowered(descriptor(tmp_path, items, "twin.yaml"), "offloadable"), Obligation.claim_identity
    ).supplied


def test_a_claim_the_trace_does_not_witness_or_no_claim_does_not_count(tmp_path: Path) -> None:
    items = exported(tmp_path, offloadable_run())
    harm = item(items, Obligation.claim_harm_attribution)["anchor"]
    harm["claim_ids"] = ["D", "C"]  # C was never harmed
    verdict = lowered(descriptor(tmp_path, items), "offloadable")
    assert "does not witness claim_harm_attribution for C" in reasons(
        verdict, Obligation.claim_harm_attribution
    )
    harm["claim_ids"] = []
    verdict = lowered(descriptor(tmp_path, items, "none.yaml"), "offloadable")
    assert "names no claim" in reasons(verdict, Obligation.claim_harm_attribution)


def test_an_obligation_the_export_does_not_witness_does_not_count(tmp_path: Path) -> None:
    items = exported(tmp_path, offloadable_run())
    forged = {
        **item(items, Obligation.claim_identity),
        "obligation": Obligation.victim_exclusion_before_violation.value,
    }
    verdict = lowered(descriptor(tmp_path, [*items, forged]), "hard_protected")
    assert "does not witness victim_exclusion_before_violation" in reasons(
        verdict, Obligation.victim_exclusion_before_violation
    )


def _kv_event_item(tmp_path: Path, obligation: Obligation) -> dict[str, Any]:
    for name in ("sglang-0.5.23.kvevents", "claim-sys.registry.yaml"):
        (tmp_path / name).write_bytes((KV_EVENTS / name).read_bytes())
    return {
        "obligation": obligation.value,
        "status": "supported",
        "scope": "conformance_trace",
        "anchor": {
            "kind": "trace",
            "path": "sglang-0.5.23.kvevents",
            "sha256": sha256(tmp_path / "sglang-0.5.23.kvevents"),
            "format": "sglang-kv-events",
            "registry": "claim-sys.registry.yaml",
            "note": "a joined capture",
            "ordering": "batch seq",
            "claim_scope": "registry join",
            "claim_ids": ["claim:sys"],
        },
    }


@pytest.mark.parametrize(
    "obligation", [Obligation.explicit_conflict_action, Obligation.victim_exclusion_before_violation]
)
def test_a_telemetry_only_anchor_never_evidences_enforcement(tmp_path: Path, obligation: Obligation) -> None:
    """Listed natively (no adapter depth to limit it), the capture still shows only telemetry."""
    verdict = lowered(descriptor(tmp_path, [_kv_event_item(tmp_path, obligation)]), "hard_protected")
    discounted = finding(verdict, obligation).discounted
    assert [d.rule.value for d in discounted] == ["telemetry_cannot_create_enforcement"]
    assert "shows only what a telemetry join can show" in discounted[0].reason
    twin = lowered(
        descriptor(tmp_path, [_kv_event_item(tmp_path, Obligation.claim_identity)], "twin.yaml"),
        "best_effort",
    )
    assert finding(twin, Obligation.claim_identity).supplied


def test_a_tampered_trace_is_refused_by_its_digest_before_it_is_read(tmp_path: Path) -> None:
    items = exported(tmp_path, offloadable_run())
    trace = tmp_path / "run.ndjson"
    trace.write_bytes(trace.read_bytes().replace(b'"C"', b'"E"'))
    path = descriptor(tmp_path, items)
    ((_, loaded),) = load_rechecked([path])
    assert all(anchor.reading is None for anchor in loaded.anchors())
    verdict = lower_row(loaded, LoweringRow(mode=ProtectionMode.offloadable, depth=AdapterDepth.none))
    assert "does not match" in reasons(verdict, Obligation.claim_identity)


def test_the_commands_re_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = exported(tmp_path, offloadable_run())
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(rejected_run().ndjson())
    folder = tmp_path / "descriptors"
    folder.mkdir()
    bad.rename(folder / bad.name)
    descriptor(folder, _cite(folder, items, folder / bad.name))
    capsys.readouterr()
    assert (
        main(["lower", str(folder), "--mode", "offloadable", "--depth", "none", "--json", "--explain"]) == 1
    )
    row = json.loads(capsys.readouterr().out)
    assert row["label"] != "native_sound" and "re-checked, is rejected" in json.dumps(row["findings"])
    assert main(["matrix", str(folder), "-o", str(tmp_path / "m"), "--no-png"]) == 1
    assert "offloadable @ none: " in (tmp_path / "m" / "lowering-matrix.md").read_text()


def test_readings_are_cached_by_digest_outside_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One entry per trace in the user cache; an entry that is not a reading is a miss, read
    afresh and rewritten (never trusted)."""
    monkeypatch.setenv("KVCLAIMS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_recheck, "_READINGS", {})
    path = descriptor(tmp_path, exported(tmp_path, offloadable_run()))
    assert lowered(path, "offloadable").label is Label.native_sound
    (entry,) = cache_directory().glob("*.json")
    assert cache_directory() == tmp_path / "cache" / "trace-readings"
    assert json.loads(entry.read_text())["reading"]["outcome"] == "accepted"
    entry.write_text("{not json", encoding="utf-8")
    monkeypatch.setattr(_recheck, "_READINGS", {})
    assert lowered(path, "offloadable").label is Label.native_sound
    assert json.loads(entry.read_text())["reading"]["outcome"] == "accepted"


def test_every_shipped_cited_trace_passes_its_re_check() -> None:
    """The committed descriptors' local trace anchors all count once re-checked, for the modes
    of their claims: what the matrix says of them is what their traces show."""
    for path, loaded in load_rechecked([SHIPPED]):
        checked = [a for a in loaded.anchors() if a.reading is not None]
        for anchor in checked:
            assert anchor.reading.accepted, (path.name, anchor.path, anchor.reading.reason)
    vllm = {
        mode.value
        for mode in ProtectionMode
        if lower_row(
            load_rechecked([SHIPPED / "kvclaims-vllm.yaml"])[0][1],
            LoweringRow(mode=mode, depth=AdapterDepth.backend_patch),
        ).label.is_sound
    }
    # No committed engine-lane trace holds a best_effort or soft_priority claim, nor the harm
    # of a hard_protected one: those modes are not evidenced by claims of their own mode.
    assert vllm == {"demotable", "expiring", "offloadable"}


def test_a_trace_cited_as_an_artifact_of_a_trace_scope_is_re_checked_as_a_trace(tmp_path: Path) -> None:
    items = exported(tmp_path, offloadable_run())
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(rejected_run().ndjson())
    as_artifact = [{**i, "anchor": {**i["anchor"], "kind": "artifact"}} for i in _cite(tmp_path, items, bad)]
    for i in as_artifact:
        for field in ("ordering", "claim_scope"):
            i["anchor"].pop(field)
    verdict = lowered(descriptor(tmp_path, as_artifact), "offloadable")
    assert "re-checked, is rejected" in reasons(verdict, Obligation.claim_identity)
    twin = [{**i, "anchor": {**i["anchor"], "kind": "artifact"}} for i in items]
    assert lowered(descriptor(tmp_path, twin, "twin.yaml"), "offloadable").label.is_sound


def test_an_observation_anchored_by_a_rejected_trace_is_not_observed(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.ndjson", tmp_path / "bad.ndjson"
    good.write_bytes(offloadable_run().ndjson())
    bad.write_bytes(rejected_run().ndjson())

    def observed(trace: Path, name: str) -> Verdict:
        anchor = {
            "kind": "trace",
            "path": trace.name,
            "note": "a run",
            "ordering": "seq",
            "claim_scope": "id",
        }
        observation = {"atom": "pressure_control_original", "scope": "controlled_pressure", "anchor": anchor}
        document = {
            "descriptor": 1,
            "runtime": "x",
            "surface": "x 1",
            "version": "1",
            "observations": [observation],
        }
        (tmp_path / name).write_text(yaml.safe_dump(document), encoding="utf-8")
        return lowered(tmp_path / name, "soft_priority")

    refused = observed(bad, "bad.yaml")
    assert "pressure_control_original" in refused.missing_atoms
    assert any("re-checked, is rejected" in r for r in refused.reasons)
    assert "pressure_control_original" not in observed(good, "good.yaml").missing_atoms


def test_an_open_prefix_exports_no_evidence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvclaims.refinement import check_trace
    from kvclaims.refinement.evidence import evidence_items

    cut = tmp_path / "open.ndjson"
    cut.write_bytes(offloadable_run().ndjson(closed=False))
    out = tmp_path / "evidence.yaml"
    assert main(["check", str(cut), "--open", "--evidence-out", str(out)]) == 2
    assert "open prefix is evidence of nothing" in capsys.readouterr().err and not out.exists()
    verdict = check_trace(cut, open=True)
    assert verdict.outcome == "accepted"
    with pytest.raises(ValueError, match="does not end with trace_closed"):
        evidence_items(verdict, cut, relative_to=tmp_path)
    closed = tmp_path / "closed.ndjson"
    closed.write_bytes(offloadable_run().ndjson())
    assert evidence_items(check_trace(closed), closed, relative_to=tmp_path)


def test_a_capture_cited_without_its_registry_evidences_nothing_and_says_why(tmp_path: Path) -> None:
    cited = _kv_event_item(tmp_path, Obligation.claim_identity)
    for field in ("format", "registry"):
        cited["anchor"].pop(field)
    verdict = lowered(descriptor(tmp_path, [cited]), "best_effort")
    why = reasons(verdict, Obligation.claim_identity)
    assert "re-checked, is inconclusive" in why and "needs a claim registry" in why
    assert str(tmp_path) not in why  # the reading is cached and shown: no machine path in it
