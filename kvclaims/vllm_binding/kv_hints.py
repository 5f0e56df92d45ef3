"""Resident claims carried in vLLM 0.33's `kv_hints` envelope (and in vLLM 0.32's `vllm_xargs`).

vLLM 0.33 carries an orchestrator's `KvHintsEnvelope(protocol_version, message_id, actions)` of
`KvHintAction(action_id, action_type, action_version, payload)` on the engine request
(`EngineCoreRequest.kv_hints` -> `Request.kv_hints`); vLLM validates no payload, each component
validates its own actions. The binding's action is `ACTION_TYPE` at an `ACTION_VERSIONS` version;
its payload is a claim operation's terms, the `kvclaims_*` keys without the prefix, validated by
`metadata.parse_claim_metadata` as claim metadata is. On vLLM 0.32 the same envelope travels as
JSON text in the request's `vllm_xargs` under `XARGS_KEY`.

Every action of an envelope gets an outcome (`HintOutcome`): an action of another type or an
unknown version is rejected and says so (never guessed at); the client reads the outcomes back
in the finished request's `stop_reason` (`outcome_note`) and `reconcile` marks the actions the
engine never reported as missing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgspec

from kvclaims.vllm_binding.metadata import KEY_PREFIX, NOTE_PREFIX, RAW_TYPES_KEY, RAW_TYPES_OK, shown

ACTION_TYPE = "kvclaims.resident_claim"
ACTION_VERSIONS = frozenset({"1"})
PROTOCOL_VERSIONS = frozenset({"1"})
XARGS_KEY = "kv_hints"
"""The `vllm_xargs` / `SamplingParams.extra_args` key of the envelope's JSON text (vLLM 0.32)."""
NOTE_HEAD = f"{NOTE_PREFIX}kv_hints:"
MAX_ENVELOPE_BYTES = 16384
MAX_ACTIONS = 16
MAX_REASON = 200


class HintOutcome(StrEnum):
    """What became of one action (the vocabulary discussed upstream). `clipped` is acceptance
    on other terms (the trace's conditional acceptance) and `deferred` a decision put off;
    the binding decides every claim action when the request arrives, on the terms given."""

    accepted = "accepted"
    clipped = "clipped"
    deferred = "deferred"
    rejected = "rejected"
    missing = "missing"


class _Action(msgspec.Struct, forbid_unknown_fields=True):
    action_id: str
    action_type: str
    action_version: str
    payload: dict[str, Any]


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    protocol_version: str
    message_id: str
    actions: list[_Action]


@dataclass(frozen=True)
class Action:
    action_id: str
    action_type: str
    action_version: str
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class Envelope:
    message_id: str
    actions: Sequence[Action]


@dataclass(frozen=True)
class EnvelopeProblem:
    """The envelope could not be read (its actions get no outcome but this)."""

    reason: str


@dataclass(frozen=True)
class Outcome:
    action_id: str
    outcome: HintOutcome
    reason: str | None = None


def envelope_of(request: Any) -> Envelope | EnvelopeProblem | None:
    """The request's envelope: vLLM 0.33's `Request.kv_hints`, else the JSON text under
    `XARGS_KEY` in its sampling params' extra args; None when it carries none."""
    hints = getattr(request, "kv_hints", None)
    if hints is not None:
        try:
            raw = msgspec.json.encode(hints)
        except (TypeError, msgspec.EncodeError):
            return EnvelopeProblem("kv_hints is not a KvHintsEnvelope")
    else:
        params = getattr(request, "sampling_params", None)
        extra = getattr(params, "extra_args", None)
        if not isinstance(extra, Mapping) or XARGS_KEY not in extra:
            return None
        text = extra[XARGS_KEY]
        if not isinstance(text, str):
            return EnvelopeProblem(f"{XARGS_KEY} must be the envelope's JSON text")
        raw = text.encode()
    return parse_envelope(raw)


def parse_envelope(raw: bytes) -> Envelope | EnvelopeProblem:
    """A `KvHintsEnvelope` from its JSON, bounded before decoding; total."""
    if len(raw) > MAX_ENVELOPE_BYTES:
        return EnvelopeProblem(f"envelope of {len(raw)} bytes exceeds {MAX_ENVELOPE_BYTES}")
    try:
        decoded = msgspec.json.decode(raw, type=_Envelope)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        return EnvelopeProblem(f"not a KvHintsEnvelope: {str(error)[:MAX_REASON]}")
    if decoded.protocol_version not in PROTOCOL_VERSIONS:
        return EnvelopeProblem(f"unknown protocol_version {shown(decoded.protocol_version)}")
    if len(decoded.actions) > MAX_ACTIONS:
        return EnvelopeProblem(f"{len(decoded.actions)} actions exceed {MAX_ACTIONS}")
    ids = [a.action_id for a in decoded.actions]
    if len(set(ids)) != len(ids):
        return EnvelopeProblem("action ids repeat")
    actions = [Action(a.action_id, a.action_type, a.action_version, a.payload) for a in decoded.actions]
    return Envelope(decoded.message_id, actions)


def claim_metadata(action: Action) -> Mapping[str, Any] | str:
    """The claim metadata an action of the binding's type carries, or why it carries none."""
    if action.action_type != ACTION_TYPE:
        return f"unknown action type {shown(action.action_type)} (kvclaims handles {ACTION_TYPE})"
    if action.action_version not in ACTION_VERSIONS:
        return f"unknown {ACTION_TYPE} action_version {shown(action.action_version)}"
    prefixed = [k for k in action.payload if k.startswith(KEY_PREFIX)]
    if prefixed:
        return f"payload keys name the terms without {KEY_PREFIX!r}: {shown(prefixed[0])}"
    # JSON decoded here: the values' types are the sender's own (not coerced by vLLM's server)
    return {f"{KEY_PREFIX}{k}": v for k, v in action.payload.items()} | {RAW_TYPES_KEY: RAW_TYPES_OK}


def outcome_of_note(action_id: str, claim_note: str | None) -> Outcome:
    """An action's outcome from the claim note the binding wrote for its operation."""
    if claim_note is None:
        return Outcome(action_id, HintOutcome.rejected, "no claim operation was carried out")
    rejected = f"{NOTE_PREFIX}claim_rejected:"
    if claim_note.startswith(rejected):
        reason = claim_note.removeprefix(rejected).split(":", 1)[-1]
        return Outcome(action_id, HintOutcome.rejected, reason[:MAX_REASON])
    return Outcome(action_id, HintOutcome.accepted)


def outcome_note(message_id: str | None, outcomes: Sequence[Outcome], problem: str | None = None) -> str:
    """The finished request's `stop_reason` for an envelope: `kvclaims:kv_hints:` + JSON."""
    body: dict[str, Any] = {"message_id": message_id}
    if problem is not None:
        body["envelope"] = {"outcome": HintOutcome.rejected.value, "reason": problem[:MAX_REASON]}
    body["actions"] = [
        {"action_id": o.action_id, "outcome": o.outcome.value} | ({"reason": o.reason} if o.reason else {})
        for o in outcomes
    ]
    return NOTE_HEAD + json.dumps(body, separators=(",", ":"), sort_keys=True)


def reconcile(sent: Envelope, stop_reason: str | None) -> dict[str, HintOutcome]:
    """The client's view: each action the orchestrator sent and its outcome; an action the
    engine reported nothing for (no note, another request's note, a lost envelope) is missing."""
    reported: dict[str, HintOutcome] = {}
    if stop_reason is not None and stop_reason.startswith(NOTE_HEAD):
        try:
            body = json.loads(stop_reason.removeprefix(NOTE_HEAD))
        except json.JSONDecodeError:
            body = {}
        if isinstance(body, dict) and body.get("message_id") == sent.message_id:
            for entry in body.get("actions") or ():
                if isinstance(entry, dict) and entry.get("outcome") in HintOutcome.__members__:
                    reported[str(entry.get("action_id"))] = HintOutcome(entry["outcome"])
    return {a.action_id: reported.get(a.action_id, HintOutcome.missing) for a in sent.actions}


def envelope_json(message_id: str, actions: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """An orchestrator's envelope of resident-claim actions `(action_id, payload)` as JSON
    text (vLLM 0.32's `vllm_xargs["kv_hints"]`; on 0.33 decode it into vLLM's
    `KvHintsEnvelope`)."""
    return json.dumps(
        {
            "protocol_version": "1",
            "message_id": message_id,
            "actions": [
                {"action_id": i, "action_type": ACTION_TYPE, "action_version": "1", "payload": dict(p)}
                for i, p in actions
            ],
        }
    )
