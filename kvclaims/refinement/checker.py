"""The refinement driver: feeds abstracted trace steps to the system model, and nothing else.

Every rule lives in `kvclaims.statemachine.system` (one model: claims, blocks, requests, pool).
This driver knows no domain: it steps the model (`system.step_run` per decoded run), keeps the
budget, turns the model's `Violation` into a located `Counterexample` (`Rejection`), the
model's undecided points into findings, and its witnesses into `Witness` records. Shrinking a
counterexample to its minimal prefix is `kvclaims.refinement.api`'s.

End of trace: `finish` is the one hook where the stream ends; it asks the model what the trace
still owes (`system.finish`). How the stream ended is the driver's, not the model's: a
`trace_closed` event is no model step, records where the writer closed the stream
(`closed_at`), and nothing may follow it (invalid input); whether an unclosed stream is
truncated is decided by `kvclaims.refinement.api.end_of_stream`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvclaims.refinement.decoding import EVENT_STRUCTS
from kvclaims.refinement.reader import TraceInputError, unknown_event_finding
from kvclaims.refinement.verdict import Counterexample, ErrorClass, Finding, Witness
from kvclaims.statemachine import system
from kvclaims.statemachine.system import ClaimRecord, NotAStep, OutOfBudget, SystemState, Violation

_CLOSED = EVENT_STRUCTS["trace_closed"]


@dataclass(frozen=True)
class Budget:
    """How much state the checker may hold before it gives up as `inconclusive`."""

    max_claims: int = 2_000_000
    max_live_requests: int = 1_000_000
    max_tracked_blocks: int = 8_000_000


class Rejection(Exception):
    """A step the model does not allow. `ids` are the claim and request ids it concerns, for
    deriving the minimal prefix."""

    def __init__(self, counterexample: Counterexample, ids: frozenset[str]) -> None:
        super().__init__(counterexample.message)
        self.counterexample = counterexample
        self.ids = ids


class Undecidable(Exception):
    """The checker cannot decide the trace (budget exhausted); the verdict is inconclusive."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


class Checker:
    """Consumes trace v1 event Structs one at a time (`feed`) or in runs (`feed_run`), then
    `finish`. Raises `Rejection` at the first step the model does not allow, `Undecidable` when
    the budget is exhausted (checked per run: the overshoot is at most one run). After
    `finish`, `witnesses()` lists what the trace exercised and `undecided` what could not be
    decided (which makes an otherwise clean trace inconclusive)."""

    def __init__(
        self, *, usable_blocks: int | None, block_size: int | None, budget: Budget = Budget()
    ) -> None:
        self.state: SystemState = system.init(
            _Header(usable_blocks, block_size), max_prefix_positions=budget.max_tracked_blocks
        )
        self.budget = budget
        self.first_unknown: Finding | None = None
        self.closed_at: int | None = None
        """The line of `trace_closed`, once seen: the stream ended cleanly there."""
        self._line = 0
        self._base_line = 0
        self._base_index = 0
        self._index = 0
        self._run_end = 0

    # --- what the model holds, for verdicts and reports ----------------------------------

    @property
    def claims(self) -> dict[str, ClaimRecord]:
        """Live claims by id (read-only use)."""
        return self.state.claims

    @property
    def steps(self) -> int:
        return self.state.steps

    @property
    def claims_seen(self) -> int:
        return system.claims_seen(self.state)

    @property
    def requests_seen(self) -> int:
        return self.state.requests_seen

    @property
    def undecided(self) -> list[Finding]:
        return [Finding(ErrorClass.undecidable, u.message, line=u.at) for u in self.state.undecided]

    @property
    def events_reached(self) -> int:
        """Events up to and including the last one the model judged (0 after `finish`)."""
        return self._index + 1

    @property
    def steps_reached(self) -> int:
        return self.steps

    # --- driving ------------------------------------------------------------------------

    def feed(self, event: Any, line: int, index: int) -> None:
        """Check one step; `line` / `index` locate it in the source for counterexamples."""
        self.feed_run([event], line, index)

    def feed_run(self, events: list[Any], line: int, index: int) -> None:
        """Check consecutive steps: `events[i]` is at `line + i`, index `index + i`."""
        if self.closed_at is not None:
            _after_close(self.closed_at, line)
        if not events:
            return
        self._within_budget(line)
        self._base_line, self._base_index = line, index
        self._index = index + len(events) - 1
        try:
            violation = system.step_run(self.state, events, line)
        except OutOfBudget as exhausted:
            at = line if exhausted.at is None else exhausted.at
            self._index = index + (at - line)
            raise Undecidable(
                Finding(ErrorClass.budget_exhausted, f"budget exhausted: {exhausted}", line=at)
            ) from None
        except NotAStep as end:  # the writer's end of the stream, the one event that is not a step
            if type(events[end.offset]) is not _CLOSED:
                raise
            self._closed(line + end.offset, index + end.offset, len(events) - end.offset - 1)
            return
        if violation is not None:
            self._index = index + (violation.at - line)
            raise self._rejection(violation, violation.at)

    def _closed(self, line: int, index: int, following: int) -> None:
        """`trace_closed` at `line`, with `following` more events of the run after it (read,
        as they would be one at a time, up to the close)."""
        self._index = index
        if following:
            _after_close(line, line + 1)
        self.closed_at = line

    def unknown(self, name: str, line: int, index: int) -> None:
        """An event type the format does not define: skipped, and the verdict can be at best
        inconclusive."""
        if self.closed_at is not None:
            _after_close(self.closed_at, line)
        if self.first_unknown is None:
            self.first_unknown = unknown_event_finding(name, line)

    def finish(self) -> None:
        """The end-of-trace hook: what the trace still owes, then the witnesses."""
        self._index = -1
        violation = system.finish(self.state)
        if violation is not None:
            raise self._rejection(violation, violation.at)

    def witnesses(self) -> tuple[Witness, ...]:
        return tuple(Witness(kind, lines, ids) for kind, lines, ids in system.witnesses(self.state))

    # --- budget and location ------------------------------------------------------------

    def _within_budget(self, line: int) -> None:
        state, budget = self.state, self.budget
        for size, limit, what in (
            (len(state.block_owner), budget.max_tracked_blocks, "tracked blocks"),
            (len(state.requests), budget.max_live_requests, "live requests"),
            (system.claims_seen(state), budget.max_claims, "claims"),
        ):
            if size >= limit:
                raise Undecidable(
                    Finding(
                        ErrorClass.budget_exhausted, f"budget exhausted: more than {limit} {what}", line=line
                    )
                )

    def _rejection(self, violation: Violation, line: int) -> Rejection:
        return Rejection(
            Counterexample(
                rule=violation.rule,
                line=line,
                event_index=self._index,
                event=violation.event,
                message=violation.message,
                subject=violation.subject,
                state_before=violation.state,
                allowed=violation.allowed,
            ),
            violation.ids,
        )


@dataclass(frozen=True)
class _Header:
    usable_blocks: int | None
    block_size: int | None


def _after_close(closed_at: int, line: int) -> None:
    """An event after `trace_closed`: the file is not one trace (invalid input)."""
    raise TraceInputError(
        Finding(
            ErrorClass.ordering,
            f"an event follows trace_closed (line {closed_at}): a closed trace ends there",
            line=line,
            field="event",
        )
    )
