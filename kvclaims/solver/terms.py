"""Building large Z3 formulas by direct C API calls.

z3py's operators check sorts, coerce operands and wrap every intermediate term in a
reference-counted Python object; for the lowering model (thousands of terms per symbolic
descriptor) that bookkeeping cost ten times the C calls that make the terms. `Terms` makes the
same C calls, with the same operands in the same order, so a formula it builds is the formula
z3py builds, node for node and with the same AST ids (fresh nodes are numbered in order of
creation), and a solver run on it behaves the same. Its terms are raw ASTs held by the builder
until `release`; `bool_ref` / `int_ref` hand one to z3py code.
"""

from __future__ import annotations

from collections.abc import Sequence

import z3
from z3 import z3core

Ast = z3.Ast
Operand = Ast | int


class Terms:
    """A term builder bound to one `z3.Context`. Every term it returns stays alive until
    `release` (which z3py objects made by `bool_ref` / `int_ref` outlive)."""

    def __init__(self, ctx: z3.Context) -> None:
        self.ctx = ctx
        self._ref = ctx.ref()
        self._held: list[Ast] = []
        self._numerals: dict[int, Ast] = {}
        self._int_sort = z3core.Z3_mk_int_sort(self._ref)

    def _keep(self, ast: Ast) -> Ast:
        z3core.Z3_inc_ref(self._ref, ast)
        self._held.append(ast)
        return ast

    def release(self) -> None:
        """Drop the builder's hold on every term it made (terms still referenced live on),
        newest first: a list of z3py terms that dies frees them in that order, and the ids of
        freed terms are reused by the next ones made."""
        for ast in reversed(self._held):
            z3core.Z3_dec_ref(self._ref, ast)
        self._held.clear()
        self._numerals.clear()

    def bool_ref(self, ast: Ast) -> z3.BoolRef:
        return z3.BoolRef(ast, self.ctx)

    def int_ref(self, ast: Ast) -> z3.ArithRef:
        return z3.ArithRef(ast, self.ctx)

    # --- leaves ---

    def num(self, value: int) -> Ast:
        """The integer numeral `value` (as `z3.IntVal`)."""
        found = self._numerals.get(value)
        if found is None:
            found = self._numerals[value] = self._keep(
                z3core.Z3_mk_numeral(self._ref, str(value), self._int_sort)
            )
        return found

    def false(self) -> Ast:
        return self._keep(z3core.Z3_mk_false(self._ref))

    def true(self) -> Ast:
        return self._keep(z3core.Z3_mk_true(self._ref))

    def _operand(self, value: Operand) -> Ast:
        return self.num(value) if isinstance(value, int) else value

    def _array(self, terms: Sequence[Ast]) -> z3.Ast:
        return (Ast * len(terms))(*terms)

    # --- arithmetic comparisons and sums (operands: terms or Python ints, as z3py coerces) ---

    def eq(self, a: Operand, b: Operand) -> Ast:
        a, b = self._operand(a), self._operand(b)
        return self._keep(z3core.Z3_mk_eq(self._ref, a, b))

    def ne(self, a: Operand, b: Operand) -> Ast:
        a, b = self._operand(a), self._operand(b)
        return self._keep(z3core.Z3_mk_distinct(self._ref, 2, self._array([a, b])))

    def ge(self, a: Operand, b: Operand) -> Ast:
        a, b = self._operand(a), self._operand(b)
        return self._keep(z3core.Z3_mk_ge(self._ref, a, b))

    def gt(self, a: Operand, b: Operand) -> Ast:
        a, b = self._operand(a), self._operand(b)
        return self._keep(z3core.Z3_mk_gt(self._ref, a, b))

    def le(self, a: Operand, b: Operand) -> Ast:
        a, b = self._operand(a), self._operand(b)
        return self._keep(z3core.Z3_mk_le(self._ref, a, b))

    def lt(self, a: Operand, b: Operand) -> Ast:
        a, b = self._operand(a), self._operand(b)
        return self._keep(z3core.Z3_mk_lt(self._ref, a, b))

    def in_range(self, var: Ast, low: int, end: int) -> Ast:
        """`low <= var < end` (as `z3.And(var >= low, var < end)`)."""
        return self.and_([self.ge(var, low), self.lt(var, end)])

    # --- Boolean connectives ---

    def not_(self, a: Ast) -> Ast:
        return self._keep(z3core.Z3_mk_not(self._ref, a))

    def implies(self, a: Ast, b: Ast) -> Ast:
        return self._keep(z3core.Z3_mk_implies(self._ref, a, b))

    def and_(self, terms: Sequence[Ast]) -> Ast:
        """`z3.And(terms)` (at least one term; see `all_of` for the empty case)."""
        return self._keep(z3core.Z3_mk_and(self._ref, len(terms), self._array(terms)))

    def or_(self, terms: Sequence[Ast]) -> Ast:
        return self._keep(z3core.Z3_mk_or(self._ref, len(terms), self._array(terms)))

    def all_of(self, terms: Sequence[Ast]) -> Ast:
        """As `kvclaims.solver.z3env.all_of`: true when empty, the term itself when one."""
        if not terms:
            return self.true()
        return terms[0] if len(terms) == 1 else self.and_(terms)

    def any_of(self, terms: Sequence[Ast]) -> Ast:
        """As `kvclaims.solver.z3env.any_of`: false when empty, the term itself when one."""
        if not terms:
            return self.false()
        return terms[0] if len(terms) == 1 else self.or_(terms)

    def ite(self, condition: Ast, then: Operand, otherwise: Operand) -> Ast:
        """`z3.If(condition, then, otherwise)` (numerals made in that order)."""
        then, otherwise = self._operand(then), self._operand(otherwise)
        return self._keep(z3core.Z3_mk_ite(self._ref, condition, then, otherwise))
