"""What a refinement check answers: an outcome, the error class behind it, and a counterexample.

Porcupine style: the checker knows nothing of the runtime beyond the model, so its answer is
about the trace, never about the runtime's intent. The four outcomes, ordered from best to
worst (`Outcome.worst` picks the exit code of a multi-trace run):

- `accepted`: every abstracted step is a legal, ordered, claim-attributed, arithmetically
  consistent transition of the model, and nothing is owed at the end.
- `inconclusive`: nothing violated the model, but the checker could not decide everything
  (an unknown event type, no model step at all, a failed telemetry-join precondition, a token
  predicate without a block size, or an exhausted budget). Never an upgrade to accepted.
- `rejected`: a step the model does not allow; the verdict carries the counterexample.
- `invalid`: the input is not a trace (no header, bad JSON or UTF-8, a line over the size cap,
  a field of the wrong type, a repeated or decreasing seq, a truncated last line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from kvclaims.spec.vocabulary import ConformanceRule, TraceWitness


class Outcome(StrEnum):
    """The verdict of one trace, declared best to worst."""

    accepted = "accepted"
    inconclusive = "inconclusive"
    rejected = "rejected"
    invalid = "invalid"

    @property
    def severity(self) -> int:
        return list(Outcome).index(self)

    @staticmethod
    def worst(outcomes: list[Outcome]) -> Outcome:
        """The worst outcome of several traces; `accepted` for none."""
        return max(outcomes, key=lambda o: o.severity, default=Outcome.accepted)


class ErrorClass(StrEnum):
    """Why a trace is not accepted; the classes of DESIGN 4, kept apart.

    `parse` and `ordering` make a trace `invalid`; `identity_attribution`, `arithmetic` and
    `model_violation` make it `rejected`; `unknown_event`, `undecidable` and
    `budget_exhausted` make it `inconclusive`.
    """

    parse = "parse"
    ordering = "ordering"
    identity_attribution = "identity_attribution"
    arithmetic = "arithmetic"
    model_violation = "model_violation"
    unknown_event = "unknown_event"
    undecidable = "undecidable"
    budget_exhausted = "budget_exhausted"


RULE_ERROR_CLASS: dict[ConformanceRule, ErrorClass] = {
    ConformanceRule.identity: ErrorClass.identity_attribution,
    ConformanceRule.attribution: ErrorClass.identity_attribution,
    ConformanceRule.capacity_arithmetic: ErrorClass.arithmetic,
    ConformanceRule.lifecycle: ErrorClass.model_violation,
    ConformanceRule.offload_order: ErrorClass.model_violation,
    ConformanceRule.no_silent_harm: ErrorClass.model_violation,
    ConformanceRule.hybrid_two_key: ErrorClass.model_violation,
    ConformanceRule.capacity_state: ErrorClass.arithmetic,
    ConformanceRule.duration: ErrorClass.model_violation,
    ConformanceRule.block_identity: ErrorClass.identity_attribution,
    ConformanceRule.terms: ErrorClass.identity_attribution,
    ConformanceRule.route_placement: ErrorClass.identity_attribution,
    ConformanceRule.route_attribution: ErrorClass.identity_attribution,
    ConformanceRule.route_miss_reported: ErrorClass.model_violation,
}
"""The error class of a rejection, by the rule it breaks."""


@dataclass(frozen=True)
class PrefixEvent:
    """One event of a counterexample's minimal prefix: where it is and what it said."""

    line: int
    event: str
    summary: str


@dataclass(frozen=True)
class Counterexample:
    """Where the model stopped agreeing with the trace, and why.

    `line` is the 1-based line of the offending event (for traces that are not line-based,
    the 1-based record number); `event_index` its 0-based position among the trace's events.
    A violation found only when the trace ended (an outcome owed and never reported) has
    `line` 0, `event_index` -1 and `event` `<end of trace>`.
    `state_before` describes the abstract state of the claim (or request) the event is about,
    `allowed` what the model would have accepted there instead. `minimal_prefix` is a
    sub-sequence of the trace, ending with the offending event, that the checker rejects by
    itself with the same rule.
    """

    rule: ConformanceRule
    line: int
    event_index: int
    event: str
    message: str
    subject: str
    state_before: str
    allowed: tuple[str, ...]
    minimal_prefix: tuple[PrefixEvent, ...] = ()


@dataclass(frozen=True)
class Finding:
    """A reason a trace is not accepted that is not a model violation (invalid/inconclusive)."""

    error_class: ErrorClass
    message: str
    line: int | None = None
    field: str | None = None


@dataclass(frozen=True)
class Witness:
    """One behaviour the trace exercised, with the lines that show it and the claims it is about."""

    kind: TraceWitness
    lines: tuple[int, ...]
    claim_ids: tuple[str, ...]


@dataclass(frozen=True)
class TraceVerdict:
    """The answer for one trace. `counterexample` is set exactly when the outcome is
    `rejected`; `finding` when it is `invalid` or `inconclusive`. `events` counts the events
    read up to the verdict (for a rejection, up to the offending event; for invalid input, a
    lower bound); `steps` the model steps among them. `witnesses` are only
    meaningful for an accepted trace (evidence export reads them)."""

    path: str
    format: str
    outcome: Outcome
    events: int
    steps: int
    error_class: ErrorClass | None = None
    counterexample: Counterexample | None = None
    finding: Finding | None = None
    witnesses: tuple[Witness, ...] = ()
    claims: int = 0
    requests: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def rule(self) -> ConformanceRule | None:
        return self.counterexample.rule if self.counterexample else None

    @property
    def reason(self) -> str:
        """One line saying why the outcome is what it is."""
        if self.counterexample is not None:
            c = self.counterexample
            where = f"line {c.line}" if c.event_index >= 0 else "end of trace"
            return f"{where}: [{c.rule}] {c.message}"
        if self.finding is not None:
            where = f"line {self.finding.line}: " if self.finding.line is not None else ""
            return f"{where}[{self.finding.error_class}] {self.finding.message}"
        return "every step is a legal transition of the model"

    def to_json(self) -> dict[str, object]:
        """The public JSON form of `kvclaims check --json`."""
        result: dict[str, object] = {
            "path": self.path,
            "format": self.format,
            "outcome": self.outcome.value,
            "error_class": self.error_class.value if self.error_class else None,
            "rule": self.rule.value if self.rule else None,
            "reason": self.reason,
            "events": self.events,
            "steps": self.steps,
            "claims": self.claims,
            "requests": self.requests,
            "witnesses": [
                {"kind": w.kind.value, "lines": list(w.lines), "claim_ids": list(w.claim_ids)}
                for w in self.witnesses
            ],
            "notes": list(self.notes),
        }
        if self.counterexample is not None:
            c = self.counterexample
            result["counterexample"] = {
                "rule": c.rule.value,
                "line": c.line,
                "event_index": c.event_index,
                "event": c.event,
                "subject": c.subject,
                "message": c.message,
                "state_before": c.state_before,
                "allowed": list(c.allowed),
                "minimal_prefix": [
                    {"line": p.line, "event": p.event, "summary": p.summary} for p in c.minimal_prefix
                ],
            }
        if self.finding is not None:
            result["finding"] = {
                "error_class": self.finding.error_class.value,
                "message": self.finding.message,
                "line": self.finding.line,
                "field": self.finding.field,
            }
        return result
