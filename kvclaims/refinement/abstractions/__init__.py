"""Abstraction functions: foreign trace vocabularies mapped to trace v1 steps, one module each.

The checker never special-cases a vocabulary. Each module here reads its own records and emits
trace v1 event mappings (validated into the same Structs the v1 reader decodes), so every trace,
native or foreign, is judged by the same checker and the same lifecycle machine.

An NDJSON abstraction is a class (the seed lanes subclass `RecordAbstraction`) with:

- `FORMAT` (its `--format` name) and `VOCABULARY` (every event name it understands);
- `detect(record) -> bool` on the first decoded record (auto-detection);
- `__init__(first_record)` setting `header` (a `HeaderInfo`);
- `abstract(record, line) -> list[dict]`: the v1 events one record stands for (possibly none,
  for records that are observations and not model steps; each module documents which);
- `finish() -> list[dict]`: steps owed at the end (most return none).

A record whose `event` is outside `VOCABULARY` is an unknown event (the verdict is at best
inconclusive); a record missing a field the mapping needs is a parse finding (invalid).
"""

from __future__ import annotations

from typing import Any

from kvclaims.refinement.reader import parse_error


def require(record: dict[str, Any], field: str, kind: type | tuple[type, ...], line: int) -> Any:
    """`record[field]` if it is present and of `kind` (bool is never an int), else a parse finding."""
    value = record.get(field)
    if value is None or not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        raise parse_error(
            f"{record.get('event', 'record')} needs {field} ({_name(kind)}), got {value!r}", line, field
        )
    return value


def optional(record: dict[str, Any], field: str, kind: type | tuple[type, ...], line: int) -> Any:
    """`record[field]` if present and not null (then it must be of `kind`), else None."""
    if record.get(field) is None:
        return None
    return require(record, field, kind, line)


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _name(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _kinds(kind))


def leading_prefix_blocks(text: str, line: int, field: str) -> int:
    """k from a foreign predicate spelled `leading_prefix_at_least(k)`."""
    prefix, suffix = "leading_prefix_at_least(", ")"
    if not (text.startswith(prefix) and text.endswith(suffix)):
        raise parse_error(f"unsupported materialization predicate {text!r}", line, field)
    inner = text[len(prefix) : -len(suffix)]
    if not inner.isdigit() or int(inner) < 1:
        raise parse_error(f"predicate threshold must be a positive integer, got {inner!r}", line, field)
    return int(inner)


class RecordAbstraction:
    """What the seed-lane abstractions share: detection by vocabulary and marker fields, a
    record dispatched by its event name to the method `_<event>` (so `VOCABULARY` and the
    methods must agree; the tests check that), and no step owed at the end unless a subclass
    says so."""

    FORMAT: str
    VOCABULARY: frozenset[str]
    MARKED_BY: frozenset[str] = frozenset()
    """Fields every record of the lane carries."""
    NEVER_HAS: frozenset[str] = frozenset()
    """Fields that tell another lane's records apart from this one's."""

    @classmethod
    def detect(cls, record: Any) -> bool:
        return (
            isinstance(record, dict)
            and record.get("event") in cls.VOCABULARY
            and cls.MARKED_BY <= record.keys()
            and not cls.NEVER_HAS & record.keys()
        )

    def abstract(self, record: dict[str, Any], line: int) -> list[dict[str, Any]]:
        return getattr(self, "_" + record["event"])(record, line)

    def finish(self) -> list[dict[str, Any]]:
        return []


def usable_blocks_of(first: dict[str, Any]) -> int | None:
    """The pool size a seed lane's first record states, if it states one as a positive integer
    (the seed artifacts write 0 where the pool was not measured)."""
    usable = first.get("usable_blocks")
    return usable if type(usable) is int and usable > 0 else None


def claim_request_step(record: dict[str, Any], line: int, event: str) -> dict[str, Any]:
    """A v1 step about one claim and one request, both named by the record."""
    return {
        "event": event,
        "claim_id": require(record, "claim_id", str, line),
        "request_id": require(record, "request_id", str, line),
    }


def restored_step(record: dict[str, Any], line: int) -> dict[str, Any]:
    """`resident_claim_restored` of the record's claim and request, with the blocks the record
    says came back (its `block_ids`, else its `key_count`) as `restored_blocks`."""
    step = claim_request_step(record, line, "resident_claim_restored")
    blocks, keys = record.get("block_ids"), record.get("key_count")
    if type(blocks) is list:
        step["restored_blocks"] = len(blocks)
    elif type(keys) is int and keys >= 0:
        step["restored_blocks"] = keys
    return step


def offloaded_step(record: dict[str, Any], line: int, tier_field: str) -> list[dict[str, Any]]:
    """`resident_claim_offloaded` of the record's claim to the tier in `tier_field`."""
    return [
        {
            "event": "resident_claim_offloaded",
            "claim_id": require(record, "claim_id", str, line),
            "tier": require(record, tier_field, str, line),
        }
    ]
