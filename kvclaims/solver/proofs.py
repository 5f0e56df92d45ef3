"""Named proof obligations and how one is run.

A `ProofObligation` is a name, a statement in words, a method and a check. Running it
(`run_obligation`) gives it a fresh `Job` (its own `z3.Context`, fixed seed, rlimit), so no
result depends on which obligations ran before. The check returns an `Outcome`: `proved` and a
JSON-ready `detail` (witnesses, invariants, bounds, counterexamples), deterministic for the
pinned z3 version. A check that exhausts its budget is `unknown`, never `proved`.

The registry of every obligation is `kvclaims.solver.obligations.all_obligations`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kvclaims.solver.facts import Facts
from kvclaims.solver.z3env import DEFAULT_RLIMIT, DEFAULT_SEED, Z3_VERSION, Job, SolverBudgetExhausted


class Method(StrEnum):
    """How an obligation is discharged."""

    validity = "validity"
    """The negation of a universally quantified formula over a finite or integer domain is unsat."""
    spacer_invariant = "spacer_chc_invariant"
    """Spacer finds an inductive invariant of the CHC system; a plain solver re-checks it."""
    k_induction = "k_induction"
    """Base case by BMC, step case over simple paths of length k."""
    bmc = "bmc_bound"
    """Bounded model checking: a witness path within the stated bound (reachability)."""
    witness = "witness_search"
    """Satisfiability: a witness exists, is decoded, and is re-checked by the Python code."""


class Verdict(StrEnum):
    proved = "proved"
    failed = "failed"
    unknown = "unknown"


@dataclass(frozen=True)
class Outcome:
    proved: bool
    detail: dict[str, Any] = field(default_factory=dict)


Check = Callable[[Job, Facts], Outcome]


@dataclass(frozen=True)
class ProofObligation:
    """A named property, what it says, how it is proved, and the check that proves it."""

    name: str
    statement: str
    method: Method
    check: Check


@dataclass(frozen=True)
class ProofResult:
    """The outcome of one obligation. `seconds` is wall time, kept out of drift checks."""

    name: str
    statement: str
    method: Method
    verdict: Verdict
    detail: dict[str, Any]
    seed: int
    rlimit: int
    seconds: float

    @property
    def proved(self) -> bool:
        return self.verdict is Verdict.proved

    def checked_document(self) -> dict[str, Any]:
        """What `proofs/<name>.json` commits and the drift check compares (no timing)."""
        return {
            "format": "kvclaims-proof/1",
            "name": self.name,
            "statement": self.statement,
            "method": self.method.value,
            "verdict": self.verdict.value,
            "z3_version": Z3_VERSION,
            "seed": self.seed,
            "rlimit": self.rlimit,
            "detail": self.detail,
        }


def run_obligation(
    obligation: ProofObligation,
    facts: Facts | None = None,
    seed: int = DEFAULT_SEED,
    rlimit: int = DEFAULT_RLIMIT,
) -> ProofResult:
    """Run one obligation in a fresh job; budget exhaustion is `unknown`, not an exception."""
    job = Job(seed=seed, rlimit=rlimit)
    started = time.perf_counter()
    try:
        outcome = obligation.check(job, facts or Facts.reference())
        verdict = Verdict.proved if outcome.proved else Verdict.failed
        detail = outcome.detail
    except SolverBudgetExhausted as exhausted:
        verdict, detail = Verdict.unknown, {"reason": str(exhausted)}
    return ProofResult(
        name=obligation.name,
        statement=obligation.statement,
        method=obligation.method,
        verdict=verdict,
        detail=detail,
        seed=seed,
        rlimit=rlimit,
        seconds=time.perf_counter() - started,
    )
