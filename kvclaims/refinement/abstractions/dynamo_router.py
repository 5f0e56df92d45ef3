"""NVIDIA Dynamo's KV router decisions, read as a fleet's router stream (`route_decided`).

Written from ai-dynamo/dynamo at commit cfa22544b95be056ab4f4b9b9e1762d8b56f6e59,
`lib/kv-router/src/protocols.rs`: the KV router publishes every routing decision to its replicas
as an `ActiveSequenceEvent` (serde JSON, default representation):

    ActiveSequenceEvent { request_id: String, worker: WorkerWithDpRank, data: ActiveSequenceEventData,
                          router_id: u64, #[serde(default)] lora_name: Option<String> }
    WorkerWithDpRank { worker_id: u64, dp_rank: u32 }
    ActiveSequenceEventData = AddRequest { token_sequence: Option<Vec<SequenceHash>>, isl: usize,
                                           overlap: u32, expected_output_tokens: Option<u32> }
                            | Free | MarkPrefillCompleted      (externally tagged: a unit variant
                                                              is the string, AddRequest an object)

`AddRequest` is the decision: `request_id` was sent to `worker`, whose cache the router predicted
to hold the first `overlap` blocks; `token_sequence` is one hash per full block of the prompt's
`isl` tokens, so it fixes the router's block size. A capture is one event per line (JSON Lines),
in the order the router published them. The record names no claim and no candidate set:

- the claim each request reuses comes from the client (`read_claims`: a JSON object, request id
  -> claim id, as the sender of the reuses wrote it); a request it does not name is undecided;
- the candidates are the engines whose streams are given (the record does not list the workers
  the router chose among);
- the router reports no outcome, so the report of each decision is derived from the chosen
  engine's stream (`route_reuse_reported` as that stream attributes the request): the fleet
  check then judges placement and the join, and counts delivered and missed reuse, but the
  router's own report is not evidence (there is none).

Fails closed (a `TraceInputError` whose finding names line and field): a field outside the lists above or a
missing one, a wrong JSON type, a duplicate key, a truncated last line -> `parse` (invalid); a
request id decided twice, or freed before it was decided -> `parse` (ambiguous request ids);
a `Free` or `MarkPrefillCompleted` naming another worker than the decision -> `parse`; a worker
no engine stream names, a request no claim names, a request under a LoRA adapter (`lora_name`:
its blocks are the adapter's, not the claim's), a `token_sequence` of null (the units
of `overlap` are unknown), a `token_sequence` whose length is not `isl // block_size` for the
chosen engine's block size, or an `overlap` beyond it (a block-size mismatch) -> `undecidable`
(inconclusive). The events carry no sequence number (`router_id` names the router replica, not
a position), so a lost event is not detectable from the capture: the format says so, and the
fleet verdict notes it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from kvclaims.refinement.reader import (
    TraceInputError,
    TraceStream,
    decode_json,
    exact_document,
    parse_error,
    read_lines,
    validated_document,
)
from kvclaims.refinement.sources import DYNAMO_ROUTER_FORMAT as FORMAT
from kvclaims.refinement.verdict import ErrorClass, Finding
from kvclaims.spec.trace import RouteDecided

SOURCE = (
    "ai-dynamo/dynamo@cfa22544b95be056ab4f4b9b9e1762d8b56f6e59 lib/kv-router/src/protocols.rs "
    "(ActiveSequenceEvent)"
)
NOT_NUMBERED = (
    f"{FORMAT}: the router's events carry no sequence number, so a lost decision is not "
    "detectable; each report is derived from the chosen engine's stream (the router reports none)"
)

_U64 = 2**64 - 1
_U32 = 2**32 - 1
_Hash = Annotated[StrictInt, Field(ge=0, le=_U64)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Worker(_Strict):
    worker_id: StrictInt = Field(ge=0, le=_U64)
    dp_rank: StrictInt = Field(ge=0, le=_U32)


class _AddRequest(_Strict):
    token_sequence: list[_Hash] | None
    isl: StrictInt = Field(ge=0, le=_U64)
    overlap: StrictInt = Field(ge=0, le=_U32)
    expected_output_tokens: StrictInt | None = Field(ge=0, le=_U32)


class _Added(_Strict):
    AddRequest: _AddRequest


class ActiveSequenceEvent(_Strict):
    request_id: StrictStr = Field(min_length=1, max_length=256)
    worker: _Worker
    data: _Added | Literal["Free", "MarkPrefillCompleted"]
    router_id: StrictInt = Field(ge=0, le=_U64)
    lora_name: StrictStr | None = None


def _undecidable(message: str, line: int, field: str) -> TraceInputError:
    return TraceInputError(Finding(ErrorClass.undecidable, message, line=line, field=field))


def engine_of(worker_id: int, dp_rank: int) -> str:
    """The engine id a Dynamo worker stands for: `worker_id`, or `worker_id:dp_rank` for a
    data-parallel rank above 0 (the engine stream's header `engine_id` must say the same)."""
    return str(worker_id) if dp_rank == 0 else f"{worker_id}:{dp_rank}"


def read_claims(path: Path) -> dict[str, str]:
    """The client's record of which claim each request reuses: one JSON object, request id ->
    claim id (a duplicate key, a non-string value or more than one line is a parse error)."""
    with TraceStream(path.open("rb")) as stream:
        lines = list(read_lines(stream))
    if len(lines) != 1:
        raise parse_error(f"{path}: the claims file is one JSON object on one line", len(lines) or None)
    number, content, terminated = lines[0]
    decode_json(content, number, terminated)
    document = exact_document(content, number)
    if not isinstance(document, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in document.items()
    ):
        raise parse_error("the claims file maps request ids to claim ids (non-empty strings)", number)
    return document


def read_decisions(
    path: Path, block_sizes: Mapping[str, int | None], claims: Mapping[str, str]
) -> Iterator[tuple[int, RouteDecided]]:
    """Every `AddRequest` of the capture as a `route_decided`, with its line (raises
    `TraceInputError`, see the module docstring)."""
    decided: dict[str, ActiveSequenceEvent] = {}
    with TraceStream(path.open("rb")) as stream:
        for number, content, terminated in read_lines(stream):
            decode_json(content, number, terminated)
            event = validated_document(ActiveSequenceEvent, exact_document(content, number), number)
            if not isinstance(event.data, _Added):
                decision = decided.get(event.request_id)
                if decision is not None and decision.worker != event.worker:
                    message = (
                        f"{event.data} for request {event.request_id} names another worker than its decision"
                    )
                    raise parse_error(message, number, "worker")
                if decision is None:
                    raise parse_error(
                        f"{event.data} for request {event.request_id}, which was never decided",
                        number,
                        "request_id",
                    )
                continue
            if event.request_id in decided:
                raise parse_error(
                    f"request {event.request_id} decided twice: which decision a reuse followed is ambiguous",
                    number,
                    "request_id",
                )
            decided[event.request_id] = event
            yield number, _decision(event, event.data.AddRequest, number, block_sizes, claims)


def _decision(
    event: ActiveSequenceEvent,
    added: _AddRequest,
    line: int,
    block_sizes: Mapping[str, int | None],
    claims: Mapping[str, str],
) -> RouteDecided:
    engine = engine_of(event.worker.worker_id, event.worker.dp_rank)
    if engine not in block_sizes:
        raise _undecidable(f"worker {engine} is named by no engine stream given", line, "worker.worker_id")
    if event.lora_name is not None:
        message = f"request {event.request_id} runs adapter {event.lora_name}: its blocks are not the claim's"
        raise _undecidable(message, line, "lora_name")
    claim = claims.get(event.request_id)
    if claim is None:
        raise _undecidable(f"no claim is named for request {event.request_id}", line, "request_id")
    _same_units(added, block_sizes[engine], engine, line)
    return RouteDecided(
        seq=line,
        request_id=event.request_id,
        claim_id=claim,
        candidate_engines=sorted(block_sizes),
        chosen_engine=engine,
        predicted_hit_blocks=added.overlap,
    )


def _same_units(added: _AddRequest, block_size: int | None, engine: str, line: int) -> None:
    """`overlap` counts the router's blocks; they are the engine's only if the router cut the
    prompt into the engine's blocks: one hash per full block of `isl` tokens."""
    field = "data.AddRequest.token_sequence"
    if added.token_sequence is None:
        raise _undecidable("token_sequence is null: the router's block size is unknown", line, field)
    if block_size is None:
        raise _undecidable(f"engine {engine}'s stream names no block_size", line, field)
    if len(added.token_sequence) != added.isl // block_size:
        raise _undecidable(
            f"{len(added.token_sequence)} block hashes for {added.isl} tokens: not engine {engine}'s "
            f"block size {block_size} (a block-size mismatch)",
            line,
            field,
        )
    if added.overlap > len(added.token_sequence):
        raise _undecidable(
            f"overlap {added.overlap} exceeds the prompt's {len(added.token_sequence)} blocks",
            line,
            "data.AddRequest.overlap",
        )
