"""Single mutations of legal histories, for comparing the oracle with the checker (issue 12).

A history is a header and a list of event dicts. `mutate` applies exactly one mutation: drop,
duplicate or reorder an event, change a number, an id, a block hash, a mode or an owner, or
insert an event copied from elsewhere in the history. `seq` is renumbered when the mutant is
encoded, so every mutant is still well-formed input and the verdicts differ only by the model.

    bench/oracle_mutations.py --cases 100000     # the long profile
"""

from __future__ import annotations

import copy
import io
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kvclaims.oracle.exhaustive import (
    CLOSED,
    CheckerVerdict,
    Disagreement,
    classify,
    refinement_checker,
    refinement_checker_unshrunk,
)
from kvclaims.oracle.interpreter import (
    BadInput,
    Oracle,
    Verdict,
    drive,
    judge,
    parse_event,
    parse_header,
)
from kvclaims.oracle.state import MODES

History = tuple[dict[str, Any], list[dict[str, Any]]]

MUTATIONS = ("drop", "duplicate", "reorder", "number", "id", "hash", "mode", "owner", "insert")

_NUMBERS = (
    "footprint_blocks",
    "leading_blocks",
    "required_blocks",
    "active_live_blocks",
    "cached_blocks",
    "position",
    "block_id",
    "duration_steps",
    "duration_ms",
    "max_duration_steps",  # soft terms (issue 28): a cap, and an extension's durations above
    "max_duration_ms",
    "boundary",
    *(
        "protected_resident_blocks",
        "active_live_blocks_required",
        "resident_plus_active_blocks",
        "usable_blocks",
        "capacity_shortfall_blocks",
    ),
)
_IDS = ("claim_id", "request_id")


@dataclass(frozen=True)
class Mutant:
    kind: str
    index: int
    events: list[dict[str, Any]]


def mutate(events: list[dict[str, Any]], kind: str, rng: random.Random) -> Mutant | None:
    """One mutation of `kind` at a position `rng` picks; None when the history offers no place
    for it (e.g. no mode to change)."""
    events = list(events)  # a new list; an event is copied only where it changes
    if not events:
        return None
    index = rng.randrange(len(events))
    if kind == "drop":
        del events[index]
    elif kind == "duplicate":
        events.insert(index, copy.deepcopy(events[index]))
    elif kind == "reorder":
        if len(events) < 2:
            return None
        index = min(index, len(events) - 2)
        events[index], events[index + 1] = events[index + 1], events[index]
    elif kind == "insert":
        events.insert(index, copy.deepcopy(events[rng.randrange(len(events))]))
    else:
        index = _change_field(events, kind, rng)
        if index is None:
            return None
    return Mutant(kind, index, events)


def _change_field(events: list[dict[str, Any]], kind: str, rng: random.Random) -> int | None:
    names = {
        "number": _NUMBERS,
        "id": _IDS,
        "hash": ("block_hash",),
        "mode": ("mode",),
        "owner": ("owner_scope",),
    }
    candidates = [
        (i, name) for i, event in enumerate(events) for name in names[kind] if event.get(name) is not None
    ]
    if kind == "id":
        candidates += [(i, "blocking_claim_ids") for i, e in enumerate(events) if e.get("blocking_claim_ids")]
    if not candidates:
        return None
    index, name = rng.choice(candidates)
    event = events[index] = copy.deepcopy(events[index])
    if kind == "number":
        event[name] = max(0, event[name] + rng.choice((-2, -1, 1, 2)))
    elif kind == "id":
        pool = sorted({e[n] for e in events for n in _IDS if e.get(n) is not None} | {"stranger"})
        if name == "blocking_claim_ids":
            ids = event[name]
            ids[rng.randrange(len(ids))] = rng.choice(pool)
        else:
            event[name] = rng.choice([value for value in pool if value != event[name]])
    elif kind == "hash":
        pool = sorted({e["block_hash"] for e in events if "block_hash" in e} | {"other-hash"})
        event[name] = rng.choice([value for value in pool if value != event[name]])
    elif kind == "mode":
        event[name] = rng.choice([mode for mode in MODES if mode != event[name]])
    else:
        event[name] = event[name] + "-other"
    return index


def encode(header: dict[str, Any], events: list[dict[str, Any]]) -> bytes:
    """Header and events as NDJSON, `seq` renumbered 1, 2, ... (a mutant stays well-formed)."""
    lines = [json.dumps(header)] + [json.dumps({**event, "seq": seq}) for seq, event in enumerate(events, 1)]
    return ("\n".join(lines) + "\n").encode()


def decode(data: bytes) -> History:
    lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    return lines[0], lines[1:]


# --- legal histories --------------------------------------------------------------------------


def generator_history(seed: int, events: int = 120) -> History:
    """A legal history from `kvclaims.refinement.testing.generate_valid_trace`."""
    from kvclaims.refinement.testing import generate_valid_trace

    out = io.BytesIO()
    generate_valid_trace(out, events, seed=seed, usable_blocks=96, live_claims=4)
    return decode(out.getvalue())


def microruntime_history(seed: int, operations: int = 150) -> History:
    """A legal history of the MicroRuntime running a small generated workload."""
    from kvclaims.microruntime.runtime import MicroRuntime
    from kvclaims.microruntime.workload import WorkloadShape, apply, generate

    shape = WorkloadShape(
        operations=operations,
        objects=12,
        max_prefix_blocks=8,
        usable_blocks=64,
        claim_every=6,
        tick_every=5,
        big_request_every=40,
        seed=seed,
    )
    events: list[dict[str, Any]] = []
    runtime = MicroRuntime(shape.usable_blocks, sink=events.append)
    apply(runtime, generate(shape))
    return dict(runtime.header), [*(dict(event) for event in events), dict(CLOSED)]


SOURCES: dict[str, Callable[[int], History]] = {
    "generator": generator_history,
    "microruntime": microruntime_history,
}


def legal_bases(per_source: int) -> list[tuple[str, History]]:
    """`per_source` histories of each source that both the oracle and the checker accept (a
    history they disagree on is itself a recorded disagreement, not a base to mutate)."""
    bases: list[tuple[str, History]] = []
    for name, make in SOURCES.items():
        seed = found = 0
        while found < per_source and seed < 10 * per_source:
            header, events = make(seed)
            data = encode(header, events)
            if judge(data).outcome == "accepted" and refinement_checker(data).outcome == "accepted":
                bases.append((name, (header, events)))
                found += 1
            seed += 1
    return bases


class PreparedHistory:
    """A legal history made cheap to mutate many times: each event's JSON text is kept, and the
    oracle's state every `STRIDE` events, so a mutant whose first change is at event i is
    encoded from the kept texts and judged by the oracle from the snapshot before i. Events a
    mutant shares with the history (the same objects) are not re-validated; changed ones are.
    `judge` answers what `interpreter.judge(self.encode(mutant))` answers (tests check it)."""

    STRIDE = 16

    def __init__(self, header: dict[str, Any], events: list[dict[str, Any]]) -> None:
        self.header, self.events = header, events
        self._texts = {id(event): (event, _text(event)) for event in events}
        oracle = Oracle(*parse_header(header))
        self._snapshots = [oracle.clone()]
        for index, event in enumerate(events, 1):
            oracle.step(event)
            if index % self.STRIDE == 0:
                self._snapshots.append(oracle.clone())

    def _shared(self, event: dict[str, Any]) -> str | None:
        kept = self._texts.get(id(event))
        return kept[1] if kept is not None and kept[0] is event else None

    def encode(self, mutant: Mutant) -> bytes:
        lines = [json.dumps(self.header)]
        for seq, event in enumerate(mutant.events, 1):
            text = self._shared(event) or _text(event)
            lines.append(f'{{"seq": {seq}, {text[1:]}' if text != "{}" else f'{{"seq": {seq}}}')
        return ("\n".join(lines) + "\n").encode()

    def judge(self, mutant: Mutant) -> Verdict:
        start = mutant.index // self.STRIDE * self.STRIDE
        oracle = self._snapshots[start // self.STRIDE].clone()
        for event in self.events[start : mutant.index]:
            oracle.step(event)
        return drive(oracle, self._checked(mutant))

    def _checked(self, mutant: Mutant) -> Iterator[tuple[int, dict[str, Any]]]:
        """The mutant's events from its first change on; changed ones re-validated."""
        for index in range(mutant.index, len(mutant.events)):
            event = mutant.events[index]
            if self._shared(event) is None:
                try:
                    event = parse_event(f'{{"seq": {index + 1}, {_text(event)[1:]}'.encode(), index)
                except BadInput as error:
                    error.line = index + 2
                    raise
            yield index + 2, event


def _text(event: dict[str, Any]) -> str:
    return json.dumps({key: value for key, value in event.items() if key != "seq"})


def compare(
    prepared: PreparedHistory,
    mutant: Mutant,
    checker: Callable[[bytes], CheckerVerdict] = refinement_checker_unshrunk,
) -> Disagreement | None:
    """Both verdicts on one mutant; the disagreement if their outcomes differ."""
    oracle, found = prepared.judge(mutant), checker(prepared.encode(mutant))
    if oracle.outcome == found.outcome:
        return None
    trace = tuple(
        (event["event"], {k: v for k, v in event.items() if k not in ("seq", "event")})
        for event in mutant.events
    )
    return Disagreement(trace, oracle, found)


Progress = Callable[[Counter[str], Counter[str]], None]


def run(
    cases: int,
    seed: int = 0,
    histories: int = 8,
    *,
    budget_s: float | None = None,
    progress: Progress | None = None,
    every: int = 5000,
) -> tuple[Counter[str], Counter[str], dict[str, Disagreement]]:
    """`cases` random single mutations of `histories` legal histories per source (fewer when
    `budget_s` seconds run out first): mutation counts, disagreement counts by signature, and
    the shortest example of each. `progress` gets the counts every `every` cases."""
    rng = random.Random(seed)
    bases = [PreparedHistory(header, events) for _, (header, events) in legal_bases(histories)]
    kinds: Counter[str] = Counter()
    classes: Counter[str] = Counter()
    examples: dict[str, Disagreement] = {}
    done = 0
    deadline = None if budget_s is None else time.monotonic() + budget_s
    while done < cases and (deadline is None or time.monotonic() < deadline):
        prepared = rng.choice(bases)
        mutant = mutate(prepared.events, rng.choice(MUTATIONS), rng)
        if mutant is None:
            continue
        done += 1
        kinds[mutant.kind] += 1
        found = compare(prepared, mutant)
        if found is not None:
            signature = classify(found)
            classes[signature] += 1
            if signature not in examples or len(found.trace) < len(examples[signature].trace):
                examples[signature] = found
        if progress is not None and done % every == 0:
            progress(kinds, classes)
    return kinds, classes, examples
