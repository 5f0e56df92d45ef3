"""`check_fleet(router, engines) -> FleetVerdict`: a fleet's streams judged together.

A fleet run leaves one ordered trace v1 stream per engine (its header names the engine:
`engine_id`) and one router stream (the routing hook's `route_decided` /
`route_reuse_reported` lines). There is no global clock, so nothing here orders one stream
against another: each engine stream is checked on its own (`check_trace`), then the complete
ones are folded per claim and per request into `kvclaims.statemachine.routing`, which judges the
router stream against them.

Fail closed, stream by stream:

- an engine stream that is not `accepted` (truncated by a kill, inconclusive, rejected,
  invalid) keeps its own verdict, and no routing fact is read from it: a route to that engine,
  or to a claim only it holds, is undecided;
- two streams naming one engine (a restart writes a new stream) are both set aside: the order
  between them is not in the evidence; a stream without `engine_id` is set aside too;
- an accepted engine stream whose seq skips a number (events may be lost) leaves the routing
  judgement undecided;
- the router stream is strict: a duplicate key, a field or event type the routing format does
  not have, a `seq` that does not increase or a line after `trace_closed` make it `invalid`; a
  missing `trace_closed` makes it truncated (`inconclusive`).

The fleet's outcome is the worst of the engines' verdicts and the routing verdict.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kvclaims.refinement.abstractions import dynamo_router
from kvclaims.refinement.api import check_trace
from kvclaims.refinement.evidence import file_sha256
from kvclaims.refinement.reader import (
    TraceInputError,
    TraceStream,
    decode_json,
    exact_document,
    ordering_error,
    parse_error,
    read_lines,
    validated_document,
)
from kvclaims.refinement.sources import ROUTER_FORMAT, ROUTER_FORMATS
from kvclaims.refinement.verdict import (
    RULE_ERROR_CLASS,
    Counterexample,
    ErrorClass,
    Finding,
    Outcome,
    TraceVerdict,
)
from kvclaims.spec.evidence import Anchor, EvidenceItem
from kvclaims.spec.trace import (
    EVENT_MODELS,
    ROUTING_EVENT_MODELS,
    RouteDecided,
    RouteOutcome,
    RouteReuseReported,
    TraceHeader,
)
from kvclaims.spec.vocabulary import AnchorKind, EvidenceScope, EvidenceStatus, Obligation
from kvclaims.statemachine import routing
from kvclaims.statemachine.system import Violation


@dataclass(frozen=True)
class EngineStream:
    """One engine stream: its file, the engine its header names, and its own verdict."""

    path: str
    engine_id: str | None
    verdict: TraceVerdict
    block_size: int | None = None


@dataclass(frozen=True)
class FleetVerdict:
    """The answer for a fleet. `where` is the file the counterexample or finding is in;
    `routes` counts the router stream's judged outcomes (`delivered`, `missed`)."""

    outcome: Outcome
    router: str
    engines: tuple[EngineStream, ...]
    where: str | None = None
    error_class: ErrorClass | None = None
    counterexample: Counterexample | None = None
    finding: Finding | None = None
    routes: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    router_format: str = ROUTER_FORMAT

    @property
    def reason(self) -> str:
        """One line saying why the outcome is what it is."""
        if self.counterexample is not None:
            c = self.counterexample
            at = f"line {c.line}" if c.line > 0 else "end of stream"
            return f"{self.where} {at}: [{c.rule}] {c.message}"
        if self.finding is not None:
            at = f" line {self.finding.line}" if self.finding.line is not None else ""
            return f"{self.where}{at}: [{self.finding.error_class}] {self.finding.message}"
        if self.router_format != ROUTER_FORMAT:
            return (
                "every engine stream is accepted and every routed reuse is joined to the engine "
                "that served it (its report derived from that engine's stream)"
            )
        return "every engine stream is accepted and every routed reuse is attributed and reported"

    def to_json(self) -> dict[str, Any]:
        """The public JSON form of `kvclaims check --fleet --json`."""
        return {
            "format": "kvclaims-fleet-verdict/1",
            "outcome": self.outcome.value,
            "reason": self.reason,
            "where": self.where,
            "error_class": self.error_class.value if self.error_class else None,
            "rule": self.counterexample.rule.value if self.counterexample else None,
            "field": self.finding.field if self.finding else None,
            "router": self.router,
            "router_format": self.router_format,
            "routes": dict(self.routes),
            "engines": [
                {"path": e.path, "engine_id": e.engine_id, **_brief(e.verdict)} for e in self.engines
            ],
            "notes": list(self.notes),
        }


def _brief(verdict: TraceVerdict) -> dict[str, Any]:
    return {
        "outcome": verdict.outcome.value,
        "rule": verdict.rule.value if verdict.rule else None,
        "reason": verdict.reason,
    }


@dataclass(frozen=True)
class _Judgement:
    outcome: Outcome
    where: str | None = None
    counterexample: Counterexample | None = None
    finding: Finding | None = None


def _engine_judgement(stream: EngineStream) -> _Judgement:
    verdict = stream.verdict
    return _Judgement(verdict.outcome, stream.path, verdict.counterexample, verdict.finding)


def check_fleet(
    router: str | Path,
    engines: Sequence[str | Path],
    *,
    router_format: str = ROUTER_FORMAT,
    claims: str | Path | None = None,
) -> FleetVerdict:
    """Check a fleet: the router stream and every engine's stream (never raises on bad input).
    `router_format` is one of `ROUTER_FORMATS`: the routing hook's stream, or a router's own
    decision records (`claims` then names the client's request -> claim file)."""
    streams = tuple(_engine_stream(Path(path)) for path in engines)
    judgements = [_engine_judgement(s) for s in streams if s.verdict.outcome is not Outcome.accepted]
    counts = Counter(s.engine_id for s in streams if s.engine_id is not None)
    complete: dict[str, EngineStream] = {}
    for stream in streams:
        if stream.engine_id is None:
            message = "the header names no engine (engine_id): its routing facts are not read"
            judgements.append(_undecided(stream.path, message, line=1, field="engine_id"))
        elif counts[stream.engine_id] > 1:
            message = (
                f"engine {stream.engine_id} has {counts[stream.engine_id]} streams (a restart?): "
                "the order between them is not in the evidence"
            )
            judgements.append(_undecided(stream.path, message, line=1, field="engine_id"))
        elif stream.verdict.outcome is Outcome.accepted:
            complete[stream.engine_id] = stream
    state = routing.init(complete)
    routed = _route(state, str(router), complete, router_format, claims)
    judgements.append(routed)
    if router_format != ROUTER_FORMAT:
        judgements.append(_Judgement(Outcome.accepted, finding=_note(dynamo_router.NOT_NUMBERED)))
    worst = max(judgements, key=lambda j: j.outcome.severity)
    error_class = None
    if worst.counterexample is not None:
        error_class = RULE_ERROR_CLASS[worst.counterexample.rule]
    elif worst.finding is not None:
        error_class = worst.finding.error_class
    return FleetVerdict(
        outcome=worst.outcome,
        router=str(router),
        engines=streams,
        where=worst.where,
        error_class=error_class,
        counterexample=worst.counterexample,
        finding=worst.finding,
        routes={outcome.value: state.outcomes[outcome] for outcome in RouteOutcome},
        notes=tuple(j.finding.message for j in judgements if j.finding is not None and j is not worst),
        router_format=router_format,
    )


def _engine_stream(path: Path) -> EngineStream:
    verdict = check_trace(path)
    header: Any = None
    if verdict.outcome is not Outcome.invalid:
        with TraceStream(path.open("rb")) as stream:
            number, content, terminated = next(read_lines(stream))
            header = decode_json(content, number, terminated)
    header = header if isinstance(header, dict) else {}
    engine_id, block_size = header.get("engine_id"), header.get("block_size")
    return EngineStream(
        str(path),
        engine_id if isinstance(engine_id, str) else None,
        verdict,
        block_size if isinstance(block_size, int) and not isinstance(block_size, bool) else None,
    )


def _note(message: str) -> Finding:
    return Finding(ErrorClass.undecidable, message)


def _undecided(where: str, message: str, line: int | None = None, field: str | None = None) -> _Judgement:
    return _Judgement(
        Outcome.inconclusive, where, finding=Finding(ErrorClass.undecidable, message, line, field)
    )


class _SequenceGap(Exception):
    """An engine stream's seq skipped numbers: events between them may be lost."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def _route(
    state: routing.FleetState,
    router: str,
    engines: dict[str, EngineStream],
    router_format: str,
    claims: str | Path | None,
) -> _Judgement:
    """Fold the complete engines' streams, then judge the router stream against them."""
    for engine, stream in engines.items():
        try:
            for line, event in _engine_events(Path(stream.path)):
                found = routing.engine_step(state, engine, event, line)
                if isinstance(found, Violation):
                    return _Judgement(Outcome.rejected, stream.path, counterexample=_counterexample(found))
        except _SequenceGap as gap:
            return _undecided(stream.path, str(gap), line=gap.line, field="seq")
    if router_format not in ROUTER_FORMATS:
        known = ", ".join(ROUTER_FORMATS)
        return _Judgement(
            Outcome.invalid, router, finding=_parse(f"router format {router_format!r} ({known})")
        )
    if router_format != ROUTER_FORMAT:
        return _route_records(state, router, engines, claims)
    try:
        closed = False
        for line, event in _router_events(Path(router)):
            if closed:
                raise parse_error("a line after trace_closed: the stream had ended", line)
            closed = event.event == "trace_closed"
            found = routing.route_step(state, event, line)
            if isinstance(found, Violation):
                return _Judgement(Outcome.rejected, router, counterexample=_counterexample(found))
    except TraceInputError as error:
        return _Judgement(Outcome.invalid, router, finding=error.finding)
    except OSError as error:
        return _Judgement(Outcome.invalid, router, finding=_parse(f"cannot read: {error}"))
    if not closed:
        return _undecided(router, "truncated: the router stream has no trace_closed line")
    return _concluded(state, router)


def _route_records(
    state: routing.FleetState, router: str, engines: dict[str, EngineStream], claims: str | Path | None
) -> _Judgement:
    """Judge a router's own decision records: each decision, then its report as the chosen
    engine's stream gives it (the router reports no outcome)."""
    block_sizes = {engine: stream.block_size for engine, stream in engines.items()}
    try:
        named = dynamo_router.read_claims(Path(claims)) if claims is not None else {}
        for line, decision in dynamo_router.read_decisions(Path(router), block_sizes, named):
            for event in (decision, _derived_report(state, decision)):
                found = routing.route_step(state, event, line)
                if isinstance(found, Violation):
                    return _Judgement(Outcome.rejected, router, counterexample=_counterexample(found))
    except TraceInputError as error:
        undecided = error.finding.error_class is ErrorClass.undecidable
        return _Judgement(
            Outcome.inconclusive if undecided else Outcome.invalid, router, finding=error.finding
        )
    except OSError as error:
        return _Judgement(Outcome.invalid, router, finding=_parse(f"cannot read: {error}"))
    return _concluded(state, router)


def _derived_report(state: routing.FleetState, decision: RouteDecided) -> RouteReuseReported:
    request, claim, engine = decision.request_id, decision.claim_id, decision.chosen_engine
    return RouteReuseReported(
        seq=decision.seq,
        request_id=request,
        claim_id=claim,
        engine=engine,
        delivered_blocks=routing.reuse_of(state, engine, request, claim).cached_blocks,
        outcome=routing.observed_outcome(state, request, claim, engine, decision.predicted_hit_blocks),
    )


def _parse(message: str) -> Finding:
    return Finding(ErrorClass.parse, message)


def _concluded(state: routing.FleetState, router: str) -> _Judgement:
    """The end of the router's decisions: owed reports, undecided routes, nothing routed."""
    found = routing.finish(state)
    if found is not None:
        return _Judgement(Outcome.rejected, router, counterexample=_counterexample(found))
    if state.undecided:
        first = state.undecided[0]
        return _undecided(router, first.message, line=first.at)
    if not state.reported:
        return _undecided(router, "the router stream routes no reuse: nothing to judge")
    return _Judgement(Outcome.accepted)


def _counterexample(violation: Violation) -> Counterexample:
    return Counterexample(
        rule=violation.rule,
        line=violation.at if violation.event != "<end of trace>" else 0,
        event_index=-1,
        event=violation.event,
        message=violation.message,
        subject=violation.subject,
        state_before=violation.state,
        allowed=violation.allowed,
    )


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    """Every line after the header as an exact document (a duplicate key is a parse error)."""
    with TraceStream(path.open("rb")) as stream:
        for number, content, terminated in read_lines(stream):
            decode_json(content, number, terminated)
            document = exact_document(content, number)
            if number == 1:
                validated_document(TraceHeader, document, number)
                continue
            yield number, document


def _engine_events(path: Path) -> Iterator[tuple[int, BaseModel]]:
    """The events of an accepted engine stream that routing reads (acceptances and anything
    naming a request), as validated models. Its seq must go up by one from line to line (a
    binding's stream does): a skipped number may be a lost acceptance or reuse, so routing facts
    from such a stream are not decided (`_SequenceGap`)."""
    last: int | None = None
    for number, document in _lines(path):
        seq = document["seq"]
        if last is not None and seq != last + 1:
            raise _SequenceGap(number, f"seq {seq} follows seq {last}: a sequence gap (events may be lost)")
        last = seq
        name = document.get("event")
        if name in routing.ACCEPTANCE_EVENTS or "request_id" in document:
            yield number, validated_document(EVENT_MODELS[name], document, number)


def _router_events(path: Path) -> Iterator[tuple[int, Any]]:
    last = -1
    for number, document in _lines(path):
        if not isinstance(document, dict):
            raise parse_error("not a JSON object", number)
        name = document.get("event")
        model = ROUTING_EVENT_MODELS.get(name) if isinstance(name, str) else None
        if model is None:
            known = ", ".join(sorted(ROUTING_EVENT_MODELS))
            raise parse_error(f"event {name!r} is not a router stream event ({known})", number, "event")
        unknown = sorted(set(document) - set(model.model_fields))
        if unknown:
            raise parse_error(f"field {unknown[0]!r} is not a field of {name}", number, unknown[0])
        event = validated_document(model, document, number)
        if event.seq <= last:  # type: ignore[attr-defined]
            raise ordering_error(event.seq, last, number)  # type: ignore[attr-defined]
        last = event.seq  # type: ignore[attr-defined]
        yield number, event


ROUTER_ORDERING = (
    "router stream seq strictly increasing (checked); no order between streams is assumed: "
    "each route is joined to the engines' streams by request and claim id"
)
ROUTER_CLAIM_SCOPE = (
    "every route_decided and route_reuse_reported names its claim and request; the claim's holder "
    "is the one engine whose accepted stream accepted it, and the delivered blocks equal what that "
    "engine's stream attributes to the claim for the request"
)


def routing_evidence_items(verdicts: Sequence[FleetVerdict], *, relative_to: Path) -> list[EvidenceItem]:
    """The routing hook's evidence from accepted fleets, anchored to their router streams:
    `placement_attribution` from the first accepted fleet that judged a route, and
    `reuse_routing_attribution` only when the accepted fleets together judged a delivered and a
    missed reuse (later success and failure), cited from the first fleet with each.
    Raises `ValueError` for a verdict that is not accepted."""
    for verdict in verdicts:
        if verdict.outcome is not Outcome.accepted:
            raise ValueError(f"only an accepted fleet is evidence; {verdict.router} is {verdict.outcome}")
    judged = [v for v in verdicts if sum(v.routes.values())]
    items = []
    if judged:
        items.append(_routing_item(Obligation.placement_attribution, judged[0], relative_to))
    delivered = [v for v in judged if v.routes.get(RouteOutcome.delivered.value)]
    missed = [v for v in judged if v.routes.get(RouteOutcome.missed.value)]
    if delivered and missed:
        cited = [delivered[0]] if missed[0] is delivered[0] else [delivered[0], missed[0]]
        items += [_routing_item(Obligation.reuse_routing_attribution, v, relative_to) for v in cited]
    return items


def _routing_item(obligation: Obligation, verdict: FleetVerdict, relative_to: Path) -> EvidenceItem:
    router = Path(verdict.router)
    events = list(_router_events(router))
    lines = [line for line, _ in events]
    claims = sorted({event.claim_id for _, event in events if event.event != "trace_closed"})
    routes = ", ".join(f"{count} {outcome}" for outcome, count in verdict.routes.items())
    anchor = Anchor(
        kind=AnchorKind.trace,
        path=os.path.relpath(router.resolve(), relative_to.resolve()),
        sha256=file_sha256(router),
        event_range=(min(lines), max(lines)),
        claim_ids=claims,
        ordering=ROUTER_ORDERING,
        claim_scope=ROUTER_CLAIM_SCOPE,
        note=f"kvclaims check --fleet accepted this router stream with {len(verdict.engines)} engine "
        f"streams; routed reuse: {routes}",
    )
    return EvidenceItem(
        obligation=obligation,
        status=EvidenceStatus.supported,
        scope=EvidenceScope.conformance_trace,
        anchor=anchor,
        note=f"fleet-accepted routing ({routes})",
    )
