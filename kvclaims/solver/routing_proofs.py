"""The routing rules in Z3 (`kvclaims.statemachine.routing`), their proof obligations, and one
trace class per rule that refinement must reject with that rule.

The model is one routed reuse of one claim in a fleet of two engines (`ENGINES`): which
engines accepted the claim, which engine the router chose and the hit it predicted, what the
chosen engine's stream attributes to the claim for the request (blocks served, predicate
satisfied), and the router's report (present, engine, claim, blocks, outcome). What each
engine's own stream guarantees (`system` judges it) is an assumption: an engine serves a
claim's blocks only if it holds the claim, never more than its footprint. `fleet_accepts` is
the routing model's verdict on such a history, clause by clause (`RULE_CLAUSES`).

Obligations (validity over every history, with a satisfiable witness so none is vacuous):
- `routing.predicted_miss_never_silent`: an accepted fleet whose routed reuse was not delivered
  reported it, as a miss.
- `routing.reuse_attributed_to_holder`: an accepted fleet attributes delivered blocks, and a
  delivered outcome, only to an engine that holds the claim.
- `routing.claim_held_where_accepted`: an accepted fleet has exactly one engine holding the claim,
  and a delivered reuse was served there.

Trace classes (`ROUTING_CLASSES`): for each rule, Z3 finds a history that breaks that clause
and keeps every other (`find_histories`), as plain values; `kvclaims.refinement.testing.write_routed_history`
writes it as engine streams and a router stream, and refinement (`check_fleet`) must reject it
naming the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import z3

from kvclaims.solver.engines import prove_valid
from kvclaims.solver.facts import Facts
from kvclaims.solver.proofs import Method, Outcome, ProofObligation
from kvclaims.solver.z3env import Job, decided
from kvclaims.spec.vocabulary import ConformanceRule

ENGINES = ("A", "B")
FOOTPRINT = 4
"""The claim's footprint in blocks (its predicate is at most this)."""


@dataclass(frozen=True)
class History:
    """The Z3 terms of one routed reuse."""

    holds: tuple[z3.BoolRef, z3.BoolRef]
    chosen: z3.ArithRef
    predicate: z3.ArithRef
    predicted: z3.ArithRef
    served: z3.ArithRef
    reported: z3.BoolRef
    report_engine: z3.ArithRef
    report_names_claim: z3.BoolRef
    report_blocks: z3.ArithRef
    report_delivered: z3.BoolRef

    @classmethod
    def fresh(cls, job: Job) -> History:
        return cls(
            holds=(job.bool("holds_A"), job.bool("holds_B")),
            chosen=job.int("chosen"),
            predicate=job.int("predicate"),
            predicted=job.int("predicted"),
            served=job.int("served"),
            reported=job.bool("reported"),
            report_engine=job.int("report_engine"),
            report_names_claim=job.bool("report_names_claim"),
            report_blocks=job.int("report_blocks"),
            report_delivered=job.bool("report_delivered"),
        )

    def held_on(self, engine: z3.ArithRef) -> z3.BoolRef:
        return z3.If(engine == 0, self.holds[0], self.holds[1])

    def engines_agree(self) -> z3.BoolRef:
        """What each engine's own (accepted) stream guarantees, and the domains."""
        return z3.And(
            z3.Or(self.chosen == 0, self.chosen == 1),
            z3.Or(self.report_engine == 0, self.report_engine == 1),
            self.predicate >= 1,
            self.predicate <= FOOTPRINT,
            self.predicted >= 0,
            self.predicted <= FOOTPRINT,
            self.served >= 0,
            self.served <= FOOTPRINT,
            self.report_blocks >= 0,
            self.report_blocks <= FOOTPRINT,
            z3.Implies(z3.Not(self.held_on(self.chosen)), self.served == 0),
        )

    def delivered(self) -> z3.BoolRef:
        """The evidence's outcome: the chosen engine holds the claim, its predicate held and it
        served at least the predicted blocks."""
        return z3.And(self.held_on(self.chosen), self.served >= self.predicate, self.served >= self.predicted)


def rule_clauses(h: History) -> dict[ConformanceRule, z3.BoolRef]:
    """The routing model's rules on one history, by the rule each names."""
    return {
        ConformanceRule.route_placement: z3.Not(z3.And(h.holds[0], h.holds[1])),
        ConformanceRule.route_attribution: z3.Implies(
            h.reported,
            z3.And(h.report_engine == h.chosen, h.report_names_claim, h.report_blocks == h.served),
        ),
        ConformanceRule.route_miss_reported: z3.And(h.reported, h.report_delivered == h.delivered()),
    }


def fleet_accepts(h: History) -> z3.BoolRef:
    """The fleet check accepts the history: every rule holds and some engine holds the claim
    (none holding it is undecided, not accepted)."""
    return z3.And(z3.Or(h.holds[0], h.holds[1]), *rule_clauses(h).values())


def _values(model: z3.ModelRef, h: History) -> dict[str, Any]:
    def value(term: z3.ExprRef) -> int | bool:
        found = model.eval(term, model_completion=True)
        return z3.is_true(found) if z3.is_bool(found) else found.as_long()

    return {
        "engines": list(ENGINES),
        "footprint_blocks": FOOTPRINT,
        "holds": [ENGINES[i] for i, term in enumerate(h.holds) if value(term)],
        "chosen": ENGINES[int(value(h.chosen))],
        "predicate_blocks": value(h.predicate),
        "predicted_hit_blocks": value(h.predicted),
        "served_blocks": value(h.served),
        "reported": value(h.reported),
        "report_engine": ENGINES[int(value(h.report_engine))],
        "report_names_claim": value(h.report_names_claim),
        "report_blocks": value(h.report_blocks),
        "report_outcome": "delivered" if value(h.report_delivered) else "missed",
    }


def _witness(job: Job, h: History, condition: z3.BoolRef) -> dict[str, Any] | None:
    solver = job.solver()
    solver.add(h.engines_agree(), condition)
    return _values(solver.model(), h) if decided(solver.check(), solver) else None


def _obligation(claim: Any, witness: Any) -> Any:
    """A check: `claim(h)` holds for every accepted history, and `witness(h)` is satisfiable
    by an accepted one (the property is not vacuous)."""

    def check(job: Job, facts: Facts) -> Outcome:
        h = History.fresh(job)
        result = prove_valid(job, z3.Implies(fleet_accepts(h), claim(h)), [h.engines_agree()])
        found = _witness(job, h, z3.And(fleet_accepts(h), witness(h)))
        detail: dict[str, Any] = {
            "domain": f"one routed reuse, engines {list(ENGINES)}, footprint {FOOTPRINT}"
        }
        detail["vacuity_witness"] = found
        if result.counterexample is not None:
            detail["counterexample"] = _values(result.counterexample, h)
        return Outcome(result.holds and found is not None, detail)

    return check


OBLIGATIONS: tuple[ProofObligation, ...] = (
    ProofObligation(
        "routing.predicted_miss_never_silent",
        "In every fleet history the fleet check accepts, a routed reuse that was not delivered "
        "(the chosen engine does not hold the claim, its predicate failed, or it served fewer "
        "blocks than predicted) was reported, with outcome missed. Witness: an accepted history "
        "whose predicted hit was missed.",
        Method.validity,
        _obligation(
            lambda h: z3.Implies(z3.Not(h.delivered()), z3.And(h.reported, z3.Not(h.report_delivered))),
            lambda h: z3.And(h.predicted > 0, z3.Not(h.report_delivered)),
        ),
    ),
    ProofObligation(
        "routing.reuse_attributed_to_holder",
        "In every accepted fleet history, delivered blocks and a delivered outcome are reported "
        "only for an engine that holds the claim. Witness: an accepted delivered reuse.",
        Method.validity,
        _obligation(
            lambda h: z3.Implies(z3.Or(h.report_delivered, h.report_blocks > 0), h.held_on(h.report_engine)),
            lambda h: h.report_delivered,
        ),
    ),
    ProofObligation(
        "routing.claim_held_where_accepted",
        "In every accepted fleet history exactly one engine accepted the claim, and a delivered "
        "reuse was served by it. Witness: an accepted reuse routed away from the holder (a "
        "reported miss).",
        Method.validity,
        _obligation(
            lambda h: z3.And(h.holds[0] != h.holds[1], z3.Implies(h.report_delivered, h.held_on(h.chosen))),
            lambda h: z3.Not(h.held_on(h.chosen)),
        ),
    ),
)


@dataclass(frozen=True)
class RoutingTraceClass:
    """Histories that break `rule`'s clause and keep every other one."""

    name: str
    rule: ConformanceRule


ROUTING_CLASSES: tuple[RoutingTraceClass, ...] = tuple(
    RoutingTraceClass(f"routing.{rule.value}", rule)
    for rule in (
        ConformanceRule.route_placement,
        ConformanceRule.route_attribution,
        ConformanceRule.route_miss_reported,
    )
)


def _histories(job: Job, condition: Any, limit: int) -> list[dict[str, Any]]:
    """Up to `limit` distinct histories satisfying `condition(h)` (a blocking clause per model)."""
    h = History.fresh(job)
    solver = job.solver()
    solver.add(h.engines_agree(), condition(h))
    terms = [*h.holds, h.chosen, h.predicate, h.predicted, h.served, h.reported, h.report_engine]
    terms += [h.report_names_claim, h.report_blocks, h.report_delivered]
    found: list[dict[str, Any]] = []
    while len(found) < limit and decided(solver.check(), solver):
        model = solver.model()
        found.append(_values(model, h))
        solver.add(z3.Or([term != model.eval(term, model_completion=True) for term in terms]))
    return found


def find_histories(cls: RoutingTraceClass, job: Job, limit: int = 8) -> list[dict[str, Any]]:
    """Up to `limit` distinct histories of `cls` (Z3, the job's seed and resource limit): the
    rule's clause broken, the others kept, some engine holding the claim. Empty when the class
    has no history; raises `SolverBudgetExhausted` when the budget runs out."""

    def breaks_only_its_rule(h: History) -> z3.BoolRef:
        clauses = rule_clauses(h)
        others = [clause for rule, clause in clauses.items() if rule is not cls.rule]
        return z3.And(z3.Or(h.holds[0], h.holds[1]), z3.Not(clauses[cls.rule]), *others)

    return _histories(job, breaks_only_its_rule, limit)


def accepted_histories(job: Job, limit: int = 16) -> list[dict[str, Any]]:
    """Up to `limit` distinct histories the fleet check must accept (the classes' positive
    control); a delivered and a missed outcome first."""
    delivered = _histories(job, lambda h: z3.And(fleet_accepts(h), h.report_delivered, h.predicted > 0), 1)
    missed = _histories(
        job, lambda h: z3.And(fleet_accepts(h), z3.Not(h.report_delivered), h.predicted > 0), 1
    )
    return [*delivered, *missed, *_histories(job, fleet_accepts, limit - 2)]
