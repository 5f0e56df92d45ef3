"""The binding's generated descriptor: reproducible from its committed traces, every citation
accepted by refinement, the modes its traces hold claims of sound at backend_patch once its
cited traces are re-checked (as `kvclaims lower` does), and fail-closed when its evidence is
tampered with. Needs no vLLM: it reads the committed files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kvclaims.cli._recheck import load_rechecked
from kvclaims.lab.vllm_descriptor import generate
from kvclaims.refinement import check_trace
from kvclaims.spec.descriptor import Descriptor
from kvclaims.spec.lowering import lower
from kvclaims.spec.vocabulary import AdapterDepth, Label, LabelSubtype, ProtectionMode

ROOT = Path(__file__).resolve().parents[2]
DESCRIPTOR = ROOT / "descriptors" / "kvclaims-vllm.yaml"
EVIDENCE = ROOT / "descriptors" / "evidence" / "kvclaims-vllm"
SOUND_MODES = ("demotable", "expiring", "offloadable")
"""The modes whose every obligation a committed trace evidences for a claim of that mode: no
engine-lane scenario holds a best_effort or soft_priority claim, nor harms a hard_protected one."""

MODES_OF_TRACE = {
    "demote-before-loss.ndjson": {"demotable"},
    "expire-before-loss.ndjson": {"expiring"},
    "hard-refusal.ndjson": {"hard_protected"},
    "offload-harm.ndjson": {"offloadable"},
    "path-a-restore.ndjson": {"offloadable"},
    "path-b-restore-failure.ndjson": {"offloadable"},
}
"""The modes of the claims each committed scenario's trace holds (its scenario's story)."""


def load_descriptor(path: Path) -> Descriptor:
    ((_, descriptor),) = load_rechecked([path])
    return descriptor


def anchors(document: dict, kind: str = "trace") -> list[dict]:
    return [
        item["anchor"]
        for adapter in document["adapters"]
        for item in adapter["evidence"]
        if item["anchor"]["kind"] == kind
    ]


def test_the_committed_descriptor_is_what_the_generator_makes_of_the_committed_traces() -> None:
    assert generate(EVIDENCE, DESCRIPTOR) == DESCRIPTOR.read_text(encoding="utf-8")


def test_every_cited_trace_is_accepted_and_matches_its_digest() -> None:
    from kvclaims.refinement.evidence import file_sha256

    document = yaml.safe_load(DESCRIPTOR.read_text(encoding="utf-8"))
    cited = {(a["path"], a["sha256"]) for a in anchors(document)}
    assert cited, "the descriptor cites traces"
    for path, digest in cited:
        trace = DESCRIPTOR.parent / path
        assert trace.parent == EVIDENCE and file_sha256(trace) == digest
        verdict = check_trace(trace)
        assert verdict.outcome == "accepted", (path, verdict.reason)
    for anchor in anchors(
        document, "artifact"
    ):  # the pressure controls' (tests/lab/test_pressure_controls.py)
        artifact = DESCRIPTOR.parent / anchor["path"]
        assert artifact.parent == EVIDENCE and file_sha256(artifact) == anchor["sha256"]


def test_the_modes_its_traces_hold_lower_as_backend_patch_witnesses_and_only_there() -> None:
    descriptor = load_descriptor(DESCRIPTOR)
    for mode in ProtectionMode:
        verdict = lower(descriptor, mode, AdapterDepth.backend_patch)
        if mode.value in SOUND_MODES:
            assert verdict.label is Label.sound_with_adapter, (mode, verdict.reasons)
            assert verdict.subtype is LabelSubtype.backend_patch_witness
        else:
            assert not verdict.label.is_sound, mode
        below = lower(descriptor, mode, AdapterDepth.allocator_hook)
        assert not below.label.is_sound, (mode, "nothing is supplied below backend_patch")


def tampered_copy(tmp_path: Path) -> tuple[Path, Path]:
    shutil.copytree(EVIDENCE, tmp_path / "evidence" / "kvclaims-vllm")
    copy = tmp_path / DESCRIPTOR.name
    shutil.copyfile(DESCRIPTOR, copy)
    return copy, tmp_path / "evidence" / "kvclaims-vllm"


def sound_modes(path: Path) -> set[str]:
    descriptor = load_descriptor(path)
    return {
        m.value for m in ProtectionMode if lower(descriptor, m, AdapterDepth.backend_patch).label.is_sound
    }


def test_an_untampered_copy_is_still_sound(tmp_path: Path) -> None:
    copy, _ = tampered_copy(tmp_path)
    assert sound_modes(copy) == set(SOUND_MODES)


@pytest.mark.parametrize("trace", sorted(p.name for p in EVIDENCE.glob("*.ndjson")))
def test_deleting_a_cited_trace_fails_its_rows_closed(tmp_path: Path, trace: str) -> None:
    """A sound mode whose claims the deleted trace held loses what only it evidenced for them;
    a mode it held no claim of keeps its label (its evidence is other traces')."""
    assert set(MODES_OF_TRACE) == {p.name for p in EVIDENCE.glob("*.ndjson")}
    copy, evidence = tampered_copy(tmp_path)
    (evidence / trace).unlink()
    document = yaml.safe_load(copy.read_text(encoding="utf-8"))
    lost = {
        item["obligation"]
        for adapter in document["adapters"]
        for item in adapter["evidence"]
        if item["anchor"]["path"].endswith(trace)
    }
    assert lost
    descriptor = load_descriptor(copy)
    for mode in SOUND_MODES:
        verdict = lower(descriptor, ProtectionMode(mode), AdapterDepth.backend_patch)
        if mode in MODES_OF_TRACE[trace]:
            assert not verdict.label.is_sound, (trace, mode)
            assert lost & {o.value for o in verdict.missing}, (trace, mode)
        else:
            assert verdict.label.is_sound, (trace, mode, verdict.reasons)


def test_a_corrupted_digest_or_trace_fails_every_row_closed(tmp_path: Path) -> None:
    copy, _ = tampered_copy(tmp_path)
    text = copy.read_text(encoding="utf-8")
    digests = sorted({a["sha256"] for a in anchors(yaml.safe_load(text))})
    for digest in digests:
        text = text.replace(digest, digest[:-1] + ("0" if digest[-1] != "0" else "1"))
    copy.write_text(text, encoding="utf-8")
    assert sound_modes(copy) == set()
    copy2, evidence2 = tampered_copy(tmp_path / "second")
    for trace in evidence2.glob("*.ndjson"):
        with trace.open("ab") as handle:
            handle.write(b"\n")
    assert sound_modes(copy2) == set()
