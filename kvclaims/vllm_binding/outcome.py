"""The claim outcome a caller reads back: the note the engine writes into a finished output's
`stop_reason`, and its parse at the HTTP boundary.

Notes use the trace's words (`claim_accepted`, `claim_rejected`, `refused`, ...). A refusal
names only the requesting owner's own blocking claims and counts the others (tenants never
learn each other's claim ids), then the capacity proof's numbers:
`kvclaims:refused:capacity:<own ids>;others=<n>;<proof field>=<n>...`. A stop token or string
vLLM set is kept after the note behind `STOP_SEPARATOR` (a JSON value), so the boundary can
give the client vLLM's own `stop_reason` back next to the outcome.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kvclaims.spec.capacity import CapacityProof
from kvclaims.vllm_binding.metadata import NOTE_PREFIX

STOP_SEPARATOR = "\x1f"
"""Between the claim note and vLLM's own stop reason (JSON) in one `stop_reason` string."""

MAX_NAMED = 8
"""At most this many of the owner's own blocking claims are named in a refusal."""

RETRY_AFTER_S = 1
"""`Retry-After` of a capacity refusal: claims expire, are released or demoted."""

REFUSAL_STATUS: dict[str, int] = {"capacity": 429, "restoration_failed": 503, "checkpoint_mismatch": 503}
"""HTTP status of a refusal by its reason (anything else the binding refuses: 503)."""

RETRYABLE = frozenset({"capacity", "restoration_failed"})
"""Refusal reasons a retry can cure (they get `Retry-After`)."""


class _Owned(Protocol):
    @property
    def claim_id(self) -> str: ...

    @property
    def claim(self) -> Any: ...


def refusal_note(blocking: Iterable[_Owned], owner: str | None, proof: CapacityProof) -> str:
    """The note of a capacity refusal of a request whose owner is `owner` (None: unknown, then
    no claim is named)."""
    own, others = [], 0
    for record in blocking:
        if owner is not None and record.claim.owner_scope == owner:
            own.append(record.claim_id)
        else:
            others += 1
    named = own[:MAX_NAMED]
    others += len(own) - len(named)
    numbers = ";".join(f"{name}={value}" for name, value in proof.fields().items())
    return f"{NOTE_PREFIX}refused:capacity:{','.join(named)};others={others};{numbers}"


def note_with_stop(note: str, stop: int | str | None) -> str:
    """`note`, followed by vLLM's own stop reason when it set one."""
    return note if stop is None else note + STOP_SEPARATOR + json.dumps(stop)


@dataclass(frozen=True)
class Outcome:
    """A parsed claim note: the trace's word for what happened, the claim (or the refusal's
    reason), the rest of the note, and vLLM's own stop reason."""

    outcome: str
    detail: str
    stop_reason: int | str | None

    @property
    def refusal(self) -> str | None:
        """The refusal reason (`capacity`, ...) when the request was refused."""
        if self.outcome != "refused":
            return None
        return self.detail.split(":", 1)[0]

    def body(self) -> dict[str, Any]:
        """The `kvclaims` object a response carries (`OPENAPI_SCHEMA`)."""
        found: dict[str, Any] = {"outcome": self.outcome}
        if self.outcome == "refused":
            reason, _, rest = self.detail.partition(":")
            named, *pairs = rest.split(";")
            found["reason"] = reason
            found["own_blocking_claim_ids"] = [c for c in named.split(",") if c]
            for pair in pairs:
                key, _, value = pair.partition("=")
                name = "other_blocking_claims" if key == "others" else key
                found[name] = int(value) if value.isdigit() else value
        elif self.outcome == "claim_rejected":
            claim, _, reason = self.detail.partition(":")
            found["claim_id"] = None if claim == "-" else claim
            found["reason"] = reason
        else:
            found["claim_id" if self.outcome.startswith("claim_") else "detail"] = self.detail
        return found

    def header(self) -> str:
        """The `x-kvclaims-claim` header value: the outcome, then the claim or reason."""
        body = self.body()
        subject = body.get("claim_id") or body.get("reason") or body.get("detail") or ""
        return f'{self.outcome}; subject="{quoted(str(subject))}"'


def parse_note(stop_reason: object) -> Outcome | None:
    """The outcome a choice's `stop_reason` carries, or None if it is not a claim note."""
    if not isinstance(stop_reason, str) or not stop_reason.startswith(NOTE_PREFIX):
        return None
    note, separator, stop_json = stop_reason.partition(STOP_SEPARATOR)
    stop: int | str | None = None
    if separator:
        try:
            decoded = json.loads(stop_json)
        except ValueError:
            decoded = stop_json
        stop = decoded if isinstance(decoded, int | str) else stop_json
    outcome, _, detail = note[len(NOTE_PREFIX) :].partition(":")
    return Outcome(outcome, detail, stop)


def response_note(document: object) -> str | None:
    """The claim note a completion response carries (a 200's first choice or the response; a
    429/503 refusal's body), in the trace's words as the engine wrote it
    (`kvclaims:claim_accepted:<id>`, `kvclaims:refused:<reason>:<own ids>;others=<n>;...`), or
    None when it carries none: the inverse of `Outcome.body`, for clients (from a server without
    the HTTP boundary, the note in the choice's `stop_reason`)."""
    if not isinstance(document, dict):
        return None
    choices = document.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    found = first.get("kvclaims", document.get("kvclaims"))
    if isinstance(found, dict) and isinstance(found.get("outcome"), str):
        return NOTE_PREFIX + _detail_of(found)
    bare = parse_note(first.get("stop_reason"))  # a server without the HTTP boundary
    return None if bare is None else f"{NOTE_PREFIX}{bare.outcome}:{bare.detail}"


def _detail_of(found: dict[str, Any]) -> str:
    outcome = found["outcome"]
    if outcome == "refused":
        parts = [",".join(found.get("own_blocking_claim_ids") or ())]
        shown = {"outcome", "reason", "own_blocking_claim_ids"}
        parts += [
            f"{'others' if key == 'other_blocking_claims' else key}={value}"
            for key, value in found.items()
            if key not in shown
        ]
        return f"refused:{found.get('reason')}:{';'.join(parts)}"
    if outcome == "claim_rejected":
        return f"claim_rejected:{found.get('claim_id') or '-'}:{found.get('reason')}"
    subject = found.get("claim_id" if outcome.startswith("claim_") else "detail")
    return f"{outcome}:{subject}"


def quoted(text: str) -> str:
    """`text` safe inside a quoted header parameter."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", " ").replace("\n", " ")


OUTCOMES = (
    "claim_accepted",
    "claim_attached",
    "claim_released",
    "claim_demoted",
    "claim_extended",
    "claim_rejected",
    "refused",
    "load_failed",
)
"""The outcomes a response can name (the trace's words)."""

PROOF_FIELDS = (
    "protected_resident_blocks",
    "active_live_blocks_required",
    "resident_plus_active_blocks",
    "usable_blocks",
    "capacity_shortfall_blocks",
)

OPENAPI_SCHEMA: dict[str, Any] = {
    "title": "KvclaimsOutcome",
    "description": (
        "What happened to the request's claim operation (also in the x-kvclaims-claim header; "
        "on a stream, in the final chunk). A refusal is an HTTP 429 (capacity) or 503 whose body "
        "is {error, kvclaims}."
    ),
    "type": "object",
    "required": ["outcome"],
    "properties": {
        "outcome": {"type": "string", "enum": list(OUTCOMES)},
        "claim_id": {"type": ["string", "null"]},
        "reason": {"type": "string"},
        "detail": {"type": "string"},
        "own_blocking_claim_ids": {
            "type": "array",
            "items": {"type": "string"},
            "description": "the requesting owner's own claims that blocked it (at most 8)",
        },
        "other_blocking_claims": {"type": "integer", "description": "how many other claims blocked it"},
        **{name: {"type": "integer", "minimum": 0} for name in PROOF_FIELDS},
    },
}
"""The `kvclaims` object, as the OpenAPI component `/openapi.json` gains."""
