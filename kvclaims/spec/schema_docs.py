"""The format references in `docs/`, rendered from the committed JSON Schemas.

`docs/trace-format.md` and `docs/descriptor-format.md` are a short hand-written introduction
(kept here, in `_INTROS`) followed by tables generated from `schemas/*.schema.json`: one table
per object type (field, type, required, constraints, description) and the values of every enum.
Nothing in the tables is typed by hand, so a model change reaches the docs only through its
schema; a test renders the docs from the committed schemas and fails on any difference, as the
schema drift test does for the schemas themselves.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kvclaims.spec.schema import SCHEMA_FILES

Schema = Mapping[str, Any]

DOC_SOURCES: Mapping[str, tuple[str, ...]] = {
    "trace-format.md": (
        "trace-v1-header.schema.json",
        "trace-v1-event.schema.json",
        "trace-v1-routing-event.schema.json",
    ),
    "descriptor-format.md": ("descriptor-v1.schema.json",),
}
"""Each document spec renders and the committed schemas it is rendered from, in order."""

MoreDocs = Callable[[Mapping[str, Schema]], Mapping[str, str]]
"""Documents a layer above spec renders from the committed schemas (keyed by file name)."""

_REGENERATE = "kvclaims schema --out schemas --docs docs"

TRACE_EXAMPLE: tuple[Mapping[str, Any], ...] = (
    {"kvclaims_trace": 1, "source": "my-runtime", "usable_blocks": 80},
    {
        "seq": 1,
        "event": "resident_claim_accepted",
        "claim_id": "c1",
        "owner_scope": "tenant-a",
        "object_id": "doc",
        "mode": "hard_protected",
        "footprint_blocks": 60,
        "predicate": {"kind": "leading_prefix_at_least", "blocks": 60},
    },
    {"seq": 2, "event": "resident_claim_materialized", "claim_id": "c1", "leading_blocks": 60},
    {
        "seq": 3,
        "event": "active_request_refused",
        "request_id": "r1",
        "reason": "capacity",
        "blocking_claim_ids": ["c1"],
        "protected_resident_blocks": 60,
        "active_live_blocks_required": 70,
        "resident_plus_active_blocks": 130,
        "usable_blocks": 80,
        "capacity_shortfall_blocks": 50,
    },
    {"seq": 4, "event": "trace_closed", "reason": "closed"},
)
"""The example trace of the trace-format introduction (a test checks that it is accepted)."""

_INTROS: Mapping[str, str] = {
    "trace-format.md": """\
# Trace format: kvclaims trace v1

A trace is what a runtime did, one JSON object per line (NDJSON, UTF-8), for `kvclaims check`
to judge against the model. Line 1 is the **header**; every other line is
one **event**, named by its `event` field, with a `seq` that strictly increases; the last line
of a complete trace is `trace_closed`. For example, a hard-protected claim of 60 blocks, and a
70-block request refused on an 80-block pool:

```json
{trace_example}
```

Fail closed: a line that is not JSON, a missing required field, a wrong type (`true` or `1.0`
where an integer is expected, the header's `kvclaims_trace` included), a duplicate key in one
object, a block count or position past 16,777,216 (no prefix spans more blocks) or a `seq` that
does not increase makes the trace `invalid` (exit 2, with the line and field).

Unknown *fields*: one whose name is close to a field of its line (`duration_stpes`,
`usable_blox`) is a typo and makes the trace `invalid`, with a did-you-mean, because ignoring it
would silently change what the line means. Any other unknown field is the runtime's own context
(`engine_step`, `mono_ns`): kept, never checked, and listed in the verdict's notes;
`kvclaims check --strict` (`check_trace(..., strict=True)`) refuses every field outside this
page instead. An unknown *event type* is reported with its line and the closest known type, and
makes the verdict `inconclusive` (exit 3), never `accepted`: even when a later line breaks a
rule, the verdict names the unknown event (that later line is a note), because the unknown event
may be what the runtime did instead.

A trace may be gzip-compressed (recognised by its first bytes, whatever the file name; read as a
stream) and may start with a UTF-8 byte-order mark (ignored). With `--format auto`, a file no
format recognises is read as trace v1, whose own error says what is wrong (an empty file, a
missing header, bad JSON or an over-long line 1). A trace that does not end with `trace_closed`
is truncated (its writer crashed, was killed, or is still writing): `inconclusive` unless judged
as an open prefix (`kvclaims check --open`), and a line after `trace_closed` makes the trace
`invalid`. Which sequences of events are legal (identity,
lifecycle, capacity arithmetic, attribution, offload order, no silent harm, two-key
checkpoints) is the subject of [DESIGN.md, Refinement](DESIGN.md#4-refinement); this page is the
shape of each line.
The machine-readable form is `schemas/trace-v1-header.schema.json` and
`schemas/trace-v1-event.schema.json`.

What the fields mean to the model (the rules are in [DESIGN.md, Refinement](DESIGN.md#4-refinement)):

- **Requests.** A `request_finished` for a request the trace never admitted, deferred or
  refused is a client abort before the request reached the pool (vLLM finishes such a request
  `FINISHED_ABORTED` from its waiting queue): it held no blocks and no claim, so it is legal;
  its id is then finished and never reused. A deferred request that is later served from the
  prefix cache may go straight to `request_reused` (that is its admission). A deferral for a
  failed restoration discharges the fail-closed outcome the failure owed; it may be followed by
  the refusal (naming the same claim), an admission or a finish.
- **Clocks.** `seq` orders events; `engine_step` and `t_ns` never do. A claim's
  `duration_steps` is judged on `engine_step` and its `duration_ms` on `t_ns`, from acceptance
  (or, with `refresh_on_hit`, from its last satisfied reuse); an expiry before either has
  passed is rejected, and one the trace gives no clock for makes the verdict inconclusive.
  `resident_claim_extended` moves the earliest expiry to its own stamp plus its duration (on a
  clock the terms carry, never earlier than before), and `max_duration_steps` /
  `max_duration_ms` cap the whole protected life from acceptance: no refresh or extension
  promises past it (DESIGN 6.3).
- **Admissions.** `active_live_blocks` may include blocks a claim holds (a cached claim prefix
  the request reuses), and requests may share blocks with each other, so live blocks are never
  summed across requests. The protected blocks are those holding the leading positions the
  predicates of materialized preserving claims need (each block once; a block past a predicate
  may be evicted without harm). With `claim_shared_blocks` (how many of its live blocks are
  protected blocks) the admission must fit beside them: protected + `active_live_blocks` -
  `claim_shared_blocks` <= usable, and `claim_shared_blocks` is at most the live and at most
  the protected blocks (seed 001 3.4). Without it the sharing is unknown: the protected blocks
  and the request each fit alone.
- **Blocks.** A block is its `block_id` *and* its `block_hash`, whether or not a claim holds it:
  other content stored into a block id is a loss for every claim holding it, a removal must name
  the content the block holds, and a removal affects every claim holding the block whichever
  claim it names. A removal that names a claim position must name a block stored for that
  position, or a block the trace never stored (then the position goes, unless another block
  holds it: that removal cannot be attributed and is rejected). One content may sit in several
  device blocks (vLLM caches duplicates): a claim position stays present while any block holding
  it survives. A claim position keeps the content it was first stored with, on every path (a
  restore, a second copy, a re-store after a loss): a block of other content stored for it is a
  `block_identity` violation. A claim's blocks are followed from its acceptance until it is
  released or harmed; after that they are ordinary cache entries, and a post-release
  `resident_claim_lost` is judged by its own numbers (leading_blocks below the predicate).
  A claim that reported materialization before any block event named it holds the reported
  prefix at its first block event, whatever its phase then (a demotion removes no block).
- **Restores.** A restore of a claim whose blocks are followed must be confirmed by them (or by
  its `restored_blocks`, which puts that many leading blocks back) before any other event names
  the claim and before the end, as an unconfirmed materialized report must; a satisfied reuse
  after the restore of a claim without block events needs `restored_blocks` to reach the
  predicate. A two-key claim needs its KV blocks restored before its checkpoint.
- **Terms.** `resident_claim_accepted` after a submission repeats the submitted terms exactly;
  changed terms are `resident_claim_conditionally_accepted`.
""",
    "descriptor-format.md": """\
# Descriptor format: `descriptor: 1`

A descriptor is curated, anchored evidence about what one runtime surface (pinned to a version
or commit) supplies for the resident-claim contract, natively and through adapters; `kvclaims
lower` judges it ([DESIGN.md, Descriptors](DESIGN.md#24-descriptors-format-descriptor-1)). It is
YAML without aliases, merge keys or duplicate keys, at most 2 MiB; every error names file, line
and field. A minimal one:

```yaml
descriptor: 1
runtime: my-runtime
surface: my-runtime 0.1 prefix cache
version: "0.1"
approximation_signals: [priority_value]
native:
  - obligation: priority_influence
    status: supported
    scope: docs
    anchor:
      kind: docs
      url: https://example.org/my-runtime/0.1/cache.html#priority
      note: a request's cache priority orders eviction; lower priority blocks go first
```

How items count and how a row gets its label (`native_sound`, `sound_with_adapter`,
`approximate`, `unknown`, `rejected`, `invalid`) is in [`descriptors/README.md`](../descriptors/README.md),
with the curated descriptors shipped with kvclaims. Unknown fields are errors everywhere in a
descriptor. The machine-readable form is `schemas/descriptor-v1.schema.json`.
""",
}


# --- reading -------------------------------------------------------------------------------


def load_schemas(schema_dir: Path) -> dict[str, dict[str, Any]]:
    """The committed schemas every document needs, by file name (a missing file raises
    `FileNotFoundError`: there is nothing to render from)."""
    return {name: json.loads((schema_dir / name).read_text(encoding="utf-8")) for name in SCHEMA_FILES}


# --- rendering one schema fragment ---------------------------------------------------------


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _link(name: str) -> str:
    """A link to the section `### Name` (GitHub's anchor: lowercase, spaces to dashes)."""
    return f"[`{name}`](#{name.lower().replace(' ', '-')})"


def _code(value: Any) -> str:
    return f"`{json.dumps(value)}`" if not isinstance(value, str) else f"`{value}`"


def _cell(text: str) -> str:
    """Table-cell text: one line, no bare `|`."""
    return " ".join(text.split()).replace("|", "\\|")


def _non_null(options: list[Schema]) -> list[Schema]:
    return [option for option in options if option.get("type") != "null"]


def type_of(schema: Schema) -> str:
    """The type of a schema fragment, in words, with links to named definitions."""
    if "$ref" in schema:
        return _link(_ref_name(schema["$ref"]))
    if "const" in schema:
        return _code(schema["const"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(type_of(option) for option in schema[key])
    kind = schema.get("type")
    if kind == "array" and "prefixItems" in schema:
        return "[" + ", ".join(type_of(item) for item in schema["prefixItems"]) + "]"
    if kind == "array":
        return f"list of {type_of(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        keys = type_of(schema.get("propertyNames", {"type": "string"}))
        return f"map of {keys} to {type_of(schema['additionalProperties'])}"
    if isinstance(kind, str):
        return kind
    if "enum" in schema and all(isinstance(value, str) for value in schema["enum"]):
        return "string"
    return "any"


_INNER = {"items": "each", "propertyNames": "keys", "additionalProperties": "values"}
"""Nested schemas whose constraints a field's row shows, and how the row names them."""


def constraints_of(schema: Schema) -> list[str]:
    """Value constraints of a fragment (and of its non-null alternatives), in words."""
    found: list[str] = []
    parts = [schema, *_non_null(list(schema.get("anyOf", [])))]
    for part in parts:
        if "minimum" in part:
            found.append(f">= {part['minimum']}")
        if "exclusiveMinimum" in part:
            found.append(f"> {part['exclusiveMinimum']}")
        if "maximum" in part:
            found.append(f"<= {part['maximum']}")
        if "minLength" in part or "maxLength" in part:
            low, high = part.get("minLength", 0), part.get("maxLength")
            found.append(f"length {low}..{high}" if high is not None else f"length >= {low}")
        if "minItems" in part and part.get("minItems") == part.get("maxItems"):
            found.append(f"exactly {part['minItems']} items")
        if "pattern" in part:
            found.append(f"matches `{part['pattern']}`")
        if "enum" in part:
            found.append("one of " + ", ".join(_code(value) for value in part["enum"]))
        for key, label in _INNER.items():
            inner = part.get(key)
            if isinstance(inner, Mapping) and "$ref" not in inner:
                found.extend(f"{label}: {c}" for c in constraints_of(inner))
        for item in part.get("prefixItems", []):
            found.extend(f"each: {c}" for c in constraints_of(item) if f"each: {c}" not in found)
    return found


def _required_cell(name: str, schema: Schema, required: set[str], discriminator: str | None) -> str:
    if name in required:
        return "yes"
    if name == discriminator:
        return "yes (names the type)"
    if "default" in schema:
        return f"no (default `{json.dumps(schema['default'])}`)"
    return "no"


def _ordered_fields(definition: Schema, discriminator: str | None) -> list[str]:
    """The discriminator first, then required fields in model order, then the rest by name
    (committed schemas sort keys, so model order survives only in `required`)."""
    properties = definition.get("properties", {})
    required = [name for name in definition.get("required", []) if name in properties]
    head = [discriminator] if discriminator in properties and discriminator not in required else []
    rest = sorted(name for name in properties if name not in required and name not in head)
    return [*head, *required, *rest]


def field_table(definition: Schema, discriminator: str | None = None) -> list[str]:
    """The markdown table of an object definition's fields."""
    properties = definition.get("properties", {})
    required = set(definition.get("required", []))
    rows = [
        "| field | type | required | constraints | description |",
        "|---|---|---|---|---|",
    ]
    for name in _ordered_fields(definition, discriminator):
        field = properties[name]
        rows.append(
            "| "
            + " | ".join(
                [
                    f"`{name}`",
                    _cell(type_of(field)),
                    _required_cell(name, field, required, discriminator),
                    _cell("; ".join(constraints_of(field))),
                    _cell(field.get("description", "")),
                ]
            )
            + " |"
        )
    return rows


def _extra_fields(definition: Schema) -> str:
    extra = definition.get("additionalProperties")
    if extra is False:
        return "Unknown fields are errors."
    if extra is True:
        return "Unknown fields: a misspelt one is an error, others are kept as context (see above)."
    return ""


def _description(definition: Schema) -> list[str]:
    text = definition.get("description", "")
    return [" ".join(paragraph.split()) for paragraph in text.split("\n\n") if paragraph.strip()]


def object_section(heading: str, definition: Schema, discriminator: str | None = None) -> list[str]:
    """A `### heading` section: description, unknown-field rule, field table."""
    lines = [f"### {heading}", ""]
    for paragraph in _description(definition):
        lines += [paragraph, ""]
    if "oneOf" in definition and "properties" not in definition:
        lines += [f"One of {type_of(definition)}.", ""]
        return lines
    note = _extra_fields(definition)
    if note:
        lines += [note, ""]
    return [*lines, *field_table(definition, discriminator), ""]


def enum_section(name: str, definition: Schema) -> list[str]:
    lines = [f"### {name}", ""]
    for paragraph in _description(definition):
        lines += [paragraph, ""]
    values = ", ".join(_code(value) for value in definition.get("enum", []))
    return [*lines, f"Values: {values}.", ""]


def _definitions(schemas: list[Schema], skip: set[str]) -> Iterator[tuple[str, Schema]]:
    """Every named definition of `schemas`, once, by name, leaving out `skip`."""
    seen: dict[str, Schema] = {}
    for schema in schemas:
        for name, definition in schema.get("$defs", {}).items():
            if name not in skip:
                seen.setdefault(name, definition)
    yield from sorted(seen.items())


def _union_tags(node: Any, found: dict[str, str]) -> dict[str, str]:
    """Definition name -> the property that selects it, for every tagged union in `node`."""
    if isinstance(node, Mapping):
        tag = node.get("discriminator", {}).get("propertyName") if "oneOf" in node else None
        for ref in node.get("discriminator", {}).get("mapping", {}).values() if tag else ():
            found[_ref_name(ref)] = tag
        for value in node.values():
            _union_tags(value, found)
    elif isinstance(node, list):
        for value in node:
            _union_tags(value, found)
    return found


def _types_sections(schemas: list[Schema], skip: set[str]) -> list[str]:
    tags = _union_tags(schemas, {})
    definitions = list(_definitions(schemas, skip))
    objects = [(n, d) for n, d in definitions if "enum" not in d]
    enums = [(n, d) for n, d in definitions if "enum" in d]
    lines: list[str] = []
    if objects:
        lines += ["## Types used in fields", ""]
        for name, definition in objects:
            lines += object_section(name, definition, tags.get(name))
    if enums:
        lines += ["## Enumerations", ""]
        for name, definition in enums:
            lines += enum_section(name, definition)
    return lines


def _discriminator_of(definition: Schema) -> str | None:
    return definition.get("discriminator", {}).get("propertyName")


# --- the documents -------------------------------------------------------------------------


def _generated_notice(sources: tuple[str, ...]) -> list[str]:
    files = ", ".join(f"`schemas/{name}`" for name in sources)
    return [
        f"<!-- Generated from {files}",
        f"     by `{_REGENERATE}`. Edit the models in kvclaims/spec",
        "     (or the introduction in kvclaims/spec/schema_docs.py), never this file. -->",
        "",
    ]


def _events_part(
    events: Schema,
    *,
    heading: str = "## Events",
    intro: str | None = None,
    skip: frozenset[str] = frozenset(),
) -> list[str]:
    """Header-less event schema: an index of event types, then one section per type (leaving
    out the definitions named in `skip`, rendered already)."""
    discriminator = _discriminator_of(events)
    names = [_ref_name(option["$ref"]) for option in events.get("oneOf", [])]
    names = [name for name in names if name not in skip]
    definitions = events.get("$defs", {})
    lines = [
        heading,
        "",
        intro
        or f"Every line after the header is exactly one of these, chosen by its `{discriminator}` field.",
        "",
        f"| `{discriminator}` | required fields | what it says |",
        "|---|---|---|",
    ]
    for name in names:
        definition = definitions[name]
        tag = definition["properties"][discriminator]["const"]
        required = ", ".join(f"`{f}`" for f in definition.get("required", []))
        summary = (_description(definition) or [""])[0]
        lines.append(f"| [`{tag}`](#{tag}) | {required} | {_cell(summary)} |")
    lines.append("")
    for name in names:
        definition = definitions[name]
        lines += object_section(definition["properties"][discriminator]["const"], definition, discriminator)
    return lines


_ROUTER_STREAM_INTRO = (
    "A fleet's routing hook writes a router stream: a header line and these events, then "
    "`trace_closed`. `kvclaims check --fleet ROUTER ENGINE...` judges it together with the "
    "engines' own streams (each header names its `engine_id`); a single-stream check finds these "
    "events unknown (inconclusive). Unlike engine events, a router stream line may carry no "
    "field beyond its event's."
)


def render_trace_format(header: Schema, events: Schema, routing: Schema) -> str:
    example = "\n".join(json.dumps(line) for line in TRACE_EXAMPLE)
    intro = _INTROS["trace-format.md"].replace("{trace_example}", example)
    lines = [*_generated_notice(DOC_SOURCES["trace-format.md"]), intro]
    lines += ["## Header (line 1)", ""]
    lines += object_section("TraceHeader", header)[2:]
    lines += _events_part(events)
    known = frozenset(_ref_name(option["$ref"]) for option in events.get("oneOf", []))
    lines += _events_part(
        routing, heading="## Routing events (router stream)", intro=_ROUTER_STREAM_INTRO, skip=known
    )
    event_names = known | {_ref_name(option["$ref"]) for option in routing.get("oneOf", [])}
    lines += _types_sections([header, events, routing], skip=event_names)
    return "\n".join(lines).rstrip("\n") + "\n"


def render_descriptor_format(descriptor: Schema) -> str:
    lines = [*_generated_notice(DOC_SOURCES["descriptor-format.md"]), _INTROS["descriptor-format.md"]]
    lines += ["## The document", ""]
    lines += object_section("Descriptor", descriptor)[2:]
    lines += _types_sections([descriptor], skip=set())
    return "\n".join(lines).rstrip("\n") + "\n"


def render_docs(schemas: Mapping[str, Schema]) -> dict[str, str]:
    """Every document spec renders, by file name, from schemas keyed by their file name."""
    return {
        "trace-format.md": render_trace_format(
            schemas["trace-v1-header.schema.json"],
            schemas["trace-v1-event.schema.json"],
            schemas["trace-v1-routing-event.schema.json"],
        ),
        "descriptor-format.md": render_descriptor_format(schemas["descriptor-v1.schema.json"]),
    }


def write_docs(schema_dir: Path, docs_dir: Path, more: MoreDocs | None = None) -> list[Path]:
    """Render the documents from the schema files in `schema_dir` into `docs_dir` (`more`:
    documents of layers above spec)."""
    docs_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in _rendered(schema_dir, more).items():
        target = docs_dir / name
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def drifted_docs(schema_dir: Path, docs_dir: Path, more: MoreDocs | None = None) -> list[str]:
    """Names of documents under `docs_dir` that differ from what `schema_dir` renders (or are
    absent)."""
    drifted = []
    for name, text in _rendered(schema_dir, more).items():
        target = docs_dir / name
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            drifted.append(name)
    return drifted


def _rendered(schema_dir: Path, more: MoreDocs | None) -> dict[str, str]:
    schemas = load_schemas(schema_dir)
    return {**render_docs(schemas), **(more(schemas) if more is not None else {})}
