"""The HTTP boundary: claim fields typed from the raw JSON body before vLLM coerces them
(an ASGI app stands in for vLLM's server; vLLM's own coercion is covered by test_server)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kvclaims.vllm_binding.http import CLAIM_HEADER, ClaimMetadataMiddleware, checked_body
from kvclaims.vllm_binding.metadata import RAW_TYPES_KEY, parse_claim_metadata


class App:
    """Records the body and headers it was given and answers 200."""

    def __init__(self) -> None:
        self.body = b""
        self.headers: list[tuple[bytes, bytes]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.headers = list(scope["headers"])
        while True:
            message = await receive()
            self.body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"x")]})
        await send({"type": "http.response.body", "body": b"ok"})


def post(body: bytes, chunks: int = 1) -> tuple[App, list[dict[str, Any]]]:
    app, sent = App(), []
    size = max(1, len(body) // chunks)
    parts = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    messages = [
        {"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)
    ]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/completions",
        "headers": [(b"content-length", b"1")],
    }
    asyncio.run(ClaimMetadataMiddleware(app)(scope, receive, send))
    return app, sent


def request(xargs: dict[str, Any]) -> bytes:
    return json.dumps({"model": "m", "prompt": [1, 2], "vllm_xargs": xargs}).encode()


def xargs_seen(app: App) -> dict[str, Any]:
    return json.loads(app.body)["vllm_xargs"]


def claim_header(sent: list[dict[str, Any]]) -> bytes | None:
    return dict(sent[0]["headers"]).get(CLAIM_HEADER)


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("kvclaims_footprint_blocks", True, "JSON boolean true"),
        ("kvclaims_footprint_blocks", 4.0, "JSON number 4.0"),
        ("kvclaims_footprint_blocks", "4", "JSON string '4'"),
        ("kvclaims_duration_steps", False, "JSON boolean false"),
        ("kvclaims_claim_id", 7, "JSON number 7"),
        ("kvclaims_mode", ["hard_protected"], "JSON array"),
    ],
)
def test_a_wrong_raw_type_is_marked_and_the_binding_rejects_it(field: str, value: Any, why: str) -> None:
    xargs = {"kvclaims_claim_id": "c", "kvclaims_mode": "hard_protected", "kvclaims_footprint_blocks": 2}
    app, sent = post(
        request(
            xargs | {field: value},
        ),
        chunks=3,
    )
    seen = xargs_seen(app)
    assert seen[RAW_TYPES_KEY].endswith(why)
    # what vLLM would make of it (true -> 1) no longer matters: the marker decides
    coerced = seen | {field: 1}
    verdict = parse_claim_metadata(coerced, typed=True)
    assert verdict is not None and not hasattr(verdict, "op") and why in verdict.reason
    assert claim_header(sent) is not None and why.encode() in claim_header(sent)
    assert dict(app.headers)[b"content-length"] == str(len(app.body)).encode()


def test_well_typed_fields_pass_with_an_ok_marker_and_no_header() -> None:
    xargs = {"kvclaims_claim_id": "c", "kvclaims_mode": "hard_protected", "kvclaims_footprint_blocks": 2}
    app, sent = post(request(xargs))
    assert xargs_seen(app) == xargs | {RAW_TYPES_KEY: "ok"}
    assert parse_claim_metadata(xargs_seen(app), typed=True).footprint_blocks == 2  # type: ignore[union-attr]
    assert claim_header(sent) is None


def test_a_client_cannot_forge_the_marker() -> None:
    forged = {"kvclaims_claim_id": "c", "kvclaims_mode": "hard_protected", "kvclaims_footprint_blocks": True}
    app, _ = post(request(forged | {RAW_TYPES_KEY: "ok"}))
    assert xargs_seen(app)[RAW_TYPES_KEY] != "ok"


def test_duplicate_claim_keys_are_a_type_problem() -> None:
    body = (
        b'{"model":"m","vllm_xargs":{"kvclaims_claim_id":"c","kvclaims_footprint_blocks":true,'
        b'"kvclaims_footprint_blocks":4,"kvclaims_mode":"hard_protected"}}'
    )
    app, sent = post(body)
    assert "duplicate key 'kvclaims_footprint_blocks'" in xargs_seen(app)[RAW_TYPES_KEY]
    assert claim_header(sent) is not None


def test_parse_level_rejections_reach_the_header_too() -> None:
    _, sent = post(
        request({"kvclaims_claim_id": "c", "kvclaims_mode": "telepathic", "kvclaims_footprint_blocks": 2})
    )
    assert claim_header(sent) == b"claim_rejected; subject=\"unknown protection mode 'telepathic'\""


@pytest.mark.parametrize(
    "body",
    [b'{"model":"m","prompt":"kvclaims_x"}', b"not json kvclaims_", b'["kvclaims_"]', b'{"model":"m"}'],
)
def test_bodies_without_claim_fields_pass_through_unchanged(body: bytes) -> None:
    app, sent = post(body, chunks=2)
    assert app.body == body and claim_header(sent) is None
    assert checked_body(body) is None


def test_an_oversized_body_passes_through_unread_and_a_typed_engine_refuses_its_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("kvclaims.vllm_binding.http.MAX_BODY_BYTES", 1024)
    filler = "x" * 4096
    body = request({"kvclaims_claim_id": "c", "kvclaims_op": "release", "pad": filler})
    app, _ = post(body, chunks=8)
    assert app.body == body
    verdict = parse_claim_metadata({"kvclaims_claim_id": "c", "kvclaims_op": "release"}, typed=True)
    assert "did not pass the HTTP boundary" in verdict.reason  # type: ignore[union-attr]


def test_get_requests_and_other_scopes_are_not_touched() -> None:
    app = App()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"kvclaims_", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        del message

    scope = {"type": "http", "method": "GET", "path": "/health", "headers": []}
    asyncio.run(ClaimMetadataMiddleware(app)(scope, receive, send))
    assert app.body == b"kvclaims_"
