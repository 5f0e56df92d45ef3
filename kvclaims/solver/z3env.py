"""Reproducible solver jobs: a fresh `z3.Context` per job, fixed seeds, `rlimit` everywhere.

A `Job` is the only way the solver package creates Z3 solvers. Each solver it hands out has
`random_seed` and `rlimit` set; the global `smt.random_seed` / `sat.random_seed` parameters are
set to the same seed when the job starts (z3 accepts `sat.random_seed` only globally). Results
are therefore a function of (formula, seed, rlimit, z3 version), and a check that runs out of
`rlimit` answers `unknown`, never hangs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import z3

Z3_VERSION: str = z3.get_version_string()
"""The z3 library version every committed proof result was produced with."""

DEFAULT_SEED = 0
DEFAULT_RLIMIT = 200_000_000
"""Resource units per check; generous for these models (a typical check uses < 1%)."""


class SolverBudgetExhausted(RuntimeError):
    """A check answered `unknown` (rlimit reached or incomplete theory): never a verdict."""


@dataclass
class Job:
    """One solver task with its own context. Not shared between tasks or threads."""

    seed: int = DEFAULT_SEED
    rlimit: int = DEFAULT_RLIMIT
    ctx: z3.Context = field(init=False)

    def __post_init__(self) -> None:
        z3.set_param("smt.random_seed", self.seed)
        z3.set_param("sat.random_seed", self.seed)
        self.ctx = z3.Context()

    def _configure(self, solver: z3.Solver | z3.Optimize) -> None:
        solver.set("random_seed", self.seed)
        solver.set("rlimit", self.rlimit)

    def solver(self) -> z3.Solver:
        """A plain incremental SMT solver."""
        solver = z3.Solver(ctx=self.ctx)
        self._configure(solver)
        return solver

    def finite_domain_solver(self) -> z3.Solver:
        """A solver for Booleans and bounded integers (z3's QF_FD logic: bit-blasting to SAT).
        Its unsat is as final as the SMT core's; a formula outside the fragment answers
        `unknown`, which `decided` turns into an error, never a verdict."""
        solver = z3.SolverFor("QF_FD", ctx=self.ctx)
        self._configure(solver)
        return solver

    def horn(self) -> z3.Solver:
        """A solver for constrained Horn clauses (Spacer engine)."""
        solver = z3.SolverFor("HORN", ctx=self.ctx)
        self._configure(solver)
        solver.set("fp.spacer.random_seed", self.seed)
        return solver

    def optimize(self) -> z3.Optimize:
        """An optimizing solver (lexicographic objectives)."""
        optimizer = z3.Optimize(ctx=self.ctx)
        self._configure(optimizer)
        return optimizer

    # --- small constructors bound to this context ---

    def bool(self, name: str) -> z3.BoolRef:
        return z3.Bool(name, self.ctx)

    def int(self, name: str) -> z3.ArithRef:
        return z3.Int(name, self.ctx)

    def true(self) -> z3.BoolRef:
        return z3.BoolVal(True, self.ctx)

    def false(self) -> z3.BoolRef:
        return z3.BoolVal(False, self.ctx)

    def val(self, number: int) -> z3.IntNumRef:
        return z3.IntVal(number, self.ctx)


def decided(result: z3.CheckSatResult, solver: z3.Solver | z3.Optimize) -> bool:
    """`True` for sat, `False` for unsat; `unknown` raises (fail closed, never a verdict)."""
    if result == z3.sat:
        return True
    if result == z3.unsat:
        return False
    raise SolverBudgetExhausted(f"solver answered unknown: {solver.reason_unknown()}")


def all_of(ctx: z3.Context, terms: list[z3.BoolRef] | tuple[z3.BoolRef, ...]) -> z3.BoolRef:
    """`And` that accepts an empty list (true) and stays in `ctx`."""
    terms = list(terms)
    if not terms:
        return z3.BoolVal(True, ctx)
    return terms[0] if len(terms) == 1 else z3.And(terms)


def any_of(ctx: z3.Context, terms: list[z3.BoolRef] | tuple[z3.BoolRef, ...]) -> z3.BoolRef:
    """`Or` that accepts an empty list (false) and stays in `ctx`."""
    terms = list(terms)
    if not terms:
        return z3.BoolVal(False, ctx)
    return terms[0] if len(terms) == 1 else z3.Or(terms)


def sparse_model(
    solver: z3.Solver, target: list[z3.BoolRef] | tuple[z3.BoolRef, ...], preferred: list[z3.BoolRef]
) -> z3.ModelRef | None:
    """A model of `target` (under the solver's assertions) in which as many `preferred`
    literals as the unsat cores allow hold; `None` when `target` is unsat.

    Each round assumes every still-preferred literal; a minimized unsat core names literals
    that cannot all hold, and they are dropped. Witnesses stay small and readable, and the
    procedure is deterministic for a fixed seed.
    """
    solver.set("core.minimize", True)
    solver.push()
    try:
        solver.add(*target)
        assumed = list(preferred)
        while True:
            if decided(solver.check(*assumed), solver):
                return solver.model()
            core = {literal.get_id() for literal in solver.unsat_core()}
            kept = [literal for literal in assumed if literal.get_id() not in core]
            if len(kept) == len(assumed):
                return None
            assumed = kept
    finally:
        solver.pop()
        solver.set("core.minimize", False)
