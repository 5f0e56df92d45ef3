"""The format references in docs/ are rendered from the committed schemas and never drift; their
tables cover every field of every model, and their examples are real."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from pydantic import BaseModel, TypeAdapter

from kvclaims.cli import main
from kvclaims.refinement import check_trace
from kvclaims.spec.descriptor import Descriptor, load_descriptor
from kvclaims.spec.evidence import Adapter, Anchor, EvidenceItem, ForbiddenLowering, LoweringRow, Observation
from kvclaims.spec.lowering import lower
from kvclaims.spec.schema_docs import DOC_SOURCES, TRACE_EXAMPLE, drifted_docs, write_docs
from kvclaims.spec.trace import EVENT_MODELS, TraceEvent, TraceHeader
from kvclaims.spec.vocabulary import AdapterDepth, ProtectionMode

REPOSITORY = Path(__file__).resolve().parents[2]
SCHEMAS = REPOSITORY / "schemas"
DOCS = REPOSITORY / "docs"


def test_committed_docs_match_the_committed_schemas() -> None:
    assert drifted_docs(SCHEMAS, DOCS) == [], "run: kvclaims schema --out schemas --docs docs"


def test_a_schema_change_or_a_hand_edit_is_drift(tmp_path: Path) -> None:
    schemas, docs = tmp_path / "schemas", tmp_path / "docs"
    shutil.copytree(SCHEMAS, schemas)
    write_docs(schemas, docs)
    assert drifted_docs(schemas, docs) == []
    (docs / "descriptor-format.md").write_text("hand edit\n")
    assert drifted_docs(schemas, docs) == ["descriptor-format.md"]
    write_docs(schemas, docs)
    event_schema = schemas / "trace-v1-event.schema.json"
    changed = json.loads(event_schema.read_text())
    changed["$defs"]["RequestFinished"]["properties"]["status"]["description"] = "changed"
    event_schema.write_text(json.dumps(changed))
    assert drifted_docs(schemas, docs) == ["trace-format.md"]


def _section(doc: str, heading: str) -> str:
    """The text of `### heading` up to the next heading."""
    match = re.search(rf"^### {re.escape(heading)}\n(.*?)(?=^#)", doc + "\n#", re.S | re.M)
    assert match, f"no section {heading}"
    return match.group(1)


def _rows(section: str) -> dict[str, list[str]]:
    """Field name -> the table row's cells."""
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        if line.startswith("| `"):
            rows[cells[0].strip("`")] = cells
    return rows


def _assert_table_matches(section: str, model: type[BaseModel], tag: str | None = None) -> None:
    rows = _rows(section)
    assert set(rows) == set(model.model_fields), model.__name__
    for name, info in model.model_fields.items():
        required = rows[name][2]
        if name == tag:
            assert required.startswith("yes"), (model.__name__, name)
        else:
            assert required.startswith("yes") == info.is_required(), (model.__name__, name, required)
        if info.description:
            assert " ".join(info.description.split()) in rows[name][4].replace("\\|", "|")


def test_every_event_type_has_a_section_with_every_field() -> None:
    doc = (DOCS / "trace-format.md").read_text()
    for name, model in EVENT_MODELS.items():
        assert f"| [`{name}`](#{name}) |" in doc, f"{name} missing from the index"
        _assert_table_matches(_section(doc, name), model, tag="event")
    header = doc.split("## Header (line 1)")[1].split("## Events")[0]
    _assert_table_matches(header, TraceHeader)


@pytest.mark.parametrize(
    "model", [Adapter, Anchor, EvidenceItem, ForbiddenLowering, LoweringRow, Observation]
)
def test_every_descriptor_type_has_a_table_with_every_field(model: type[BaseModel]) -> None:
    doc = (DOCS / "descriptor-format.md").read_text()
    _assert_table_matches(_section(doc, model.__name__), model)


def test_the_descriptor_table_and_the_enumerations() -> None:
    doc = (DOCS / "descriptor-format.md").read_text()
    top = doc.split("## The document")[1].split("## Types used in fields")[0]
    _assert_table_matches(top, Descriptor)
    for enum in (ProtectionMode, AdapterDepth):
        values = _section(doc, enum.__name__)
        assert all(f"`{member.value}`" in values for member in enum)


def test_the_trace_example_is_valid_and_accepted(tmp_path: Path) -> None:
    header, *events = TRACE_EXAMPLE
    TraceHeader.model_validate(header)
    for event in events:
        TypeAdapter(TraceEvent).validate_python(event)
    doc = (DOCS / "trace-format.md").read_text()
    block = re.search(r"```json\n(.*?)```", doc, re.S)
    assert block and [json.loads(line) for line in block.group(1).splitlines()] == list(TRACE_EXAMPLE)
    path = tmp_path / "example.ndjson"
    path.write_text(block.group(1))
    assert check_trace(path).outcome.value == "accepted"


def test_the_descriptor_example_loads_and_is_judged(tmp_path: Path) -> None:
    doc = (DOCS / "descriptor-format.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", doc, re.S)
    assert block
    path = tmp_path / "my-runtime.yaml"
    path.write_text(block.group(1))
    descriptor = load_descriptor(path)
    # one docs-anchored priority item: a related primitive, not a sound soft_priority lowering
    verdict = lower(descriptor, ProtectionMode.soft_priority, AdapterDepth.none)
    assert verdict.label.value == "approximate"


def test_the_cli_writes_and_checks_the_docs(tmp_path: Path) -> None:
    schemas, docs = tmp_path / "schemas", tmp_path / "docs"
    assert main(["schema", "--out", str(schemas), "--docs", str(docs)]) == 0
    assert sorted(p.name for p in docs.iterdir()) == sorted([*DOC_SOURCES, "rule-event-table.md"])
    assert main(["schema", "--check", str(schemas), "--docs", str(docs)]) == 0
    (docs / "trace-format.md").write_text("stale\n")
    assert main(["schema", "--check", str(schemas), "--docs", str(docs)]) == 1
    assert main(["schema", "--out", str(schemas), "--docs", str(docs)]) == 0
    (docs / "rule-event-table.md").unlink()
    assert main(["schema", "--check", str(schemas), "--docs", str(docs)]) == 1
    assert main(["schema", "--docs", str(docs)]) == 2
