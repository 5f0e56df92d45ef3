"""JSON Schemas generated from the spec models: the committed, public form of the formats.

`schemas/` in the repository holds the output of `generate_schemas()`; a test regenerates them
and fails on any difference, so the committed schemas can never drift from the models.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from kvclaims.spec.descriptor import Descriptor
from kvclaims.spec.trace import RoutingEvent, TraceEvent, TraceHeader

SCHEMA_FILES = (
    "descriptor-v1.schema.json",
    "trace-v1-header.schema.json",
    "trace-v1-event.schema.json",
    "trace-v1-routing-event.schema.json",
)


def generate_schemas() -> dict[str, dict[str, Any]]:
    """Every committed schema, by file name."""
    generated = {
        "descriptor-v1.schema.json": Descriptor.model_json_schema(),
        "trace-v1-header.schema.json": TraceHeader.model_json_schema(),
        "trace-v1-event.schema.json": TypeAdapter(TraceEvent).json_schema(),
        "trace-v1-routing-event.schema.json": TypeAdapter(RoutingEvent).json_schema(),
    }
    for name, schema in generated.items():
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://kvclaims.dev/schemas/{name}"
    return generated


def render_schema(schema: dict[str, Any]) -> str:
    """Stable text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write_schemas(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in generate_schemas().items():
        target = out_dir / name
        target.write_text(render_schema(schema), encoding="utf-8")
        written.append(target)
    return written


def drifted_schemas(out_dir: Path) -> list[str]:
    """Names of committed schemas under `out_dir` that differ from the models (or are absent)."""
    drifted = []
    for name, schema in generate_schemas().items():
        target = out_dir / name
        if not target.is_file() or target.read_text(encoding="utf-8") != render_schema(schema):
            drifted.append(name)
    return drifted
