"""The HTTP boundary: claim fields typed from the raw request JSON, before vLLM coerces them.

vLLM's OpenAI request models declare `vllm_xargs` as `dict[str, str | int | float | list]`, and
pydantic's union turns a JSON `true` into `1` before the engine sees it: a boolean footprint
would become a real one-block claim. `ClaimMetadataMiddleware` (an ASGI middleware, loaded with
vLLM's own `--middleware kvclaims.vllm_binding.http.ClaimMetadataMiddleware`; `kvclaims serve`
adds it) reads the raw body of every POST that carries `kvclaims_*` fields in `vllm_xargs`,
checks their JSON types (`metadata.raw_type_problem`), and writes its finding into the same
`vllm_xargs` as `kvclaims_raw_types` (`ok`, or the reason), replacing anything a client sent
there. The binding rejects a claim operation whose marker is not `ok` with that reason, and,
with `BindingConfig.typed_metadata`, one without a marker (a request that bypassed this
boundary). Duplicate keys inside `vllm_xargs` are a type problem too (which one would count?).

When the boundary already knows the claim operation is rejected, the response carries the
header `x-kvclaims-claim: rejected; reason="..."` (OpenAI clients ignore unknown headers);
otherwise the engine's decision reaches the caller in the choice's `stop_reason` (see
docs/vllm-binding.md). A body larger than `MAX_BODY_BYTES`, or one that is not a JSON object,
passes through untouched (vLLM answers it; with `typed_metadata` its claim is refused).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from kvclaims.vllm_binding.metadata import (
    KEY_PREFIX,
    RAW_TYPES_KEY,
    RAW_TYPES_OK,
    MetadataRejection,
    parse_claim_metadata,
    raw_type_problem,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = 64 << 20
"""Bodies up to this size are inspected; larger ones pass through unread."""

CLAIM_HEADER = b"x-kvclaims-claim"
"""Response header naming a claim operation the boundary rejected."""


class _Duplicate(Exception):
    """A key appears twice in one JSON object of `vllm_xargs`."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found and key.startswith(KEY_PREFIX):
            raise _Duplicate(key)
        found[key] = value
    return found


def checked_body(body: bytes) -> tuple[bytes, str | None] | None:
    """The body with its claim fields' raw-type marker set, and the boundary's rejection
    reason if the claim operation is already known to be rejected; None when the body carries
    no claim fields (or is not a JSON object) and passes through unchanged."""
    if KEY_PREFIX.encode() not in body:
        return None
    try:
        document = json.loads(body, object_pairs_hook=_pairs)
        problem = None
    except _Duplicate as duplicate:
        document = json.loads(body)
        problem = f"duplicate key {duplicate.args[0]!r} in vllm_xargs"
    except ValueError:
        return None
    xargs = document.get("vllm_xargs") if isinstance(document, dict) else None
    if not isinstance(xargs, dict) or not any(isinstance(k, str) and k.startswith(KEY_PREFIX) for k in xargs):
        return None
    xargs.pop(RAW_TYPES_KEY, None)
    problem = problem or raw_type_problem(xargs)
    xargs[RAW_TYPES_KEY] = problem or RAW_TYPES_OK
    parsed = parse_claim_metadata(xargs)
    rejection = parsed.reason if isinstance(parsed, MetadataRejection) else None
    return json.dumps(document).encode(), rejection


class ClaimMetadataMiddleware:
    """ASGI middleware: type-check claim fields on the raw body (see module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body, unread, early = await _read_body(receive)
        checked = checked_body(body) if not unread and early is None else None
        if checked is None:
            await self.app(scope, _replay(body, unread, early, receive), send)
            return
        body, rejection = checked
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        await self.app(scope, _replay(body, False, None, receive), _with_header(send, rejection))


async def _read_body(receive: Receive) -> tuple[bytes, bool, Message | None]:
    """The request body read so far (up to the cap), whether more of it is still unread, and
    a non-body message that arrived instead (a disconnect), to be replayed."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False, message
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = bool(message.get("more_body", False))
        if not more or size > MAX_BODY_BYTES:
            return b"".join(chunks), more, None


def _replay(body: bytes, unread: bool, early: Message | None, receive: Receive) -> Receive:
    """A `receive` that yields what was read (once, then `early` if any), then defers to the
    real one."""
    pending: list[Message] = [
        {"type": "http.request", "body": body, "more_body": unread or early is not None}
    ]
    if early is not None:
        pending.append(early)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


def _with_header(send: Send, rejection: str | None) -> Send:
    if rejection is None:
        return send
    value = f'rejected; reason="{_quoted(rejection)}"'.encode("ascii", "replace")

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (CLAIM_HEADER, value)]}
        await send(message)

    return sending


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", " ").replace("\n", " ")
