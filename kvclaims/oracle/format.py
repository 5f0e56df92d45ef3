"""Reading trace v1 for the oracle: the shape of every event, the header and the nested objects,
validated with no help from kvclaims.spec (choice C15: a line that is not a trace is invalid).
The tables here are the oracle's vocabulary; tests/oracle/test_vocabulary.py compares them with
the published schemas."""

from __future__ import annotations

import json
from typing import Any

from kvclaims.oracle.state import MODES, OUTCOMES, PROOF, REASONS, BadInput

_ID, _TEXT, _NAT, _POS, _BOOL = "id", "text", "nat", "pos", "bool"
_PREFIX, _PPREFIX = "prefix", "positive prefix"  # a count of, or position in, one prefix's blocks
MAX_PREFIX_BLOCKS = 1 << 24  # trace-format.md: no prefix spans more blocks
CLOSE_REASONS = ("closed", "engine_shutdown", "SIGTERM", "SIGINT", "atexit")
_TERMS = {
    "claim_id": (_ID, True),
    "owner_scope": (_ID, True),
    "object_id": (_ID, True),
    "mode": ("mode", True),
    "footprint_blocks": (_PPREFIX, True),
    "predicate": ("predicate", True),
    "duration_steps": (_POS, False),
    "duration_ms": (_POS, False),
    "refresh_on_hit": (_BOOL, False),
    "max_duration_steps": (_POS, False),  # C17: a cap on the claim's whole protected life
    "max_duration_ms": (_POS, False),
}
_CLAIM = {"claim_id": (_ID, True)}
_BLOCK = {
    "block_id": (_NAT, True),
    "block_hash": (_TEXT, True),
    "cache_level": (_TEXT, False),
    "claim_id": (_ID, False),
    "position": (_PREFIX, False),
}
_CONFLICT = {
    "request_id": (_ID, True),
    "reason": ("reason", True),
    "blocking_claim_ids": ("ids", True),
    **{name: (_NAT, False) for name in PROOF},
}
# Every event of trace v1 (DESIGN 3) and its own fields: (kind, required).
SCHEMA: dict[str, dict[str, tuple[str, bool]]] = {
    "resident_claim_submitted": _TERMS,
    "resident_claim_accepted": _TERMS,
    "resident_claim_conditionally_accepted": {**_TERMS, "reason": (_TEXT, False)},
    "resident_claim_rejected": {**_CLAIM, "reason": (_TEXT, True)},
    "resident_claim_extended": {  # C17: an extend-only deadline
        **_CLAIM,
        "duration_steps": (_POS, False),
        "duration_ms": (_POS, False),
        "reason": (_TEXT, False),
    },
    "resident_claim_materialized": {
        **_CLAIM,
        "leading_blocks": (_PREFIX, True),
        "checkpoint": ("checkpoint", False),
    },
    "resident_claim_demoted": {**_CLAIM, "reason": (_TEXT, False)},
    "resident_claim_expired": {**_CLAIM, "reason": (_TEXT, False)},
    "resident_claim_released": {**_CLAIM, "reason": (_TEXT, False)},
    "resident_claim_harmed": {
        **_CLAIM,
        "leading_blocks": (_PREFIX, True),
        "required_blocks": (_PPREFIX, True),
    },
    "resident_claim_lost": {**_CLAIM, "leading_blocks": (_PREFIX, True)},
    "resident_claim_offloaded": {**_CLAIM, "tier": (_ID, True)},
    "resident_claim_restore_required": {**_CLAIM, "request_id": (_ID, True)},
    "resident_claim_restored": {**_CLAIM, "request_id": (_ID, True), "restored_blocks": (_PREFIX, False)},
    "resident_claim_restoration_failed": {**_CLAIM, "request_id": (_ID, True), "outcome": ("outcome", True)},
    "resident_claim_checkpoint_restored": {
        **_CLAIM,
        "boundary": (_PREFIX, True),
        "payload_hash": (_ID, True),
        "value_hash": (_ID, True),
    },
    "active_request_admitted": {
        "request_id": (_ID, True),
        "active_live_blocks": (_NAT, True),
        "claim_shared_blocks": (_NAT, False),
    },
    "active_request_deferred": _CONFLICT,
    "active_request_refused": _CONFLICT,
    "request_reused": {
        "request_id": (_ID, True),
        "claim_id": (_ID, True),
        "cached_blocks": (_PREFIX, True),
        "predicate_satisfied": (_BOOL, True),
        "checkpoint": ("checkpoint", False),
    },
    "request_finished": {"request_id": (_ID, True), "status": (_TEXT, True)},
    "block_stored": _BLOCK,
    "block_removed": _BLOCK,
    "fault_injected": {"kind": (_ID, True), "claim_id": (_ID, False), "request_id": (_ID, False)},
    "trace_closed": {"reason": ("close_reason", True)},
}


# Fields every event may carry (trace-format.md): order, type and the two clocks. The clocks
# decide only on the events that start, restart or end a claim's term (C3); elsewhere they are
# the runtime's context, shape-checked.
COMMON_FIELDS = ("seq", "event", "t_ns", "engine_step")
CLOCK_EVENTS = frozenset(
    {
        "resident_claim_accepted",
        "resident_claim_conditionally_accepted",
        "resident_claim_extended",
        "resident_claim_expired",
        "resident_claim_restoration_failed",
        "request_reused",
    }
)
# Fields the oracle checks the shape of and nothing else, because no rule of DESIGN 4 reads them
# (free text, a fault's context, the bytes key of a checkpoint whose value key decides).
INFORMATIONAL: dict[str, frozenset[str]] = {
    "resident_claim_conditionally_accepted": frozenset({"reason"}),
    "resident_claim_rejected": frozenset({"reason"}),
    "resident_claim_extended": frozenset({"reason"}),
    "resident_claim_demoted": frozenset({"reason"}),
    "resident_claim_expired": frozenset({"reason"}),
    "resident_claim_released": frozenset({"reason"}),
    "resident_claim_offloaded": frozenset({"tier"}),  # any tier but the device's is another tier
    "resident_claim_checkpoint_restored": frozenset({"payload_hash"}),  # seed 002: value_hash decides
    "request_finished": frozenset({"status"}),
    "fault_injected": frozenset({"kind", "claim_id", "request_id"}),
    "trace_closed": frozenset({"reason"}),  # any close reason completes the trace (C16)
}
CHECKPOINT_FIELDS = {"boundary": (_PREFIX, True), "payload_hash": (_ID, True), "value_hash": (_ID, True)}
TENSOR_FIELDS = ("kind", "layer", "shape", "logical_dtype", "storage_dtype", "layout")
PREDICATE_FIELDS = {
    "leading_prefix_at_least": ("kind", "blocks", "tokens"),
    "hybrid_two_key": ("kind", "boundary_blocks", "checkpoint_key"),
}
HEADER_FIELDS = ("kvclaims_trace", "block_size", "cache_identity", "engine_id", "source", "usable_blocks")
CACHE_IDENTITY_FIELDS = {
    "cache_key_domain": (_ID, True),
    "model_id": (_ID, True),
    "token_hash_domain": (_ID, True),
    "block_size": (_POS, True),
    "kv_format": (_ID, True),
    "adapter_identity": (_ID, False),
    "namespace": (_TEXT, False),
    "prompt_embedding_identity": (_ID, False),
}


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise BadInput(f"duplicate key {key!r}")  # C15
        result[key] = value
    return result


def _is_int(value: Any) -> bool:
    return type(value) is int  # not bool, not float (C15)


def _valid(kind: str, value: Any) -> bool:
    if kind == _ID:
        return type(value) is str and 1 <= len(value) <= 256
    if kind == _TEXT:
        return type(value) is str
    if kind == _NAT:
        return _is_int(value) and value >= 0
    if kind == _POS:
        return _is_int(value) and value >= 1
    if kind == _BOOL:
        return type(value) is bool
    if kind in (_PREFIX, _PPREFIX):
        return _is_int(value) and (1 if kind == _PPREFIX else 0) <= value <= MAX_PREFIX_BLOCKS
    if kind == "close_reason":
        return value in CLOSE_REASONS
    if kind == "mode":
        return value in MODES
    if kind == "outcome":
        return value in OUTCOMES
    if kind == "reason":
        return value in REASONS
    if kind == "ids":
        return type(value) is list and all(_valid(_ID, item) for item in value)
    if kind == "checkpoint":
        return (  # other fields are context (the schema allows them)
            type(value) is dict
            and _fields_valid(value, CHECKPOINT_FIELDS)
            and (value.get("tensors") is None or _valid("tensors", value["tensors"]))
        )
    if kind == "tensors":
        return value is None or (
            type(value) is list
            and all(
                type(item) is dict
                and set(TENSOR_FIELDS) <= set(item)
                and all(
                    _valid(_ID, item[name])
                    for name in ("kind", "layer", "logical_dtype", "storage_dtype", "layout")
                )
                and type(item["shape"]) is list
                and all(_valid(_NAT, size) for size in item["shape"])
                for item in value
            )
        )
    if kind == "predicate":
        if type(value) is not dict:
            return False
        if value.get("kind") == "leading_prefix_at_least":
            units = [name for name in ("blocks", "tokens") if name in value]
            return (
                set(value) <= set(PREDICATE_FIELDS["leading_prefix_at_least"])
                and len(units) == 1
                and _valid(_PPREFIX if units == ["blocks"] else _POS, value[units[0]])
            )
        if value.get("kind") == "hybrid_two_key":
            return (
                set(value) <= set(PREDICATE_FIELDS["hybrid_two_key"])
                and _valid(_POS, value.get("boundary_blocks"))
                and ("checkpoint_key" not in value or _valid(_ID, value["checkpoint_key"]))
            )
        return False
    raise AssertionError(kind)


def _fields_valid(value: dict[str, Any], schema: dict[str, tuple[str, bool]]) -> bool:
    try:
        _check_fields(value, schema)
    except BadInput:
        return False
    return True


def _check_fields(event: dict[str, Any], schema: dict[str, tuple[str, bool]]) -> None:
    for name, (kind, required) in schema.items():
        value = event.get(name)
        if value is None:
            if required:
                raise BadInput(f"missing field {name!r}")
            continue
        if not _valid(kind, value):
            raise BadInput(f"field {name!r} has a wrong value {value!r}")


def _parse_line(text: bytes) -> dict[str, Any]:
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadInput(f"not JSON: {error}") from None
    if type(value) is not dict:
        raise BadInput("a line is not a JSON object")
    return value


def parse_header(header: dict[str, Any]) -> tuple[int | None, int | None]:
    if not _is_int(header.get("kvclaims_trace")) or header["kvclaims_trace"] != 1:
        raise BadInput("line 1 is not a kvclaims trace v1 header")
    usable, block_size = header.get("usable_blocks"), header.get("block_size")
    if usable is not None and not _valid(_NAT, usable):
        raise BadInput("header usable_blocks is not a non-negative integer")
    if block_size is not None and not _valid(_POS, block_size):
        raise BadInput("header block_size is not a positive integer")
    for name in ("source",):
        if header.get(name) is not None and type(header[name]) is not str:
            raise BadInput(f"header {name} is not a string")
    if header.get("engine_id") is not None and not _valid(_ID, header["engine_id"]):
        raise BadInput("header engine_id is not a string of 1..256 characters")
    identity = header.get("cache_identity")
    if identity is not None:
        if type(identity) is not dict or not set(identity) <= set(CACHE_IDENTITY_FIELDS):
            raise BadInput("header cache_identity is not an object of the identity's fields")
        _check_fields(identity, CACHE_IDENTITY_FIELDS)
    return usable, block_size


def parse_event(line: bytes, previous_seq: int | None) -> dict[str, Any]:
    """One event line, validated (C15); an unknown event type comes back with `unknown` set."""
    event = _parse_line(line)
    seq, name = event.get("seq"), event.get("event")
    if not _valid(_NAT, seq):
        raise BadInput("seq is not a non-negative integer")
    if previous_seq is not None and seq <= previous_seq:
        raise BadInput("seq does not strictly increase")
    if type(name) is not str:
        raise BadInput("event is not a string")
    for clock in ("t_ns", "engine_step"):  # on every event, decisive or not (COMMON_FIELDS)
        if event.get(clock) is not None and not _valid(_NAT, event[clock]):
            raise BadInput(f"{clock} is not a non-negative integer")
    schema = SCHEMA.get(name)
    if schema is not None:
        _check_fields(event, schema)
        _check_soft_terms(name, event)
    return event


# C17 (DESIGN 6.3): the events whose terms may carry a cap, and the clocks' field names.
CAPPED_EVENTS = frozenset(
    {"resident_claim_submitted", "resident_claim_accepted", "resident_claim_conditionally_accepted"}
)
CLOCK_NAMES = ("steps", "ms")


def _check_soft_terms(name: str, event: dict[str, Any]) -> None:
    """C17: a cap bounds the duration of its own clock (it needs that duration and is no
    shorter); an extension gives a duration on at least one clock. Anything else is not a trace."""
    if name in CAPPED_EVENTS:
        for clock in CLOCK_NAMES:
            cap, duration = event.get(f"max_duration_{clock}"), event.get(f"duration_{clock}")
            if cap is None:
                continue
            if duration is None:
                raise BadInput(f"max_duration_{clock} without duration_{clock}: a cap with nothing to cap")
            if cap < duration:
                raise BadInput(f"max_duration_{clock} {cap} is below duration_{clock} {duration}")
    elif name == "resident_claim_extended":
        if all(event.get(f"duration_{clock}") is None for clock in CLOCK_NAMES):
            raise BadInput("an extension without duration_steps or duration_ms")
