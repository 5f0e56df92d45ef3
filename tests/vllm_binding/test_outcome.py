"""The claim outcome on every response: the engine's note (`outcome`), moved by the HTTP
boundary into a header and a `kvclaims` body field, a refusal turned into 429/503 (an ASGI app
stands in for vLLM's server, answering what vLLM answers; the live server is test_server_outcome)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from kvclaims.spec.capacity import CapacityProof
from kvclaims.vllm_binding.http import CLAIM_HEADER, ClaimMetadataMiddleware
from kvclaims.vllm_binding.outcome import note_with_stop, parse_note, refusal_note, response_note

SEP = "\x1f"


class Answering:
    """Answers every request with `parts` (bytes, sent one message each) under `content_type`."""

    def __init__(self, parts: list[bytes], content_type: bytes) -> None:
        self.parts, self.content_type = parts, content_type

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", self.content_type)]}
        )
        for index, part in enumerate(self.parts):
            await send({"type": "http.response.body", "body": part, "more_body": index < len(self.parts) - 1})


@dataclass
class Reply:
    status: int
    headers: dict[bytes, bytes]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[Any]:
        found = []
        for event in self.body.split(b"\n\n"):
            if event.startswith(b"data: ") and event != b"data: [DONE]":
                found.append(json.loads(event[6:]))
        return found


def call(app: Answering, body: dict[str, Any], path: str = "/v1/completions") -> Reply:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": []}
    asyncio.run(ClaimMetadataMiddleware(app)(scope, receive, send))
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert len(starts) == 1
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Reply(starts[0]["status"], dict(starts[0]["headers"]), body)


CLAIM = {"kvclaims_claim_id": "t:sys", "kvclaims_mode": "hard_protected", "kvclaims_footprint_blocks": 2}
REQUEST = {"model": "m", "prompt": [1, 2], "vllm_xargs": CLAIM}
REFUSAL = (
    "kvclaims:refused:capacity:t:sys;others=2;protected_resident_blocks=8;active_live_blocks_required=21;"
    "resident_plus_active_blocks=29;usable_blocks=23;capacity_shortfall_blocks=6"
)


def completion(stop_reason: Any, finish_reason: str = "stop", text: str = "ab") -> bytes:
    choice = {"index": 0, "text": text, "finish_reason": finish_reason, "stop_reason": stop_reason}
    return json.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [choice]}).encode()


def test_a_claim_that_ends_on_a_stop_token_reports_its_outcome_and_keeps_the_token() -> None:
    reply = call(
        Answering([completion("kvclaims:claim_accepted:t:sys" + SEP + "7")], b"application/json"), REQUEST
    )
    assert reply.status == 200
    choice = reply.json()["choices"][0]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", 7)
    assert choice["kvclaims"] == {"outcome": "claim_accepted", "claim_id": "t:sys"}
    assert reply.json()["kvclaims"] == {"outcome": "claim_accepted", "claim_id": "t:sys"}
    assert reply.headers[CLAIM_HEADER] == b'claim_accepted; subject="t:sys"'
    assert reply.headers[b"content-length"] == str(len(reply.body)).encode()


def test_a_stop_string_and_a_length_finish_alike() -> None:
    stop = call(
        Answering([completion('kvclaims:claim_released:t:sys\x1f"END"')], b"application/json"), REQUEST
    )
    assert stop.json()["choices"][0]["stop_reason"] == "END"
    length = call(
        Answering([completion("kvclaims:claim_attached:t:sys", "length")], b"application/json"), REQUEST
    )
    assert length.json()["choices"][0]["stop_reason"] is None
    assert length.headers[CLAIM_HEADER] == b'claim_attached; subject="t:sys"'


def test_a_rejection_reads_with_its_reason() -> None:
    note = "kvclaims:claim_rejected:-:kvclaims_claim_id is required"
    reply = call(Answering([completion(note, "length")], b"application/json"), REQUEST)
    assert reply.json()["kvclaims"] == {
        "outcome": "claim_rejected",
        "claim_id": None,
        "reason": "kvclaims_claim_id is required",
    }


def test_a_capacity_refusal_is_a_429_with_retry_after_and_the_proofs_numbers() -> None:
    reply = call(Answering([completion(REFUSAL, "abort", "")], b"application/json"), REQUEST)
    assert reply.status == 429
    assert reply.headers[b"retry-after"] == b"1"
    document = reply.json()
    assert document["error"]["type"] == "kvclaims_refused"
    assert document["kvclaims"] == {
        "outcome": "refused",
        "reason": "capacity",
        "own_blocking_claim_ids": ["t:sys"],
        "other_blocking_claims": 2,
        "protected_resident_blocks": 8,
        "active_live_blocks_required": 21,
        "resident_plus_active_blocks": 29,
        "usable_blocks": 23,
        "capacity_shortfall_blocks": 6,
    }


def test_a_restoration_failure_is_a_503() -> None:
    reply = call(
        Answering(
            [completion("kvclaims:refused:restoration_failed:t:sys", "abort", "")], b"application/json"
        ),
        REQUEST,
    )
    assert (reply.status, reply.headers[b"retry-after"]) == (503, b"1")


def sse(*documents: dict[str, Any]) -> list[bytes]:
    return [b"data: " + json.dumps(d).encode() + b"\n\n" for d in documents] + [b"data: [DONE]\n\n"]


def chunk(**choice: Any) -> dict[str, Any]:
    return {"id": "chat-1", "object": "chat.completion.chunk", "choices": [{"index": 0, **choice}]}


def test_a_stream_carries_the_outcome_in_its_final_chunk() -> None:
    parts = sse(
        chunk(delta={"role": "assistant", "content": ""}, finish_reason=None),
        chunk(delta={"content": "a"}, finish_reason=None),
        chunk(
            delta={"content": "b"},
            finish_reason="stop",
            stop_reason="kvclaims:claim_accepted:t:sys" + SEP + "2",
        ),
    )
    reply = call(Answering(parts, b"text/event-stream"), REQUEST, "/v1/chat/completions")
    assert (reply.status, reply.headers[CLAIM_HEADER]) == (200, b"pending")
    events = reply.events()
    assert [e["choices"][0]["delta"].get("content") for e in events] == ["", "a", "b"]
    assert events[-1]["choices"][0]["stop_reason"] == 2
    assert events[-1]["kvclaims"] == {"outcome": "claim_accepted", "claim_id": "t:sys"}
    assert reply.body.endswith(b"data: [DONE]\n\n")


def test_a_refused_stream_is_a_429_even_after_its_role_chunk() -> None:
    parts = sse(
        chunk(delta={"role": "assistant", "content": ""}, finish_reason=None),
        chunk(delta={"content": ""}, finish_reason="abort", stop_reason=REFUSAL),
    )
    reply = call(Answering(parts, b"text/event-stream"), REQUEST, "/v1/chat/completions")
    assert reply.status == 429
    assert reply.json()["kvclaims"]["own_blocking_claim_ids"] == ["t:sys"]


def test_claim_keys_outside_vllm_xargs_are_refused_by_name() -> None:
    reply = call(Answering([completion(None)], b"application/json"), {"model": "m", "kvclaims_claim_id": "x"})
    assert reply.status == 400
    assert "kvclaims_claim_id" in reply.json()["error"]["message"]
    assert "vllm_xargs" in reply.json()["error"]["message"]


@dataclass
class Held:
    claim_id: str
    claim: Any


@dataclass
class Scope:
    owner_scope: str


def test_a_refusal_names_only_the_requesting_owners_claims() -> None:
    blocking = [Held("a:1", Scope("a")), Held("b:secret", Scope("b")), Held("a:2", Scope("a"))]
    note = refusal_note(blocking, "a", CapacityProof(8, 21, 23))
    assert "b:secret" not in note
    assert note.startswith("kvclaims:refused:capacity:a:1,a:2;others=1;protected_resident_blocks=8;")
    anonymous = refusal_note(blocking, None, CapacityProof(8, 21, 23))
    assert anonymous.startswith("kvclaims:refused:capacity:;others=3;")


def test_a_note_round_trips_vllms_own_stop_reason() -> None:
    for stop in (None, 0, 7, "END", "a\x1fb"):
        parsed = parse_note(note_with_stop("kvclaims:claim_accepted:c", stop))
        assert parsed is not None and parsed.stop_reason == stop and parsed.outcome == "claim_accepted"
    assert parse_note(7) is None and parse_note("END") is None


def test_openapi_gains_the_outcome_component_and_every_outcome_fits_it() -> None:
    import jsonschema

    from kvclaims.vllm_binding.outcome import OPENAPI_SCHEMA

    document = {"openapi": "3.1.0", "paths": {}}
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": json.dumps(document).encode()})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "method": "GET", "path": "/openapi.json", "headers": []}
    asyncio.run(ClaimMetadataMiddleware(app)(scope, receive, send))
    served = json.loads(sent[1]["body"])
    assert (
        served["components"]["schemas"]["KvclaimsOutcome"]["properties"]["outcome"]["enum"][0]
        == "claim_accepted"
    )
    notes = [
        REFUSAL,
        "kvclaims:claim_accepted:c",
        "kvclaims:claim_rejected:-:why",
        "kvclaims:load_failed:3 attempts",
    ]
    for note in notes:
        parsed = parse_note(note)
        assert parsed is not None
        jsonschema.validate(parsed.body(), OPENAPI_SCHEMA)


def test_a_claim_operation_with_several_choices_is_refused_before_vllm_runs_it_twice() -> None:
    for name in ("n", "best_of"):
        reply = call(Answering([completion(None)], b"application/json"), REQUEST | {name: 2})
        assert reply.status == 400 and f"{name}=2" in reply.json()["error"]["message"]
    plain = call(Answering([completion(None)], b"application/json"), {"model": "m", "prompt": [1], "n": 2})
    assert plain.status == 200


NOTES = (
    "kvclaims:claim_accepted:t:sys",
    "kvclaims:claim_attached:t:a:b",
    "kvclaims:claim_released:t:sys",
    "kvclaims:claim_demoted:t:sys",
    "kvclaims:claim_rejected:-:kvclaims_claim_id is required",
    "kvclaims:claim_rejected:t:sys:attach: no such live claim",
    "kvclaims:load_failed:disk",
    REFUSAL,
    "kvclaims:refused:capacity:;others=3;protected_resident_blocks=8;active_live_blocks_required=21;"
    "resident_plus_active_blocks=29;usable_blocks=23;capacity_shortfall_blocks=6",
    "kvclaims:refused:restoration_failed:t:sys",
    "kvclaims:refused:checkpoint_mismatch:t:sys",
)


def test_a_client_reads_back_the_note_the_engine_wrote_from_any_response() -> None:
    for note in NOTES:
        finish = "abort" if note.startswith("kvclaims:refused:") else "length"
        reply = call(Answering([completion(note + SEP + "7", finish)], b"application/json"), REQUEST)
        assert (reply.status == 200) == (finish == "length"), note
        assert response_note(reply.json()) == note
    plain = call(Answering([completion(None, "length")], b"application/json"), REQUEST)
    assert response_note(plain.json()) is None
    bare = json.loads(completion("kvclaims:claim_accepted:t:sys" + SEP + "7"))  # no boundary
    assert response_note(bare) == "kvclaims:claim_accepted:t:sys"
    assert response_note({"error": {"message": "bad"}}) is None
    assert response_note([1]) is None
