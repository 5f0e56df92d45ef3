"""Per-request claim metadata: flat `kvclaims_*` keys, parsed fail-closed and total.

Claims travel with requests, never in process-wide settings: offline in
`SamplingParams.extra_args`, over HTTP in the request's `vllm_xargs` (which vLLM restricts to
flat scalars and lists, hence flat keys). Every value here is client-controlled, so
`parse_claim_metadata` is a total function: any input (wrong types, unknown keys or modes,
negative or astronomically large numbers, a megabyte of claim id) yields either a
`ClaimRequest` or a `MetadataRejection` whose reason never echoes unbounded input. The request
itself is always served; only the claim operation is refused.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from pydantic import ValidationError

from kvclaims.spec.claims import CacheIdentity, ResidentClaimInput
from kvclaims.spec.tables import MAX_IDENTIFIER_LENGTH
from kvclaims.spec.vocabulary import ProtectionMode

KEY_PREFIX = "kvclaims_"

NOTE_PREFIX = "kvclaims:"
"""Stop reasons the binding writes start with this: `kvclaims:refused:...`,
`kvclaims:claim_<accepted|attached|released|demoted>:<claim id>` and
`kvclaims:claim_rejected:<claim id or ->:<reason>` (what a client reads back)."""

RAW_TYPES_KEY = "kvclaims_raw_types"
"""The marker the HTTP boundary adds after checking the claim fields' raw JSON types (vLLM's
request model coerces JSON `true` to `1` before the binding sees it)."""

RAW_TYPES_OK = "ok"

INTEGER_KEYS: tuple[str, ...] = (
    "kvclaims_footprint_blocks",
    "kvclaims_predicate_blocks",
    "kvclaims_predicate_tokens",
    "kvclaims_duration_steps",
    "kvclaims_duration_ms",
    "kvclaims_max_duration_steps",
    "kvclaims_max_duration_ms",
    "kvclaims_checkpoint_boundary_blocks",
)
"""Claim fields that must be JSON integers (never booleans, floats or strings)."""

BOOLEAN_KEYS: tuple[str, ...] = ("kvclaims_refresh_on_hit",)
"""Claim fields that must be JSON booleans (never 0/1 or strings)."""

STRING_KEYS: tuple[str, ...] = (
    "kvclaims_op",
    "kvclaims_claim_id",
    "kvclaims_mode",
    "kvclaims_object_id",
    "kvclaims_owner",
    "kvclaims_owner_token",
)
"""Claim fields that must be JSON strings."""

MAX_RAW_TYPES_REASON = 200
"""Longest reason the boundary's marker may carry into a rejection."""

MAX_CLAIM_NUMBER = 2**31 - 1
"""Bound on every numeric claim field before any arithmetic: larger is rejected outright."""


class ClaimOp(StrEnum):
    """What a request asks of a claim. `submit` creates one from the request's own prompt
    prefix; `attach` declares the request a reuser of an existing claim of the same owner;
    `release` / `demote` end or relax the owner's claim; `extend` lengthens its term
    (`kvclaims_duration_steps` / `kvclaims_duration_ms` from now, extend-only, within its cap)."""

    submit = "submit"
    attach = "attach"
    release = "release"
    demote = "demote"
    extend = "extend"


KEYS: Mapping[str, str] = MappingProxyType(
    {
        "kvclaims_op": "submit | attach | release | demote | extend (default: submit when claim "
        "terms are given, else attach)",
        "kvclaims_claim_id": "the claim's identifier (required)",
        "kvclaims_mode": "protection mode of a submitted claim",
        "kvclaims_footprint_blocks": "leading prompt blocks the claim protects",
        "kvclaims_predicate_blocks": "leading_prefix_at_least(k) in blocks (default: footprint)",
        "kvclaims_predicate_tokens": "leading_prefix_at_least(k) in tokens",
        "kvclaims_checkpoint_boundary_blocks": "hybrid_two_key(B): the boundary B in blocks "
        "(hybrid models: KV prefix and recurrent-state checkpoint)",
        "kvclaims_duration_steps": "engine steps after acceptance at which the claim expires",
        "kvclaims_duration_ms": "milliseconds after acceptance (judged on t_ns) after which the "
        "claim expires; not together with kvclaims_duration_steps",
        "kvclaims_refresh_on_hit": "JSON boolean: a satisfied reuse restarts the duration clock",
        "kvclaims_max_duration_steps": "cap on the claim's protected life, in engine steps from "
        "acceptance: a refreshing hit never promises past it (needs kvclaims_duration_steps)",
        "kvclaims_max_duration_ms": "cap on the claim's protected life, in ms from acceptance: a "
        "refreshing hit never promises past it (needs kvclaims_duration_ms)",
        "kvclaims_object_id": "the reusable prefix object's id (default: the claim id)",
        "kvclaims_owner": "owner scope (trust: see docs/vllm-binding.md)",
        "kvclaims_owner_token": "hex HMAC-SHA256 of the owner, when the engine requires one",
        RAW_TYPES_KEY: "set by the HTTP boundary (`http.ClaimMetadataMiddleware`), never by "
        "clients: `ok`, or why the raw JSON types of the claim fields are wrong",
    }
)
"""Every key the binding reads. Any other `kvclaims_*` key rejects the claim operation."""

_TERM_KEYS = frozenset(
    {
        "kvclaims_mode",
        "kvclaims_footprint_blocks",
        "kvclaims_predicate_blocks",
        "kvclaims_predicate_tokens",
        "kvclaims_checkpoint_boundary_blocks",
        "kvclaims_duration_steps",
        "kvclaims_duration_ms",
        "kvclaims_refresh_on_hit",
        "kvclaims_max_duration_steps",
        "kvclaims_max_duration_ms",
        "kvclaims_object_id",
    }
)


_EXTENSION_KEYS = ("kvclaims_duration_steps", "kvclaims_duration_ms")
"""The only terms `kvclaims_op: extend` takes: the duration it grants, from now."""


@dataclass(frozen=True)
class ClaimRequest:
    """A well-typed claim operation; owner and terms are checked later against the engine."""

    op: ClaimOp
    claim_id: str
    owner: str | None = None
    owner_token: str | None = None
    mode: ProtectionMode | None = None
    footprint_blocks: int | None = None
    predicate_blocks: int | None = None
    predicate_tokens: int | None = None
    checkpoint_boundary_blocks: int | None = None
    duration_steps: int | None = None
    duration_ms: int | None = None
    refresh_on_hit: bool = False
    max_duration_steps: int | None = None
    max_duration_ms: int | None = None
    object_id: str | None = None


@dataclass(frozen=True)
class MetadataRejection:
    """Why a claim operation was refused. `claim_id` is set only when the request named a
    usable identifier (a string of bounded length), so traces never carry hostile ids."""

    reason: str
    claim_id: str | None = None


def shown(value: object, limit: int = 48) -> str:
    """A bounded, printable rendering of client input for reasons and logs."""
    if isinstance(value, str):
        text = value if len(value) <= limit else f"{value[:limit]}... ({len(value)} characters)"
        return repr(text)
    name = type(value).__name__
    if isinstance(value, (bool, int, float)) and len(repr(value)) <= limit:
        return f"{name} {value!r}"
    return name


def usable_identifier(value: object) -> str | None:
    """`value` if it is a non-empty string within MAX_IDENTIFIER_LENGTH, else None."""
    if isinstance(value, str) and 0 < len(value) <= MAX_IDENTIFIER_LENGTH:
        return value
    return None


def raw_type_problem(xargs: Mapping[str, object]) -> str | None:
    """Why the raw JSON of a request's claim fields has the wrong types (checked before vLLM's
    coercions: a JSON boolean must never become a 1-block footprint), or None. `xargs` is the
    request's `vllm_xargs` object exactly as decoded from the client's JSON."""
    for key in sorted(k for k in xargs if k.startswith(KEY_PREFIX)):
        value = xargs[key]
        if key in INTEGER_KEYS and type(value) is not int:
            return f"{key} must be a JSON integer, got {_json_type(value)}"
        if key in STRING_KEYS and not isinstance(value, str):
            return f"{key} must be a JSON string, got {_json_type(value)}"
        if key in BOOLEAN_KEYS and not isinstance(value, bool):
            return f"{key} must be a JSON boolean, got {_json_type(value)}"
    return None


def _json_type(value: object) -> str:
    """`JSON boolean true`, `JSON number 4.0`, `JSON string '4'`, `JSON array`, ... (bounded)."""
    if value is None:
        return "JSON null"
    if isinstance(value, bool):
        return f"JSON boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"JSON string {shown(value)}"
    if isinstance(value, (int, float)):
        return f"JSON number {shown(value).split(' ', 1)[1]}"
    return "JSON array" if isinstance(value, list) else "JSON object"


def parse_claim_metadata(
    extra_args: object, *, typed: bool = False
) -> ClaimRequest | MetadataRejection | None:
    """The claim operation a request carries; None when it carries none (no `kvclaims_*` key).

    With `typed`, the claim fields must carry the HTTP boundary's raw-type marker
    (`RAW_TYPES_KEY`): values whose original JSON type nobody checked are refused."""
    if not isinstance(extra_args, Mapping):
        return None
    keys = [k for k in extra_args if isinstance(k, str) and k.startswith(KEY_PREFIX)]
    if not keys:
        return None
    claim_id_value = extra_args.get("kvclaims_claim_id")
    claim_id = usable_identifier(claim_id_value)

    def reject(reason: str) -> MetadataRejection:
        return MetadataRejection(reason=reason, claim_id=claim_id)

    raw_types = extra_args.get(RAW_TYPES_KEY)
    if raw_types is None and typed:
        return reject("claim metadata did not pass the HTTP boundary's JSON type check")
    if raw_types is not None and raw_types != RAW_TYPES_OK:
        text = raw_types if isinstance(raw_types, str) else "malformed marker"
        return reject(text[:MAX_RAW_TYPES_REASON])
    unknown = sorted(k for k in keys if k not in KEYS)
    if unknown:
        return reject(f"unknown claim metadata key {shown(unknown[0])}")
    if claim_id is None:
        if "kvclaims_claim_id" not in extra_args:
            return reject("kvclaims_claim_id is required")
        return reject(
            f"kvclaims_claim_id must be a string of 1..{MAX_IDENTIFIER_LENGTH} characters, "
            f"got {shown(claim_id_value)}"
        )

    fields: dict[str, object] = {}
    for key in ("kvclaims_owner", "kvclaims_owner_token", "kvclaims_object_id"):
        if key in extra_args:
            value = extra_args[key]
            if usable_identifier(value) is None:
                return reject(
                    f"{key} must be a string of 1..{MAX_IDENTIFIER_LENGTH} characters, got {shown(value)}"
                )
            fields[key.removeprefix(KEY_PREFIX)] = value
    for key in INTEGER_KEYS:
        if key in extra_args:
            value = extra_args[key]
            if type(value) is not int:
                return reject(f"{key} must be an integer, got {shown(value)}")
            if not 1 <= value <= MAX_CLAIM_NUMBER:
                return reject(f"{key} must be in 1..{MAX_CLAIM_NUMBER}, got {shown(value)}")
            fields[key.removeprefix(KEY_PREFIX)] = value
    for key in BOOLEAN_KEYS:
        if key in extra_args:
            value = extra_args[key]
            # vLLM's request model turns a JSON boolean into 1/0; only the boundary's marker
            # says the client really sent a boolean.
            checked = raw_types == RAW_TYPES_OK and type(value) is int and value in (0, 1)
            if type(value) is not bool and not checked:
                return reject(f"{key} must be a boolean, got {shown(value)}")
            fields[key.removeprefix(KEY_PREFIX)] = bool(value)
    if "kvclaims_mode" in extra_args:
        value = extra_args["kvclaims_mode"]
        if not isinstance(value, str) or value not in ProtectionMode.__members__:
            return reject(f"unknown protection mode {shown(value)}")
        fields["mode"] = ProtectionMode(value)

    has_terms = any(k in extra_args for k in _TERM_KEYS)
    op_value = extra_args.get("kvclaims_op", ClaimOp.submit.value if has_terms else ClaimOp.attach.value)
    if not isinstance(op_value, str) or op_value not in ClaimOp.__members__:
        return reject(f"unknown kvclaims_op {shown(op_value)}")
    op = ClaimOp(op_value)
    if op is ClaimOp.extend:
        given = sorted(k for k in _TERM_KEYS if k in extra_args)
        other = [k for k in given if k not in _EXTENSION_KEYS]
        if other:
            return reject(f"kvclaims_op extend takes only {' / '.join(_EXTENSION_KEYS)}, not {other[0]}")
        if not given:
            return reject(f"kvclaims_op extend needs {' or '.join(_EXTENSION_KEYS)}: the term it grants")
    elif op is not ClaimOp.submit and has_terms:
        return reject(f"kvclaims_op {op} takes no claim terms")
    if op is ClaimOp.submit:
        if "mode" not in fields:
            return reject("a submitted claim needs kvclaims_mode")
        if "footprint_blocks" not in fields:
            return reject("a submitted claim needs kvclaims_footprint_blocks")
        predicates = [
            k for k in ("predicate_blocks", "predicate_tokens", "checkpoint_boundary_blocks") if k in fields
        ]
        if len(predicates) > 1:
            return reject(
                f"give one predicate, not both kvclaims_{predicates[0]} and kvclaims_{predicates[1]}"
            )
    return ClaimRequest(op=op, claim_id=claim_id, **fields)  # type: ignore[arg-type]


def owner_of(request: ClaimRequest, *, default_owner: str, hmac_key: str | None) -> str | MetadataRejection:
    """The authenticated owner scope of a claim operation.

    Without a key the owner field is taken as given (the deployment must make it trustworthy,
    e.g. a gateway that overwrites it); with a key the request must carry the owner's HMAC.
    """
    if hmac_key is None:
        return request.owner if request.owner is not None else default_owner
    if request.owner is None or request.owner_token is None:
        return MetadataRejection(
            "this engine requires kvclaims_owner and kvclaims_owner_token", request.claim_id
        )
    if not hmac.compare_digest(owner_token(hmac_key, request.owner), request.owner_token):
        return MetadataRejection(
            "kvclaims_owner_token does not authenticate kvclaims_owner", request.claim_id
        )
    return request.owner


def owner_token(hmac_key: str, owner: str) -> str:
    """The token an authentication layer mints for `owner` (hex HMAC-SHA256)."""
    return hmac.new(hmac_key.encode(), owner.encode(), hashlib.sha256).hexdigest()


def claim_input(
    request: ClaimRequest, *, owner: str, cache_identity: CacheIdentity
) -> ResidentClaimInput | MetadataRejection:
    """The spec-validated `ResidentClaimInput` of a submission (`op` must be submit)."""
    predicate: dict[str, object]
    if request.checkpoint_boundary_blocks is not None:
        predicate = {"kind": "hybrid_two_key", "boundary_blocks": request.checkpoint_boundary_blocks}
    elif request.predicate_tokens is not None:
        predicate = {"kind": "leading_prefix_at_least", "tokens": request.predicate_tokens}
    else:
        predicate = {
            "kind": "leading_prefix_at_least",
            "blocks": request.predicate_blocks or request.footprint_blocks,
        }
    try:
        claim = ResidentClaimInput.model_validate(
            {
                "claim_id": request.claim_id,
                "owner_scope": owner,
                "cache_identity": cache_identity,
                "object_id": request.object_id or request.claim_id,
                "materialization_predicate": predicate,
                "footprint_blocks": request.footprint_blocks,
                "protection_mode": request.mode,
                "duration_steps": request.duration_steps,
                "duration_ms": request.duration_ms,
                "refresh_on_hit": request.refresh_on_hit,
                "max_duration_steps": request.max_duration_steps,
                "max_duration_ms": request.max_duration_ms,
            }
        )
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "claim"
        return MetadataRejection(f"invalid claim terms: {where}: {first['msg']}", request.claim_id)
    return claim
