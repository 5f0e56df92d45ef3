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
header `x-kvclaims-claim: claim_rejected; subject="<reason>"` (OpenAI clients ignore unknown
headers); otherwise the engine's decision arrives in the choice's `stop_reason` and is moved
out on the way back (below; see docs/vllm-binding.md). A body larger than `MAX_BODY_BYTES`, or
one that is not a JSON object, passes through untouched (vLLM answers it; with
`typed_metadata` its claim is refused).

On the way back (`OutcomeResponse`), every completion and chat completion response, streamed
or not, whatever its finish reason, gets the engine's claim outcome (`outcome.parse_note`) out
of the choice's `stop_reason`: vLLM's own stop reason is put back, each choice and the response
gain a `kvclaims` object (the OpenAPI component `KvclaimsOutcome` that the server's
`/openapi.json` gains) and the header
`x-kvclaims-claim: <outcome>; subject="..."`. A stream's header is sent with its first event:
it names the outcome when that event already has it (a refusal), else `pending`; the final
chunk then carries the `kvclaims` object. A request the binding refused is answered with an
HTTP error instead (429 for capacity, 503 otherwise; `Retry-After` where a retry can help),
carrying the refusal's numbers. Claim keys at the top level of a body (outside `vllm_xargs`)
are refused with 400, naming them (vLLM would ignore them without a word), and so is a claim
operation with `n` or `best_of` above 1 (vLLM would run it once per choice).
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
from kvclaims.vllm_binding.outcome import (
    OPENAPI_SCHEMA,
    REFUSAL_STATUS,
    RETRY_AFTER_S,
    RETRYABLE,
    Outcome,
    parse_note,
    quoted,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = 64 << 20
"""Bodies up to this size are inspected; larger ones pass through unread."""

MIDDLEWARE = f"{__name__}.ClaimMetadataMiddleware"
"""What vLLM's `--middleware` names to install the boundary."""
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
        if scope["type"] == "http" and scope.get("method") == "GET" and scope.get("path") == "/openapi.json":
            await self.app(scope, receive, OpenApiWithOutcome(send))
            return
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body, unread, early = await _read_body(receive)
        problem = request_problem(body) if not unread and early is None else None
        if problem is not None:
            await _answer_json(send, 400, problem, [])
            return
        if str(scope.get("path", "")).endswith("completions"):
            send = OutcomeResponse(send)
        checked = checked_body(body) if not unread and early is None else None
        if checked is None:
            await self.app(scope, _replay(body, unread, early, receive), send)
            return
        body, rejection = checked
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        await self.app(scope, _replay(body, False, None, receive), _with_header(send, rejection))


def request_problem(body: bytes) -> dict[str, Any] | None:
    """The HTTP 400 error body for a request whose claim fields cannot mean one claim operation:
    claim keys at the top level (vLLM would ignore them), or a claim operation with several
    choices (`n` or `best_of` above 1: vLLM would run one operation per choice)."""
    if KEY_PREFIX.encode() not in body:
        return None
    document = _json_or_none(body)
    if not isinstance(document, dict):
        return None
    misplaced = sorted(k for k in document if isinstance(k, str) and k.startswith(KEY_PREFIX))
    if misplaced:
        where = f"claim keys go inside vllm_xargs, not at the top level of the body: {', '.join(misplaced)}"
        return _error(where, misplaced[0])
    xargs = document.get("vllm_xargs")
    claims = isinstance(xargs, dict) and any(isinstance(k, str) and k.startswith(KEY_PREFIX) for k in xargs)
    for name in ("n", "best_of"):
        value = document.get(name)
        if claims and isinstance(value, int) and value > 1:
            return _error(f"a claim operation goes with one choice per request; got {name}={value}", name)
    return None


def _error(message: str, param: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": 400}}


class OpenApiWithOutcome:
    """A `send` that adds the `KvclaimsOutcome` component to vLLM's OpenAPI document."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.start: Message | None = None
        self.chunks: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start" and message.get("status") == 200:
            self.start = message
            return
        if message["type"] != "http.response.body" or self.start is None:
            await self.send(message)
            return
        self.chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = b"".join(self.chunks)
        document = _json_or_none(body)
        if isinstance(document, dict):
            components = document.setdefault("components", {})
            components.setdefault("schemas", {})["KvclaimsOutcome"] = OPENAPI_SCHEMA
            body = json.dumps(document).encode()
        headers = _replaced(self.start.get("headers", []), b"content-length", str(len(body)).encode())
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})


class OutcomeResponse:
    """A `send` that moves the claim outcome out of `stop_reason` (see module docstring)."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.start: Message | None = None
        self.started = False
        self.streaming = False
        self.done = False
        self.passthrough = False
        self.chunks: list[bytes] = []
        self.pending = b""

    async def __call__(self, message: Message) -> None:
        if self.done:
            return
        if message["type"] == "http.response.start":
            self.start = message
            content_type = dict(message.get("headers", [])).get(b"content-type", b"")
            self.streaming = content_type.startswith(b"text/event-stream")
            self.passthrough = message.get("status") != 200
            if self.passthrough:
                await self._send_start(None)
            return
        if message["type"] != "http.response.body" or self.start is None or self.passthrough:
            await self.send(message)
        elif self.streaming:
            await self._stream(message)
        else:
            await self._whole(message)

    async def _send_start(self, claim: str | None, length: int | None = None) -> None:
        """Send the held start, with `claim` as its claim header (replacing the boundary's,
        which the engine's outcome includes) and the body's new length."""
        assert self.start is not None
        self.started = True
        headers = list(self.start.get("headers", []))
        if claim is not None:
            headers = _replaced(headers, CLAIM_HEADER, claim.encode("ascii", "replace"))
        if length is not None:
            headers = _replaced(headers, b"content-length", str(length).encode())
        await self.send({**self.start, "headers": headers})

    async def _whole(self, message: Message) -> None:
        self.chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = b"".join(self.chunks)
        document = _json_or_none(body)
        outcome = _rewrite(document) if isinstance(document, dict) else None
        if outcome is None:
            await self._send_start(None)
        elif _refused_all(document):
            self.done = True
            await _answer_refusal(self.send, outcome)
            return
        else:
            body = json.dumps(document).encode()
            await self._send_start(outcome.header(), len(body))
        await self.send({"type": "http.response.body", "body": body})

    async def _stream(self, message: Message) -> None:
        """Hold the start (and events that carry no token yet, such as a chat stream's role
        chunk) until an event shows whether the binding refused the request."""
        more = bool(message.get("more_body", False))
        self.pending += message.get("body", b"")
        if more:
            events, separator, self.pending = self.pending.rpartition(b"\n\n")
            events += separator
        else:
            events, self.pending = self.pending, b""
        rewritten, outcome, committed = _rewrite_events(events)
        if not self.started:
            if outcome is not None and outcome.outcome == "refused":
                self.done = True
                await _answer_refusal(self.send, outcome)
                return
            self.chunks.append(rewritten)
            if not (committed or not more):
                return
            rewritten, self.chunks = b"".join(self.chunks), []
            assert self.start is not None
            already = any(k.lower() == CLAIM_HEADER for k, _ in self.start.get("headers", []))
            claim = outcome.header() if outcome is not None else (None if already else "pending")
            await self._send_start(claim)
        if rewritten or not more:
            await self.send({"type": "http.response.body", "body": rewritten, "more_body": more})


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _replaced(headers: list[tuple[bytes, bytes]], name: bytes, value: bytes) -> list[tuple[bytes, bytes]]:
    """`headers` with `name` (any case) set to `value` alone."""
    return [(k, v) for k, v in headers if k.lower() != name] + [(name, value)]


def _rewrite(document: dict[str, Any]) -> Outcome | None:
    """Move each choice's claim note into its `kvclaims` object (vLLM's stop reason back in
    place); the response's own `kvclaims` is the first choice's. Returns that outcome."""
    first: Outcome | None = None
    for choice in document.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        outcome = parse_note(choice.get("stop_reason"))
        if outcome is None:
            continue
        choice["stop_reason"] = outcome.stop_reason
        choice["kvclaims"] = outcome.body()
        first = first or outcome
    if first is not None:
        document["kvclaims"] = first.body()
    return first


def _refused_all(document: dict[str, Any]) -> bool:
    choices = [c for c in document.get("choices") or [] if isinstance(c, dict)]
    return bool(choices) and all(c.get("kvclaims", {}).get("outcome") == "refused" for c in choices)


def _rewrite_events(events: bytes) -> tuple[bytes, Outcome | None, bool]:
    """Server-sent events with their claim notes moved (as `_rewrite`), the first outcome met,
    and whether any event carries a token or a finish (after which the status is settled)."""
    found: Outcome | None = None
    committed = False
    out: list[bytes] = []
    for event in events.split(b"\n\n"):
        document = _event_json(event)
        if isinstance(document, dict):
            outcome = _rewrite(document)
            committed = committed or _carries_output(document)
            if outcome is not None:
                found = found or outcome
                event = b"data: " + json.dumps(document).encode()
        out.append(event)
    return b"\n\n".join(out), found, committed


def _carries_output(document: dict[str, Any]) -> bool:
    for choice in document.get("choices") or []:
        if isinstance(choice, dict):
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            if choice.get("text") or choice.get("finish_reason") or delta.get("content"):
                return True
    return False


def _event_json(event: bytes) -> object:
    if not event.startswith(b"data: ") or event[6:].strip() == b"[DONE]":
        return None
    return _json_or_none(event[6:])


async def _answer_refusal(send: Send, outcome: Outcome) -> None:
    reason = outcome.refusal or "refused"
    status = REFUSAL_STATUS.get(reason, 503)
    extra = [(b"retry-after", str(RETRY_AFTER_S).encode())] if reason in RETRYABLE else []
    extra.append((CLAIM_HEADER, outcome.header().encode("ascii", "replace")))
    message = f"kvclaims refused the request ({reason}): resident claims leave no room for it"
    error = {"message": message, "type": "kvclaims_refused", "param": None, "code": status}
    await _answer_json(send, status, {"error": error, "kvclaims": outcome.body()}, extra)


async def _answer_json(
    send: Send, status: int, document: dict[str, Any], extra: list[tuple[bytes, bytes]]
) -> None:
    body = json.dumps(document).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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
    value = f'claim_rejected; subject="{quoted(rejection)}"'.encode("ascii", "replace")

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (CLAIM_HEADER, value)]}
        await send(message)

    return sending
