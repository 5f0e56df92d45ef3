"""Proof engines: validity, Spacer/CHC inductive invariants, k-induction, bounded model checking.

A `TransitionSystem` is a finite set of named state variables with `init` and `trans`
constructors; a *bad step* is a predicate over a state and the step's inputs (an event that
must never be legal from that state). Engines answer with a result object, never `True`:

- `prove_valid`: a formula holds for every assignment (its negation is unsat).
- `spacer_invariant`: Spacer solves the CHC `Init -> Inv; Inv /\\ T -> Inv'; Inv /\\ Bad -> false`;
  the invariant it returns is then re-checked by a plain solver on all three clauses, and the
  result says whether the re-check passed. An `unsat` CHC yields the shortest counterexample
  found by BMC.
- `k_induction`: base case by BMC up to k, step case over k+1 pairwise-distinct states (simple
  paths), for increasing k; complete for finite systems.
- `bmc` / `bmc_many`: the shortest path (at most `bound` steps) from an initial state to a step
  satisfying a target, as concrete values (several targets share one unrolling).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import z3

from kvclaims.solver.z3env import Job, all_of, decided

State = list[z3.ExprRef]
Inputs = list[z3.ExprRef]


@dataclass
class TransitionSystem:
    """State variables (name, sort), step inputs (name, sort), and the two relations."""

    job: Job
    state_vars: Sequence[tuple[str, z3.SortRef]]
    input_vars: Sequence[tuple[str, z3.SortRef]]
    init: Callable[[State], z3.BoolRef]
    trans: Callable[[State, Inputs, State], z3.BoolRef]

    def state(self, tag: str) -> State:
        return [z3.Const(f"{tag}.{name}", sort) for name, sort in self.state_vars]

    def inputs(self, tag: str) -> Inputs:
        return [z3.Const(f"{tag}.{name}", sort) for name, sort in self.input_vars]


@dataclass(frozen=True)
class Step:
    """One step of a concrete path: the state before it and the inputs taken."""

    state: dict[str, int | bool]
    inputs: dict[str, int | bool]


@dataclass(frozen=True)
class ValidityResult:
    holds: bool
    counterexample: z3.ModelRef | None


@dataclass(frozen=True)
class InvariantResult:
    holds: bool
    invariant: str | None
    rechecked: bool
    counterexample: list[Step] | None


@dataclass(frozen=True)
class InductionResult:
    holds: bool
    k: int | None
    counterexample: list[Step] | None


def prove_valid(job: Job, formula: z3.BoolRef, assumptions: Sequence[z3.BoolRef] = ()) -> ValidityResult:
    """Does `formula` hold under `assumptions` for every assignment?"""
    solver = job.solver()
    solver.add(*assumptions)
    solver.add(z3.Not(formula))
    if decided(solver.check(), solver):
        return ValidityResult(False, solver.model())
    return ValidityResult(True, None)


def _value(model: z3.ModelRef, term: z3.ExprRef) -> int | bool:
    found = model.eval(term, model_completion=True)
    return z3.is_true(found) if z3.is_bool(found) else found.as_long()


def bmc(
    system: TransitionSystem,
    target: Callable[[State, Inputs], z3.BoolRef],
    bound: int,
    constraint: Callable[[State, Inputs], z3.BoolRef] | None = None,
) -> list[Step] | None:
    """The shortest path of at most `bound` steps whose last step satisfies `target`.

    Every step before the last is a transition of `system`; `constraint`, if given, must hold
    at every step (last included). The last step's inputs are part of the path.
    """
    return bmc_many(system, {"target": target}, bound, constraint)["target"]


def bmc_many(
    system: TransitionSystem,
    targets: Mapping[str, Callable[[State, Inputs], z3.BoolRef]],
    bound: int,
    constraint: Callable[[State, Inputs], z3.BoolRef] | None = None,
) -> dict[str, list[Step] | None]:
    """`bmc` for several targets over one unrolling (each gets its own shortest path)."""
    solver = system.job.solver()
    states = [system.state("s0")]
    inputs: list[Inputs] = []
    found: dict[str, list[Step] | None] = dict.fromkeys(targets)
    solver.add(system.init(states[0]))
    for k in range(bound + 1):
        inputs.append(system.inputs(f"i{k}"))
        if constraint is not None:
            solver.add(constraint(states[k], inputs[k]))
        for name, target in targets.items():
            if found[name] is not None:
                continue
            solver.push()
            solver.add(target(states[k], inputs[k]))
            if decided(solver.check(), solver):
                found[name] = _path(system, solver.model(), states, inputs, k)
            solver.pop()
        if all(path is not None for path in found.values()):
            break
        states.append(system.state(f"s{k + 1}"))
        solver.add(system.trans(states[k], inputs[k], states[k + 1]))
    return found


def _path(
    system: TransitionSystem, model: z3.ModelRef, states: list[State], inputs: list[Inputs], k: int
) -> list[Step]:
    return [
        Step(
            {name: _value(model, var) for (name, _), var in zip(system.state_vars, states[j], strict=True)},
            {name: _value(model, var) for (name, _), var in zip(system.input_vars, inputs[j], strict=True)},
        )
        for j in range(k + 1)
    ]


def spacer_invariant(
    system: TransitionSystem, bad: Callable[[State, Inputs], z3.BoolRef], cex_bound: int = 12
) -> InvariantResult:
    """Prove that no reachable state takes a `bad` step, by an inductive invariant from Spacer."""
    job = system.job
    sorts = [sort for _, sort in system.state_vars]
    invariant = z3.Function("Inv", *sorts, z3.BoolSort(job.ctx))
    now, step, after = system.state("x"), system.inputs("u"), system.state("y")
    horn = job.horn()
    horn.add(z3.ForAll(now, z3.Implies(system.init(now), invariant(*now))))
    horn.add(
        z3.ForAll(
            now + step + after,
            z3.Implies(z3.And(invariant(*now), system.trans(now, step, after)), invariant(*after)),
        )
    )
    horn.add(
        z3.ForAll(now + step, z3.Implies(z3.And(invariant(*now), bad(now, step)), z3.BoolVal(False, job.ctx)))
    )
    if not decided(horn.check(), horn):
        return InvariantResult(False, None, False, bmc(system, bad, cex_bound))
    found = _interpretation(horn.model(), invariant, now)
    at_after = z3.substitute(found, *zip(now, after, strict=True))
    base = prove_valid(job, z3.Implies(system.init(now), found))
    inductive = prove_valid(job, z3.Implies(z3.And(found, system.trans(now, step, after)), at_after))
    safe = prove_valid(job, z3.Not(z3.And(found, bad(now, step))))
    rechecked = base.holds and inductive.holds and safe.holds
    return InvariantResult(rechecked, found.sexpr(), rechecked, None)


def _interpretation(model: z3.ModelRef, function: z3.FuncDeclRef, args: State) -> z3.BoolRef:
    """The model's interpretation of `function` applied to `args` (Spacer reports a function
    interpretation over de Bruijn variables `Var(i)` = argument i; `eval` does not apply it)."""
    interp = model[function]
    if isinstance(interp, z3.FuncInterp):
        if interp.num_entries():
            raise ValueError("Spacer returned a point-wise invariant; not supported")
        body = interp.else_value()
    else:
        body = interp
    return z3.substitute_vars(body, *args)


def k_induction(
    system: TransitionSystem, bad: Callable[[State, Inputs], z3.BoolRef], max_k: int = 16
) -> InductionResult:
    """Prove that no reachable state takes a `bad` step, by k-induction over simple paths."""
    job = system.job
    for k in range(1, max_k + 1):
        counterexample = bmc(system, bad, k - 1)
        if counterexample is not None:
            return InductionResult(False, None, counterexample)
        solver = job.solver()
        states = [system.state(f"k{j}") for j in range(k + 1)]
        inputs = [system.inputs(f"ki{j}") for j in range(k + 1)]
        for j in range(k):
            solver.add(system.trans(states[j], inputs[j], states[j + 1]))
            solver.add(z3.Not(bad(states[j], inputs[j])))
        for a in range(k + 1):
            for b in range(a + 1, k + 1):
                solver.add(
                    z3.Not(all_of(job.ctx, [x == y for x, y in zip(states[a], states[b], strict=True)]))
                )
        solver.add(bad(states[k], inputs[k]))
        if not decided(solver.check(), solver):
            return InductionResult(True, k, None)
    return InductionResult(False, None, None)
