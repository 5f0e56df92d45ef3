"""Malformed descriptor input is a typed error naming file, line and field, never a label.

An empty or deleted anchor is *not* malformed: it loads and fails closed in the judgment.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from kvclaims.spec.descriptor import MAX_DESCRIPTOR_BYTES, load_descriptor, load_descriptors
from kvclaims.spec.errors import DescriptorError, Problem
from kvclaims.spec.lowering import lower
from kvclaims.spec.vocabulary import AdapterDepth, ProtectionMode

VALID = """\
descriptor: 1
runtime: example
surface: Example 1.0
version: "1.0"
approximation_signals: [priority_value]
native:
  - obligation: priority_influence
    status: supported
    scope: controlled_pressure
    anchor: {kind: artifact, url: "https://example.org/run.json", note: "pressure run"}
adapters:
  - name: join
    depth: telemetry_join
    preconditions: {external_claim_registry: true}
    evidence: []
"""


def write(tmp_path: Path, text: str, name: str = "d.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(path: Path) -> list[Problem]:
    with pytest.raises(DescriptorError) as raised:
        load_descriptor(path)
    assert raised.value.problems
    for problem in raised.value.problems:
        assert problem.file == str(path)
    return raised.value.problems


def test_valid_descriptor_loads(tmp_path: Path) -> None:
    loaded = load_descriptor(write(tmp_path, VALID))
    assert loaded.adapters[0].depth is AdapterDepth.telemetry_join


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        (VALID.replace("version:", "versoin:"), 4, "versoin", "unknown field"),
        (VALID.replace("status: supported", "status: proven"), 8, "native.0.status", "proven"),
        (VALID.replace("depth: telemetry_join", "depth: kernel_hook"), 13, "adapters.0.depth", "kernel_hook"),
        (
            VALID.replace("{external_claim_registry: true}", "{external_claim_registry: 'yes'}"),
            14,
            "adapters.0.preconditions.external_claim_registry",
            "boolean",
        ),
        (VALID.replace("descriptor: 1", "descriptor: '1'"), 1, "descriptor", "1"),
        (
            VALID.replace("obligation: priority_influence", "obligation: claim_harm"),
            7,
            "native.0.obligation",
            "claim_harm",
        ),
        (VALID.replace("  - name: join\n", "  - name: ''\n"), 12, "adapters.0.name", "at least 1"),
        (VALID.replace("depth: telemetry_join", "depth: none"), 12, "adapters.0", "native evidence"),
    ],
    ids=[
        "unknown-field",
        "unknown-status",
        "unknown-depth",
        "wrong-type",
        "string-for-int",
        "unknown-obligation",
        "empty-name",
        "adapter-at-native-depth",
    ],
)
def test_schema_errors_name_line_and_field(
    tmp_path: Path, text: str, line: int, field: str, message: str
) -> None:
    (problem,) = problems_of(write(tmp_path, text))
    assert (problem.line, problem.field) == (line, field)
    assert message in problem.message


def test_missing_required_field_is_named(tmp_path: Path) -> None:
    problems = problems_of(write(tmp_path, VALID.replace("surface: Example 1.0\n", "")))
    assert [p.field for p in problems] == ["surface"]


def test_invalid_yaml_names_line_and_column(tmp_path: Path) -> None:
    (problem,) = problems_of(write(tmp_path, VALID + "  - [unclosed\n"))
    assert problem.line is not None and problem.line >= 16 and problem.column is not None
    assert "invalid YAML" in problem.message


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    (problem,) = problems_of(write(tmp_path, VALID + "runtime: other\n"))
    assert (problem.line, problem.field) == (16, "runtime")
    assert "duplicate key" in problem.message


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    lines = ["descriptor: 1", 'a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    started = time.perf_counter()
    (problem,) = problems_of(write(tmp_path, "\n".join(lines) + "\n"))
    assert time.perf_counter() - started < 5
    assert "aliases are not allowed" in problem.message and problem.line == 3


def test_merge_keys_are_refused(tmp_path: Path) -> None:
    text = "other:\n  <<: {runtime: x}\n"
    (problem,) = problems_of(write(tmp_path, text))
    assert "not allowed" in problem.message


def test_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as handle:
        handle.write(b"descriptor: 1\nnotes: '")
        handle.truncate(50 * 1024 * 1024)
    (problem,) = problems_of(path)
    assert str(MAX_DESCRIPTOR_BYTES) in problem.message and problem.line is None


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_bytes(VALID.encode() + b"notes: \xff\xfe\n")
    (problem,) = problems_of(path)
    assert (problem.line, problem.message) == (16, "file is not valid UTF-8")


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    (problem,) = problems_of(write(tmp_path, "x: " + "[" * 5000 + "]" * 5000 + "\n"))
    assert "nested" in problem.message or "invalid YAML" in problem.message


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n"])
def test_empty_file_is_refused(tmp_path: Path, text: str) -> None:
    (problem,) = problems_of(write(tmp_path, text))
    assert "empty" in problem.message


def test_a_scalar_document_is_refused(tmp_path: Path) -> None:
    (problem,) = problems_of(write(tmp_path, "just a string\n"))
    assert problem.line == 1


def test_directory_without_descriptors_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(DescriptorError, match=r"no \.yaml descriptor"):
        load_descriptors([tmp_path])


def test_an_unrelated_yaml_in_a_directory_is_skipped_and_named(tmp_path: Path) -> None:
    write(tmp_path, VALID, "a.yaml")
    write(tmp_path, "- a list, not a mapping\n", "list.yaml")
    write(tmp_path, "title: notes\n", "notes.yaml")
    with pytest.warns(UserWarning) as warned:
        loaded = load_descriptors([tmp_path])
    assert [path.name for path, _ in loaded] == ["a.yaml"]
    assert sorted(str(w.message).split(":")[0] for w in warned) == [
        str(tmp_path / "list.yaml"),
        str(tmp_path / "notes.yaml"),
    ]
    skipped: list[Path] = []
    load_descriptors([tmp_path], on_skip=skipped.append)
    assert [p.name for p in skipped] == ["list.yaml", "notes.yaml"]


def test_an_unrelated_yaml_named_directly_is_still_read_as_a_descriptor(tmp_path: Path) -> None:
    with pytest.raises(DescriptorError, match="descriptor"):
        load_descriptors([write(tmp_path, "title: notes\n", "notes.yaml")])


def test_a_malformed_yaml_in_a_directory_is_never_skipped(tmp_path: Path) -> None:
    write(tmp_path, VALID, "a.yaml")
    write(tmp_path, "title: [\n", "broken.yaml")
    with pytest.raises(DescriptorError) as raised:
        load_descriptors([tmp_path], on_skip=lambda path: pytest.fail(f"skipped {path}"))
    (problem,) = raised.value.problems
    assert Path(problem.file).name == "broken.yaml" and problem.line is not None


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DescriptorError, match="no such file"):
        load_descriptors([tmp_path / "absent.yaml"])


def test_all_problems_of_all_files_are_reported_together(tmp_path: Path) -> None:
    write(tmp_path, VALID, "a.yaml")
    write(tmp_path, VALID.replace("version:", "versoin:"), "b.yaml")
    write(tmp_path, "descriptor: [", "c.yaml")
    with pytest.raises(DescriptorError) as raised:
        load_descriptors([tmp_path])
    assert sorted(Path(p.file).name for p in raised.value.problems) == ["b.yaml", "c.yaml"]


def test_an_emptied_anchor_is_not_malformed_it_fails_closed(tmp_path: Path) -> None:
    emptied = VALID.replace(
        'anchor: {kind: artifact, url: "https://example.org/run.json", note: "pressure run"}',
        'anchor: {kind: artifact, url: "", note: ""}',
    )
    loaded = load_descriptor(write(tmp_path, emptied))
    verdict = lower(loaded, ProtectionMode.soft_priority, AdapterDepth.none)
    finding = next(f for f in verdict.findings if f.obligation.value == "priority_influence")
    assert not finding.supplied
    assert {d.reason for d in finding.discounted} >= {"anchor has neither path nor url", "anchor has no note"}


# --- strict descriptor input: exact integers, invisible anchors, anchor kinds, missing files -----

ANCHOR = 'anchor: {kind: artifact, url: "https://example.org/run.json", note: "pressure run"}'


def _priority_finding(path: Path) -> object:
    verdict = lower(load_descriptor(path), ProtectionMode.soft_priority, AdapterDepth.none)
    return next(f for f in verdict.findings if f.obligation.value == "priority_influence")


@pytest.mark.parametrize("hostile", ["true", "1.0"])
def test_the_format_version_is_an_exact_integer(tmp_path: Path, hostile: str) -> None:
    problems = problems_of(write(tmp_path, VALID.replace("descriptor: 1", f"descriptor: {hostile}")))
    assert [(p.line, p.field) for p in problems] == [(1, "descriptor")]
    assert load_descriptor(write(tmp_path, VALID, "twin.yaml")).descriptor == 1


@pytest.mark.parametrize("hostile", ["[true, 2]", "[0, 2.0]"])
def test_integer_fields_are_exact_integers(tmp_path: Path, hostile: str) -> None:
    text = VALID.replace('note: "pressure run"}', f'note: "pressure run", event_range: {hostile}}}')
    problems = problems_of(write(tmp_path, text))
    assert all("event_range" in (p.field or "") for p in problems)
    twin = VALID.replace('note: "pressure run"}', 'note: "pressure run", event_range: [0, 2]}')
    assert load_descriptor(write(tmp_path, twin, "twin.yaml")).native[0].anchor.event_range == (0, 2)


@pytest.mark.parametrize("invisible", ["\u200b", "\u00a0\u00a0", "\u2060\ufeff", "\u3164"])
def test_an_anchor_of_invisible_characters_is_empty(tmp_path: Path, invisible: str) -> None:
    hidden = VALID.replace('note: "pressure run"', f'note: "{invisible}"')
    finding = _priority_finding(write(tmp_path, hidden))
    assert not finding.supplied
    assert "anchor has no note" in {d.reason for d in finding.discounted}
    assert _priority_finding(write(tmp_path, VALID, "twin.yaml")).supplied


@pytest.mark.parametrize("kind", ["docs", "source"])
@pytest.mark.parametrize(
    "scope", ["controlled_pressure", "failure_injection", "conformance_trace", "artifact_generated"]
)
def test_runtime_evidence_needs_a_trace_or_artifact_anchor(tmp_path: Path, kind: str, scope: str) -> None:
    """A docs or source anchor shows what code could do, never what a run did: an observed
    scope (or a backend patch's exercised run, which needs one) anchored that way is invalid."""
    text = VALID.replace("scope: controlled_pressure", f"scope: {scope}").replace(
        "kind: artifact", f"kind: {kind}"
    )
    problems = problems_of(write(tmp_path, text))
    assert [p.field for p in problems] == ["native.0"] and "trace or artifact anchor" in problems[0].message
    twin = VALID.replace("scope: controlled_pressure", f"scope: {scope}")
    assert load_descriptor(write(tmp_path, twin, "twin.yaml")).native[0].scope.value == scope


OBSERVED = """\
observations:
  - atom: pressure_control_original
    scope: controlled_pressure
    anchor: {kind: KIND, url: "https://example.org/p", note: run, ordering: seq, claim_scope: claim_id}
"""


def test_an_observation_anchored_in_docs_is_invalid(tmp_path: Path) -> None:
    problems = problems_of(write(tmp_path, VALID + OBSERVED.replace("KIND", "docs")))
    assert [p.field for p in problems] == ["observations.0"]
    assert load_descriptor(write(tmp_path, VALID + OBSERVED.replace("KIND", "trace"), "twin.yaml"))


TRACE_ANCHORED = VALID.replace(
    ANCHOR,
    'anchor: {kind: trace, path: "runs/pressure.ndjson", note: "pressure run", '
    "ordering: seq, claim_scope: claim_id}",
)


def test_a_trace_anchor_to_a_missing_file_never_counts_and_names_the_path(tmp_path: Path) -> None:
    finding = _priority_finding(write(tmp_path, TRACE_ANCHORED))
    assert not finding.supplied
    resolved = str(tmp_path / "runs" / "pressure.ndjson")
    assert any(resolved in d.reason and "does not exist" in d.reason for d in finding.discounted)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "pressure.ndjson").write_text("{}\n")
    assert _priority_finding(write(tmp_path, TRACE_ANCHORED)).supplied


# --- a trace anchor says how its trace is re-checked: format and claim registry ---------------

RECHECKED = VALID.replace(
    ANCHOR,
    "anchor:\n      kind: trace\n      path: runs/capture.jsonl\n      note: pressure run\n"
    "      ordering: seq\n      claim_scope: claim_id\n      format: trtllm-kv-events\n"
    "      registry: runs/claims.registry.yaml\n",
)
"""The anchor's `format` is line 16 of the file."""


def _with_files(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir(exist_ok=True)
    (tmp_path / "runs" / "capture.jsonl").write_text("{}\n")
    (tmp_path / "runs" / "claims.registry.yaml").write_text("kvclaims_registry: 1\n")


def test_an_anchor_with_format_and_registry_loads_and_resolves_the_registry_beside_the_descriptor(
    tmp_path: Path,
) -> None:
    _with_files(tmp_path)
    anchor = load_descriptor(write(tmp_path, RECHECKED)).native[0].anchor
    assert anchor is not None and anchor.format is not None
    assert anchor.format.value == "trtllm-kv-events"
    assert anchor.registry_file == tmp_path / "runs" / "claims.registry.yaml"
    assert _priority_finding(write(tmp_path, RECHECKED)).supplied


def test_an_unknown_anchor_format_is_a_descriptor_error_naming_line_and_field(tmp_path: Path) -> None:
    _with_files(tmp_path)
    text = RECHECKED.replace("format: trtllm-kv-events", "format: trtllm-kv-event")
    (problem,) = problems_of(write(tmp_path, text))
    assert (problem.line, problem.field) == (16, "native.0.anchor.format")
    assert "trtllm-kv-events" in problem.message


@pytest.mark.parametrize(
    ("added", "message"),
    [
        ("format: blockpool", "only a trace anchor"),
        ("registry: claims.yaml", "only a trace anchor"),
    ],
)
def test_only_a_trace_anchor_says_how_it_is_rechecked(tmp_path: Path, added: str, message: str) -> None:
    text = VALID.replace('note: "pressure run"}', f'note: "pressure run", {added}}}')
    (problem,) = problems_of(write(tmp_path, text))
    assert problem.field == "native.0.anchor" and message in problem.message


def test_a_registry_digest_without_a_registry_is_refused(tmp_path: Path) -> None:
    text = RECHECKED.replace(
        "      registry: runs/claims.registry.yaml\n", f"      registry_sha256: {'a' * 64}\n"
    )
    (problem,) = problems_of(write(tmp_path, text))
    assert problem.field == "native.0.anchor" and "registry_sha256 without registry" in problem.message


def test_a_missing_registry_never_counts_and_names_the_path(tmp_path: Path) -> None:
    _with_files(tmp_path)
    (tmp_path / "runs" / "claims.registry.yaml").unlink()
    finding = _priority_finding(write(tmp_path, RECHECKED))
    assert not finding.supplied
    resolved = str(tmp_path / "runs" / "claims.registry.yaml")
    assert any(resolved in d.reason and "registry does not exist" in d.reason for d in finding.discounted)


def test_a_registry_digest_counts_only_when_it_matches(tmp_path: Path) -> None:
    _with_files(tmp_path)
    registry = tmp_path / "runs" / "claims.registry.yaml"
    right = hashlib.sha256(registry.read_bytes()).hexdigest()
    pinned = RECHECKED.replace(
        "registry: runs/claims.registry.yaml\n",
        f"registry: runs/claims.registry.yaml\n      registry_sha256: {right}\n",
    )
    assert _priority_finding(write(tmp_path, pinned)).supplied
    registry.write_text("kvclaims_registry: 1\nclaims: []\n")
    finding = _priority_finding(write(tmp_path, pinned))
    assert not finding.supplied
    assert any("sha256 of the anchor's claim registry" in d.reason for d in finding.discounted)
