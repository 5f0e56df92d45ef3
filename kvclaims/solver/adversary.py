"""Adversarial descriptors: near-misses of positive rows that look positive but must fail closed.

For each positive row (`kvclaims.solver.positives`) the adversary builds one symbolic
descriptor over the row's exact layout plus *spare* sites: a contradicting twin of every
evidence item of the mode's bundle, a renamed copy of every adapter's bundle items at every
shallower adapter depth and at routing_hook (to redeclare an adapter), and a telemetry-join
adapter for enforcement obligations.
Every variable is pinned to the positive row except where a *mutation class* lets it change.

A class is a small Z3 problem over *knobs* (integer variables: which obligation, which
variant, which precondition, ...). The knob values are the class's **view**: two mutants of
one class and one base row are different exactly when their knob values differ, and each found
mutant is excluded from the rest of the search by a blocking clause over the knobs. The class
also states, through the lowering model, what makes the mutant a near miss (for per-obligation
classes: the mutated obligation is now missing; otherwise: the row is no longer sound).
Every mutant is decoded into a real `descriptor: 1` document and judged by `kvclaims.spec.lower`;
it *fails closed* when the Python label is not sound, and the model's verdict must agree.

Classes realise all 16 mutation kinds of seed 000 section 8.2 (`seed_kind`) and more.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import z3

from kvclaims.solver.facts import Facts
from kvclaims.solver.lowering_model import ConcreteVerdict, SymbolicVerdict, judge
from kvclaims.solver.lowering_proofs import python_verdict, verdict_json
from kvclaims.solver.parallel import OrderedPool
from kvclaims.solver.positives import PositiveRow
from kvclaims.solver.symbolic import (
    DEFECTS,
    DEPTHS,
    NO_INFERENCE,
    PRECONDITIONS,
    SCOPES,
    SIGNALS,
    STATUSES,
    AdapterSite,
    AnchorDefect,
    EvidenceSite,
    Layout,
    SymbolicDescriptor,
    defect_of,
    obligation_of,
)
from kvclaims.solver.terms import Ast, Terms
from kvclaims.solver.z3env import DEFAULT_SEED, Job, any_of, decided
from kvclaims.spec.tables import OBSERVING_ANCHOR_KINDS
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    ApproximationSignal,
    EvidenceScope,
    EvidenceStatus,
    Label,
    Obligation,
    TelemetryJoinPrecondition,
)

Value = int | bool | z3.ExprRef
D = AdapterDepth
S = ApproximationSignal
SPARE_TELEMETRY_ADAPTER = "adversary-telemetry-join"
O_ = Obligation


# --- the base: a positive row with spare sites ---------------------------------------------


@dataclass(frozen=True)
class _Shape:
    """Where the spare sites of a base layout are."""

    originals: tuple[int, ...]
    twin: dict[int, int]
    copies: dict[tuple[int, AdapterDepth], list[tuple[int, int]]]
    telemetry: dict[Obligation, int]
    telemetry_adapter: int | None
    copy_of: dict[int, int]


def _base_layout(row: PositiveRow, facts: Facts) -> tuple[Layout, _Shape]:
    """The row's exact layout plus the spare sites the classes need (see the module docstring)."""
    exact = Layout.of(row.descriptor)
    bundle = facts.mode_bundles[row.mode]
    adapters = list(exact.adapters)
    # (site, kind, index of the original item in exact.evidence it derives from)
    entries: list[tuple[EvidenceSite, str, int | None]] = [
        (site, "original", k) for k, site in enumerate(exact.evidence)
    ]
    entries += [
        (EvidenceSite(site.name, site.adapter), "twin", k)
        for k, site in enumerate(exact.evidence)
        if obligation_of(site.name, facts) in bundle
    ]
    copy_of: dict[int, int] = {}
    for index, adapter in enumerate(exact.adapters):
        for depth in DEPTHS[1:]:
            if depth is adapter.depth or (depth > adapter.depth and depth is not D.routing_hook):
                continue
            name = f"{adapter.name}-as-{depth.value.replace('_', '-')}"
            adapters.append(AdapterSite(name, depth, adapter.trust_boundary))
            copy_of[len(adapters) - 1] = index
            entries += [
                (EvidenceSite(site.name, len(adapters) - 1, site.template), "copy", k)
                for k, site in enumerate(exact.evidence)
                if site.adapter == index and obligation_of(site.name, facts) in bundle
            ]
    enforcement = [o for o in Obligation if o in bundle and o in facts.enforcement_obligations]
    telemetry_adapter = None
    if enforcement:
        adapters.append(AdapterSite(SPARE_TELEMETRY_ADAPTER, D.telemetry_join))
        telemetry_adapter = len(adapters) - 1
        entries += [(EvidenceSite(o.value, telemetry_adapter), "telemetry", None) for o in enforcement]
    # candidate order: native first, then adapters in list order (stable inside each)
    order = sorted(
        range(len(entries)), key=lambda n: -1 if entries[n][0].adapter is None else entries[n][0].adapter
    )
    position = {n: p for p, n in enumerate(order)}
    layout = Layout(tuple(adapters), tuple(entries[n][0] for n in order), exact.observations)
    original_at = {entries[n][2]: position[n] for n in range(len(entries)) if entries[n][1] == "original"}
    twin: dict[int, int] = {}
    copies: dict[tuple[int, AdapterDepth], list[tuple[int, int]]] = defaultdict(list)
    telemetry: dict[Obligation, int] = {}
    for n, (site, kind, k) in enumerate(entries):
        if kind == "twin":
            twin[original_at[k]] = position[n]
        elif kind == "copy":
            assert site.adapter is not None
            key = (copy_of[site.adapter], adapters[site.adapter].depth)
            copies[key].append((original_at[k], position[n]))
        elif kind == "telemetry":
            telemetry[obligation_of(site.name, facts)] = position[n]
    originals = tuple(sorted(original_at.values()))
    return layout, _Shape(originals, twin, dict(copies), telemetry, telemetry_adapter, copy_of)


class Base:
    """A positive row as a symbolic descriptor pinned to its values, with its spare sites."""

    def __init__(self, row: PositiveRow, facts: Facts, seed: int) -> None:
        self.row, self.facts = row, facts
        self.job = Job(seed=seed)
        self.layout, self.shape = _base_layout(row, facts)
        self.d = SymbolicDescriptor(self.job, self.layout, "m")
        self.v: SymbolicVerdict = judge(self.d, facts)
        self.base = self._base_values()
        self.variables = [(var, var.get_id()) for var in self.d.variables()]
        self.constants = {var_id: _constant(self.job, self.base[var_id]) for _, var_id in self.variables}
        self.named = {self.d.names[var_id]: value for var_id, value in self.base.items()}
        self._knobs = 0
        originals = list(self.shape.originals)
        mask = z3.Sum([z3.If(self.v.counting[i], 1 << k, 0) for k, i in enumerate(originals)])
        verdict, counting = self.instantiate(Overrides(), [self.v.sound(), mask])
        if not z3.is_true(verdict):
            raise AssertionError(f"{row.ident}: the model does not judge the positive row sound")
        self.counting = {i for k, i in enumerate(originals) if counting.as_long() >> k & 1}
        bundle = facts.mode_bundles[row.mode]
        self.targets = [o for o in Obligation if o in bundle and self.sites_of(o)]

    def _base_values(self) -> dict[int, Value]:
        d, descriptor, row = self.d, self.row.descriptor, self.row
        values: dict[int, Value] = {}
        originals = set(self.shape.originals)
        for index, (site, ev) in enumerate(zip(self.layout.evidence, d.evidence, strict=True)):
            item = site.template
            if index in originals and item is not None:
                values |= {
                    ev.present.get_id(): True,
                    ev.status.get_id(): STATUSES.index(item.status),
                    ev.scope.get_id(): SCOPES.index(item.scope),
                    ev.defect.get_id(): DEFECTS.index(defect_of(item.anchor)),
                }
            else:
                values |= {
                    ev.present.get_id(): False,
                    ev.status.get_id(): 0,
                    ev.scope.get_id(): 0,
                    ev.defect.get_id(): 0,
                }
        for site, ob in zip(self.layout.observations, d.observations, strict=True):
            observation = site.template
            assert observation is not None
            values |= {
                ob.present.get_id(): True,
                ob.scope.get_id(): SCOPES.index(observation.scope),
                ob.defect.get_id(): DEFECTS.index(defect_of(observation.anchor)),
            }
        for index, adapter in enumerate(self.layout.adapters):
            declared = self._declared_preconditions(index)
            for pre, var in d.preconditions[index].items():
                values[var.get_id()] = adapter.depth is D.telemetry_join and declared.get(pre, False)
        present = set(descriptor.approximation_signals)
        values |= {var.get_id(): s in present for s, var in d.signals.items()}
        declared_forbidden = {(f.mode, f.via) for f in descriptor.forbidden_lowerings}
        values |= {var.get_id(): key in declared_forbidden for key, var in d.forbidden.items()}
        values[d.mode.get_id()] = list(type(row.mode)).index(row.mode)
        values[d.depth.get_id()] = DEPTHS.index(row.depth)
        values |= {var.get_id(): NO_INFERENCE for var in d.inferred.values()}
        return values

    def _declared_preconditions(self, adapter_index: int) -> dict[TelemetryJoinPrecondition, bool]:
        if adapter_index == self.shape.telemetry_adapter:
            return dict.fromkeys(PRECONDITIONS, True)
        original = self.shape.copy_of.get(adapter_index, adapter_index)
        return dict(self.row.descriptor.adapters[original].preconditions)

    # --- building problems ---

    def instantiate(self, overrides: Overrides, terms: list[z3.ExprRef]) -> list[z3.ExprRef]:
        """`terms` with every descriptor variable replaced by its base value, or, where
        overridden, by the chain of its overrides (the last matching one wins) over the knobs.
        What remains is a formula over the knobs alone, so each class's search is small.
        (`z3.substitute` checks every pair in Python; the C call with prebuilt arrays does not.
        The chains are built by `Terms` and held by z3py references in the same lists as when
        z3py built them, so the terms freed on return are freed in the same order.)"""
        count = len(self.variables)
        sources, targets = (z3.Ast * count)(), (z3.Ast * count)()
        ctx = self.job.ctx
        t = Terms(ctx)
        alive = []
        conditions: dict[int, z3.ExprRef] = {}
        for k, (var, var_id) in enumerate(self.variables):
            value: z3.ExprRef = self.constants[var_id]
            for condition, replacement in overrides.by_var.get(var_id, []):
                term = conditions.get(id(condition))
                if term is None:
                    term = conditions[id(condition)] = t.bool_ref(condition.build(t))
                chained = t.ite(term.as_ast(), _constant_term(t, replacement), value.as_ast())
                value = z3.ExprRef(chained, ctx)
            alive.append(value)
            sources[k], targets[k] = var.as_ast(), value.as_ast()
        t.release()
        found = []
        for term in terms:
            replaced = z3.Z3_substitute(ctx.ref(), term.as_ast(), count, sources, targets)
            found.append(z3.simplify(z3.z3._to_expr_ref(replaced, ctx)))
        return found

    def values(self, chosen: dict[int, int], overrides: Overrides) -> dict[str, int | bool]:
        """Every variable's value by name, from the knob values alone: the base, with each
        override whose condition holds applied in Python (no model read)."""
        values = dict(self.named)
        for var_id, changes in overrides.by_var.items():
            for condition, replacement in changes:
                if condition.holds(chosen):
                    values[self.d.names[var_id]] = replacement  # type: ignore[assignment]
        return values

    def knob(self, name: str, values: list[str]) -> Knob:
        self._knobs += 1
        var = self.job.int(f"knob{self._knobs}.{name}")
        return Knob(name, var, tuple(values), var.get_id())

    def sites_of(self, obligation: Obligation, *, adapters_only: bool = False) -> list[int]:
        """Original sites of `obligation` that count in the positive row."""
        return [
            i
            for i in sorted(self.counting)
            if obligation_of(self.layout.evidence[i].name, self.facts) is obligation
            and not (adapters_only and self.layout.evidence[i].adapter is None)
        ]

    def telemetry_adapters(self) -> list[int]:
        """Original telemetry_join adapters whose items count in the positive row."""
        return sorted(
            {
                self.layout.evidence[i].adapter  # type: ignore[misc]
                for i in self.counting
                if self.layout.slot(self.layout.evidence[i]) is D.telemetry_join
            }
        )


def _constant(job: Job, value: Value) -> z3.ExprRef:
    if isinstance(value, z3.ExprRef):
        return value
    return z3.BoolVal(value, job.ctx) if isinstance(value, bool) else z3.IntVal(value, job.ctx)


def _constant_term(t: Terms, value: Value) -> Ast:
    """`_constant` made by `Terms` (the same term)."""
    if isinstance(value, z3.ExprRef):
        return value.as_ast()
    if isinstance(value, bool):
        return t.true() if value else t.false()
    return t.num(value)


@dataclass(frozen=True)
class Knob:
    """One dimension of a class's view: an integer variable and the name of each value."""

    name: str
    var: z3.ArithRef
    values: tuple[str, ...]
    var_id: int

    def domain(self) -> z3.BoolRef:
        return z3.And(self.var >= 0, self.var < len(self.values))

    def is_(self, *indices: int) -> When:
        return When(((self, frozenset(indices)),))


@dataclass(frozen=True)
class When:
    """A condition on knobs: each listed knob takes one of its listed values. It is both a Z3
    term (for the search) and a Python predicate (to rebuild a mutant from its knob values
    without reading the whole model)."""

    allowed: tuple[tuple[Knob, frozenset[int]], ...]

    def __and__(self, other: When) -> When:
        return When(self.allowed + other.allowed)

    def term(self) -> z3.BoolRef:
        t = Terms(self.allowed[0][0].var.ctx)
        try:
            return t.bool_ref(self.build(t))
        finally:
            t.release()

    def build(self, t: Terms) -> Ast:
        """`term()` as a raw term of `t` (as z3py's `And` of `Or`s of equalities builds it)."""
        return t.and_(
            [t.or_([t.eq(knob.var.as_ast(), v) for v in sorted(values)]) for knob, values in self.allowed]
        )

    def holds(self, chosen: dict[int, int]) -> bool:
        return all(chosen[knob.var_id] in values for knob, values in self.allowed)


@dataclass
class Problem:
    """A class's search on one base: its knobs (the view), what changes, and the near miss."""

    knobs: list[Knob]
    overrides: Overrides
    constraints: list[z3.BoolRef]


class Overrides:
    """Conditional replacements of base values, by variable."""

    def __init__(self) -> None:
        self.by_var: dict[int, list[tuple[When, Value]]] = defaultdict(list)
        self.variables: list[z3.ExprRef] = []

    def set(self, var: z3.ExprRef, when: When, value: Value) -> None:
        if var.get_id() not in self.by_var:
            self.variables.append(var)
        self.by_var[var.get_id()].append((when, value))

    def site(self, b: Base, index: int, when: When, **fields: Value) -> None:
        ev = b.d.evidence[index]
        for name, value in fields.items():
            self.set(getattr(ev, name), when, value)

    def move(self, b: Base, source: int, target: int, when: When) -> None:
        """Site `target` takes `source`'s base values and `source` disappears."""
        src, dst = b.d.evidence[source], b.d.evidence[target]
        for name in ("present", "status", "scope", "defect"):
            self.set(getattr(dst, name), when, b.base[getattr(src, name).get_id()])
        self.set(src.present, when, False)
        for name in ("status", "scope", "defect"):
            self.set(getattr(src, name), when, 0)

    def remove(self, b: Base, index: int, when: When) -> None:
        self.site(b, index, when, present=False, status=0, scope=0, defect=0)

    def infer(
        self, b: Base, obligation: Obligation, signal: ApproximationSignal, when: When, *, add_signal: bool
    ) -> None:
        self.set(b.d.inferred[obligation], when, SIGNALS.index(signal))
        if add_signal:
            self.set(b.d.signals[signal], when, True)


# --- mutation classes ------------------------------------------------------------------------


@dataclass(frozen=True)
class MutationClass:
    """A family of near-misses: an id, the seed 000 8.2 kind it realises (or `None`), what it
    does, and the builder of its Z3 problem for one base (`None` when it does not apply)."""

    id: str
    seed_kind: str | None
    summary: str
    build: Callable[[Base], Problem | None]


def _choice(b: Base, knob: Knob, options: list[Any]) -> Iterator[tuple[When, Any]]:
    for index, option in enumerate(options):
        yield knob.is_(index), option


def _per_target(
    edit: Callable[[Base, Overrides, z3.BoolRef, Obligation, Any], None],
    *,
    variants: list[tuple[str, Any]] | None = None,
    targets: Callable[[Base], list[Obligation]] = lambda b: b.targets,
) -> Callable[[Base], Problem | None]:
    """A class that mutates every counting item of one target obligation; the near miss is
    that the target is missing afterwards."""

    def build(b: Base) -> Problem | None:
        chosen = targets(b)
        if not chosen:
            return None
        target = b.knob("obligation", [o.value for o in chosen])
        knobs = [target]
        options: list[tuple[str, Any]] = variants or [("", None)]
        variant = b.knob("variant", [name for name, _ in options]) if variants else None
        if variant is not None:
            knobs.append(variant)
        overrides = Overrides()
        for t_cond, obligation in _choice(b, target, chosen):
            for v_index, (_, option) in enumerate(options):
                when = t_cond if variant is None else t_cond & variant.is_(v_index)
                edit(b, overrides, when, obligation, option)
        near_miss = any_of(
            b.job.ctx, [z3.And(cond.term(), b.v.missing[o]) for cond, o in _choice(b, target, chosen)]
        )
        return Problem(knobs, overrides, [*[k.domain() for k in knobs], near_miss])

    return build


def _set_fields(**fields: Any) -> Callable[[Base, Overrides, z3.BoolRef, Obligation, Any], None]:
    def edit(b: Base, overrides: Overrides, when: When, obligation: Obligation, option: Any) -> None:
        for index in b.sites_of(obligation):
            overrides.site(b, index, when, **(option if option is not None else fields))

    return edit


def _adapter_scope(scope: EvidenceScope) -> Callable[[Base], Problem | None]:
    def edit(b: Base, overrides: Overrides, when: When, obligation: Obligation, option: Any) -> None:
        for index in b.sites_of(obligation, adapters_only=True):
            overrides.site(b, index, when, scope=SCOPES.index(scope))

    return _per_target(edit, targets=lambda b: [o for o in b.targets if b.sites_of(o, adapters_only=True)])


def _status(status: EvidenceStatus) -> Callable[[Base], Problem | None]:
    return _per_target(_set_fields(status=STATUSES.index(status)))


def _defect(defect: AnchorDefect) -> Callable[[Base], Problem | None]:
    return _per_target(_set_fields(defect=DEFECTS.index(defect)))


def _enforcement_scope(
    b: Base, overrides: Overrides, when: When, obligation: Obligation, option: Any
) -> None:
    for index in b.sites_of(obligation):
        native = b.layout.evidence[index].adapter is None
        weaker = EvidenceScope.source_inspection if native else EvidenceScope.artifact_generated
        overrides.site(b, index, when, scope=SCOPES.index(weaker))


def _contradict(
    b: Base, overrides: Overrides, when: When, obligation: Obligation, status: EvidenceStatus
) -> None:
    for index in b.sites_of(obligation):
        twin = b.shape.twin[index]
        scope = b.base[b.d.evidence[index].scope.get_id()]
        overrides.site(b, twin, when, present=True, status=STATUSES.index(status), scope=scope, defect=0)


def _relocate_to_telemetry(
    b: Base, overrides: Overrides, when: When, obligation: Obligation, option: Any
) -> None:
    for index in b.sites_of(obligation):
        overrides.remove(b, index, when)
    overrides.site(
        b,
        b.shape.telemetry[obligation],
        when,
        present=True,
        status=STATUSES.index(EvidenceStatus.supported),
        scope=SCOPES.index(EvidenceScope.litmus_trace),
        defect=0,
    )


def _enforcement_targets(b: Base) -> list[Obligation]:
    return [o for o in b.targets if o in b.facts.enforcement_obligations]


def _only(*obligations: Obligation) -> Callable[[Base], list[Obligation]]:
    return lambda b: [o for o in b.targets if o in obligations]


def _replace_with_inference(
    signal: ApproximationSignal, candidates: tuple[Obligation, ...]
) -> Callable[[Base], Problem | None]:
    def edit(b: Base, overrides: Overrides, when: When, obligation: Obligation, option: Any) -> None:
        for index in b.sites_of(obligation):
            overrides.remove(b, index, when)
        overrides.infer(b, obligation, signal, when, add_signal=True)

    return _per_target(edit, targets=_only(*candidates))


def _weakened_pair(b: Base) -> Problem | None:
    pairs = list(combinations(b.targets, 2))
    statuses = [s for s in EvidenceStatus if s is not EvidenceStatus.supported]
    if not pairs:
        return None
    pair = b.knob("obligations", [f"{x.value}+{y.value}" for x, y in pairs])
    status = b.knob("status", [s.value for s in statuses])
    overrides = Overrides()
    for p_cond, (x, y) in _choice(b, pair, pairs):
        for s_cond, chosen in _choice(b, status, statuses):
            for index in b.sites_of(x) + b.sites_of(y):
                overrides.site(b, index, p_cond & s_cond, status=STATUSES.index(chosen))
    near_miss = any_of(
        b.job.ctx, [z3.And(c.term(), b.v.missing[x], b.v.missing[y]) for c, (x, y) in _choice(b, pair, pairs)]
    )
    return Problem([pair, status], overrides, [pair.domain(), status.domain(), near_miss])


def _not_sound(b: Base) -> z3.BoolRef:
    return z3.Not(b.v.sound())


def _preconditions_dropped(size: int) -> Callable[[Base], Problem | None]:
    def build(b: Base) -> Problem | None:
        adapters = b.telemetry_adapters()
        if not adapters:
            return None
        groups = list(combinations(PRECONDITIONS, size))
        knob = b.knob("preconditions", ["+".join(p.value for p in g) for g in groups])
        overrides = Overrides()
        for cond, group in _choice(b, knob, groups):
            for adapter in adapters:
                for pre in group:
                    overrides.set(b.d.preconditions[adapter][pre], cond, False)
        return Problem([knob], overrides, [knob.domain(), _not_sound(b)])

    return build


def _atoms(edit_fields: list[tuple[str, dict[str, int]]]) -> Callable[[Base], Problem | None]:
    def build(b: Base) -> Problem | None:
        required = sorted(b.facts.mode_required_atoms[b.row.mode])
        if not required:
            return None
        atom = b.knob("atom", [a.value for a in required])
        variant = b.knob("variant", [name for name, _ in edit_fields])
        overrides = Overrides()
        for a_cond, chosen in _choice(b, atom, required):
            for v_cond, (_, fields) in _choice(b, variant, edit_fields):
                for site, ob in zip(b.layout.observations, b.d.observations, strict=True):
                    if site.atom is chosen:
                        for name, value in fields.items():
                            overrides.set(getattr(ob, name), a_cond & v_cond, value)
        near_miss = any_of(
            b.job.ctx, [z3.And(c.term(), b.v.missing_atoms[a]) for c, a in _choice(b, atom, required)]
        )
        return Problem([atom, variant], overrides, [atom.domain(), variant.domain(), near_miss])

    return build


def _redeclared(*, shallower_only: bool, to: AdapterDepth | None = None) -> Callable[[Base], Problem | None]:
    """Move one adapter's items (or, with `to`, every adapter's) to its copy at another depth."""

    def build(b: Base) -> Problem | None:
        exact = b.row.descriptor.adapters
        if to is not None:
            keys = [(i, to) for i, a in enumerate(exact) if a.depth is not to]
            if not keys:
                return None
            choices: list[list[tuple[int, AdapterDepth]]] = [keys]
            names = [f"every adapter at {to}"]
        else:
            choices = [
                [(i, depth)]
                for i, adapter in enumerate(exact)
                for depth in DEPTHS[1:]
                if depth is not adapter.depth and (not shallower_only or depth < adapter.depth)
            ]
            names = [f"{exact[c[0][0]].name} at {c[0][1]}" for c in choices]
        if not choices:
            return None
        knob = b.knob("redeclared", names)
        overrides = Overrides()
        for cond, moves in _choice(b, knob, choices):
            for adapter, depth in moves:
                for source, target in b.shape.copies[(adapter, depth)]:
                    overrides.move(b, source, target, cond)
            if to is not None:
                deepest = max(b.row.depth, to, key=lambda x: x.rank)
                overrides.set(b.d.depth, cond, DEPTHS.index(deepest))
        return Problem([knob], overrides, [knob.domain(), _not_sound(b)])

    return build


def _depth_too_shallow(b: Base) -> Problem | None:
    shallower = [d for d in DEPTHS if d < b.row.depth]
    if not shallower:
        return None
    knob = b.knob("depth", [d.value for d in shallower])
    overrides = Overrides()
    for cond, depth in _choice(b, knob, shallower):
        overrides.set(b.d.depth, cond, DEPTHS.index(depth))
    return Problem([knob], overrides, [knob.domain(), _not_sound(b)])


def _inference_pairs(verdict: Label) -> Callable[[Base], list[tuple[ApproximationSignal, Obligation]]]:
    def pairs(b: Base) -> list[tuple[ApproximationSignal, Obligation]]:
        return [
            (s, o)
            for (s, o), (found, _) in sorted(b.facts.inference_verdicts.items())
            if found is verdict and o in b.facts.mode_bundles[b.row.mode]
        ]

    return pairs


def _inference_class(verdict: Label, *, remove_evidence: bool) -> Callable[[Base], Problem | None]:
    def build(b: Base) -> Problem | None:
        pairs = _inference_pairs(verdict)(b)
        if not pairs:
            return None
        knob = b.knob("inference", [f"{o.value} from {s.value}" for s, o in pairs])
        overrides = Overrides()
        for cond, (signal, obligation) in _choice(b, knob, pairs):
            if remove_evidence:
                for index in b.sites_of(obligation):
                    overrides.remove(b, index, cond)
            overrides.infer(b, obligation, signal, cond, add_signal=True)
        return Problem([knob], overrides, [knob.domain(), _not_sound(b)])

    return build


def _inference_cites_absent(b: Base) -> Problem | None:
    absent = [s for s in SIGNALS if s not in b.row.descriptor.approximation_signals]
    pairs = [(s, o) for o in b.targets for s in absent]
    if not pairs:
        return None
    knob = b.knob("inference", [f"{o.value} from {s.value}" for s, o in pairs])
    overrides = Overrides()
    for cond, (signal, obligation) in _choice(b, knob, pairs):
        overrides.infer(b, obligation, signal, cond, add_signal=False)
    return Problem([knob], overrides, [knob.domain(), _not_sound(b)])


def _forbidden_primitive(b: Base) -> Problem | None:
    mode = b.row.mode
    declared = {(m, s) for m, s in b.facts.global_forbidden_lowerings if m is mode}
    suggesting = [s for s in SIGNALS if mode in b.facts.signal_suggests_modes[s]]
    options = sorted({s for _, s in declared}) + [s for s in suggesting if (mode, s) not in declared]
    if not options or not b.targets:
        return None
    signal = b.knob("primitive", [s.value for s in options])
    target = b.knob("weakened", [o.value for o in b.targets])
    overrides = Overrides()
    for s_cond, chosen in _choice(b, signal, options):
        overrides.set(b.d.signals[chosen], s_cond, True)
        if (mode, chosen) not in declared:
            overrides.set(b.d.forbidden[(mode, chosen)], s_cond, True)
    for t_cond, obligation in _choice(b, target, b.targets):
        for index in b.sites_of(obligation):
            overrides.site(b, index, t_cond, status=STATUSES.index(EvidenceStatus.missing))
    rejected = b.v.label_is(Label.rejected)
    return Problem([signal, target], overrides, [signal.domain(), target.domain(), rejected])


def _one_side_only(b: Base) -> Problem | None:
    """hard_protected with one side of the conflict removed (seed 000 section 5)."""
    if b.row.mode.value != "hard_protected":
        return None
    sides = [
        (
            "scheduler only: no victim exclusion",
            O_.victim_exclusion_before_violation,
            {D.none, D.allocator_hook, D.backend_patch},
        ),
        (
            "allocator only: no conflict action",
            O_.explicit_conflict_action,
            {D.none, D.scheduler_hook, D.backend_patch},
        ),
        (
            "allocator only: no blocking ids",
            O_.blocking_claim_ids,
            {D.none, D.scheduler_hook, D.backend_patch},
        ),
    ]
    knob = b.knob("side", [name for name, _, _ in sides])
    overrides = Overrides()
    for cond, (_, obligation, depths) in _choice(b, knob, sides):
        for index in b.shape.originals:
            site = b.layout.evidence[index]
            if obligation_of(site.name, b.facts) is obligation and b.layout.slot(site) in depths:
                overrides.remove(b, index, cond)
    return Problem([knob], overrides, [knob.domain(), b.v.label_is(Label.rejected)])


def _signals_only(b: Base) -> Problem | None:
    suggesting = [s for s in SIGNALS if b.row.mode in b.facts.signal_suggests_modes[s]]
    knob = b.knob(
        "signals", ["every evidence item and observation removed; suggesting signals kept or added"]
    )
    overrides = Overrides()
    always = knob.is_(0)
    for index in b.shape.originals:
        overrides.remove(b, index, always)
    for ob in b.d.observations:
        overrides.set(ob.present, always, False)
        overrides.set(ob.scope, always, 0)
        overrides.set(ob.defect, always, 0)
    for signal in suggesting:
        overrides.set(b.d.signals[signal], always, True)
    return Problem([knob], overrides, [knob.domain(), _not_sound(b)])


def _post_hoc_naming(b: Base) -> Problem | None:
    identity = b.sites_of(Obligation.claim_identity)
    if not identity:
        return None
    adapters = b.telemetry_adapters()
    variants = ["identity trace anchors lose their claim scope"]
    if adapters:
        variants += ["telemetry join without a pre-registered claim registry", "both"]
    knob = b.knob("variant", variants)
    overrides = Overrides()
    unscoped = DEFECTS.index(AnchorDefect.trace_unscoped)
    for index in identity:
        overrides.site(b, index, knob.is_(0, 2), defect=unscoped)
    for adapter in adapters:
        registry = b.d.preconditions[adapter][TelemetryJoinPrecondition.external_claim_registry]
        overrides.set(registry, knob.is_(1, 2), False)
    return Problem([knob], overrides, [knob.domain(), b.v.missing[Obligation.claim_identity]])


def _restore_after_reuse(b: Base) -> Problem | None:
    targets = [o for o in (O_.offload_restorability, O_.restoration_failure_outcome) if b.sites_of(o)]
    if O_.offload_restorability not in targets:
        return None
    groups = [[O_.offload_restorability]] + ([targets] if len(targets) == 2 else [])
    knob = b.knob("unordered", ["+".join(o.value for o in g) for g in groups])
    overrides = Overrides()
    for cond, group in _choice(b, knob, groups):
        for obligation in group:
            for index in b.sites_of(obligation):
                overrides.site(b, index, cond, defect=DEFECTS.index(AnchorDefect.trace_unordered))
    return Problem([knob], overrides, [knob.domain(), b.v.missing[O_.offload_restorability]])


def _wrong_claim_failure(b: Base) -> Problem | None:
    sites = b.sites_of(O_.restoration_failure_outcome)
    if not sites:
        return None
    variants = [
        "failure trace not tied to this claim",
        "outcome inferred from an unclaimed/wrong-claim load failure",
        "both",
    ]
    knob = b.knob("variant", variants)
    overrides = Overrides()
    for index in sites:
        overrides.site(b, index, knob.is_(0, 2), defect=DEFECTS.index(AnchorDefect.trace_unscoped))
        overrides.remove(b, index, knob.is_(1))
    overrides.infer(
        b, O_.restoration_failure_outcome, S.unclaimed_load_failure, knob.is_(1, 2), add_signal=True
    )
    return Problem([knob], overrides, [knob.domain(), _not_sound(b)])


def _storage_only(b: Base) -> Problem | None:
    present = [o for o in (O_.offload_restorability, O_.restoration_failure_outcome) if b.sites_of(o)]
    if not present:
        return None
    groups = [[o] for o in present] + ([present] if len(present) == 2 else [])
    knob = b.knob("removed", ["+".join(o.value for o in g) for g in groups])
    overrides = Overrides()
    for cond, group in _choice(b, knob, groups):
        for obligation in group:
            for index in b.sites_of(obligation):
                overrides.remove(b, index, cond)
        overrides.set(b.d.signals[S.storage_tier], cond, True)
    return Problem([knob], overrides, [knob.domain(), _not_sound(b)])


SEED_KINDS = (
    "anchor deletion",
    "empty anchors",
    "supported changed to partial",
    "supported changed to unknown",
    "supported changed to missing",
    "observed pressure atoms without anchors",
    "adapter scope weakened to docs-only",
    "adapter scope weakened to source-inspection",
    "missing telemetry-join preconditions",
    "routing-only evidence",
    "wrong claim id failure attribution",
    "post-hoc claim naming",
    "restore-after-reuse ordering",
    "fallback recompute",
    "generic counters",
    "storage-only offload evidence",
)
"""Seed 000 section 8.2, its 16 mutation kinds (its list splits into these 16)."""

_NON_OK_DEFECTS = [(d.value, {"defect": DEFECTS.index(d)}) for d in DEFECTS if d is not AnchorDefect.ok]
_WEAK_SCOPES = [
    (s.value, {"scope": SCOPES.index(s)})
    for s in (EvidenceScope.docs, EvidenceScope.source_inspection, EvidenceScope.artifact_generated)
]

CLASSES: tuple[MutationClass, ...] = (
    MutationClass(
        "anchor_deleted",
        SEED_KINDS[0],
        "every counting item of one obligation loses its anchor",
        _defect(AnchorDefect.absent),
    ),
    MutationClass(
        "anchor_emptied",
        SEED_KINDS[1],
        "every counting item of one obligation gets an anchor without locator, or without note",
        _per_target(
            _set_fields(),
            variants=[
                (d.value, {"defect": DEFECTS.index(d)})
                for d in (AnchorDefect.no_locator, AnchorDefect.no_note)
            ],
        ),
    ),
    MutationClass(
        "status_partial",
        SEED_KINDS[2],
        "supported evidence of one obligation becomes partial",
        _status(EvidenceStatus.partial),
    ),
    MutationClass(
        "status_unknown",
        SEED_KINDS[3],
        "supported evidence of one obligation becomes unknown",
        _status(EvidenceStatus.unknown),
    ),
    MutationClass(
        "status_missing",
        SEED_KINDS[4],
        "supported evidence of one obligation becomes missing",
        _status(EvidenceStatus.missing),
    ),
    MutationClass(
        "pressure_atoms_unanchored",
        SEED_KINDS[5],
        "every observation of one required atom loses its anchor, or gets a defective one",
        _atoms(_NON_OK_DEFECTS),
    ),
    MutationClass(
        "adapter_scope_docs",
        SEED_KINDS[6],
        "adapter evidence of one obligation weakened to docs",
        _adapter_scope(EvidenceScope.docs),
    ),
    MutationClass(
        "adapter_scope_source_inspection",
        SEED_KINDS[7],
        "adapter evidence of one obligation weakened to source inspection",
        _adapter_scope(EvidenceScope.source_inspection),
    ),
    MutationClass(
        "telemetry_join_precondition_dropped",
        SEED_KINDS[8],
        "one of the nine telemetry-join preconditions is false",
        _preconditions_dropped(1),
    ),
    MutationClass(
        "routing_only_evidence",
        SEED_KINDS[9],
        "every adapter is redeclared as a routing hook (judged at routing_hook or deeper)",
        _redeclared(shallower_only=False, to=D.routing_hook),
    ),
    MutationClass(
        "wrong_claim_failure_attribution",
        SEED_KINDS[10],
        "the restoration-failure evidence is not tied to this claim, or comes from an unclaimed failure",
        _wrong_claim_failure,
    ),
    MutationClass(
        "post_hoc_claim_naming",
        SEED_KINDS[11],
        "claims named after the events: identity traces lose claim scope, or the join loses its registry",
        _post_hoc_naming,
    ),
    MutationClass(
        "restore_after_reuse_ordering",
        SEED_KINDS[12],
        "restore evidence whose trace does not preserve order (restore may follow the reuse)",
        _restore_after_reuse,
    ),
    MutationClass(
        "fallback_recompute",
        SEED_KINDS[13],
        "restore or failure-outcome evidence replaced by the inference from a fallback recompute",
        _replace_with_inference(
            S.fallback_recompute, (O_.offload_restorability, O_.restoration_failure_outcome)
        ),
    ),
    MutationClass(
        "generic_counters",
        SEED_KINDS[14],
        "restore or failure-outcome evidence replaced by the inference from generic counters",
        _replace_with_inference(
            S.generic_counters, (O_.offload_restorability, O_.restoration_failure_outcome)
        ),
    ),
    MutationClass(
        "storage_only_offload_evidence",
        SEED_KINDS[15],
        "restore and/or failure-outcome evidence removed; only the storage tier signal remains",
        _storage_only,
    ),
    # --- beyond the seed's list ---
    MutationClass(
        "anchor_trace_unordered",
        None,
        "every counting item of one obligation: trace anchor without ordering",
        _defect(AnchorDefect.trace_unordered),
    ),
    MutationClass(
        "anchor_trace_unscoped",
        None,
        "every counting item of one obligation: trace anchor without claim scope",
        _defect(AnchorDefect.trace_unscoped),
    ),
    MutationClass(
        "anchor_digest_unverified",
        None,
        "every counting item of one obligation: anchor digest that does not verify",
        _defect(AnchorDefect.digest_unverified),
    ),
    MutationClass(
        "contradictory_evidence",
        None,
        "a non-supported item is added next to every counting item of one obligation (same depth)",
        _per_target(
            _contradict, variants=[(s.value, s) for s in EvidenceStatus if s is not EvidenceStatus.supported]
        ),
    ),
    MutationClass(
        "enforcement_scope_unobserved",
        None,
        "enforcement evidence of one obligation from source inspection (native) or an artifact (adapter)",
        _per_target(_enforcement_scope, targets=_enforcement_targets),
    ),
    MutationClass(
        "enforcement_via_telemetry_join",
        None,
        "one enforcement obligation supplied only by a telemetry join (all nine preconditions true)",
        _per_target(_relocate_to_telemetry, targets=_enforcement_targets),
    ),
    MutationClass(
        "two_obligations_weakened", None, "supported evidence of two obligations weakened", _weakened_pair
    ),
    MutationClass(
        "two_preconditions_dropped",
        None,
        "two telemetry-join preconditions are false",
        _preconditions_dropped(2),
    ),
    MutationClass(
        "pressure_atom_scope_weakened",
        None,
        "every observation of one required atom comes from docs, source inspection or an artifact",
        _atoms(_WEAK_SCOPES),
    ),
    MutationClass(
        "adapter_redeclared_shallower",
        None,
        "a deeper adapter's evidence is declared at a shallower depth",
        _redeclared(shallower_only=True),
    ),
    MutationClass(
        "depth_too_shallow",
        None,
        "the row is judged at a depth shallower than its adapters",
        _depth_too_shallow,
    ),
    MutationClass(
        "misattributed_inference",
        None,
        "an obligation's evidence is replaced by an inference the tables call a misattribution",
        _inference_class(Label.rejected, remove_evidence=True),
    ),
    MutationClass(
        "impossible_inference",
        None,
        "the row infers an enforcement obligation from block events (a category error)",
        _inference_class(Label.invalid, remove_evidence=False),
    ),
    MutationClass(
        "inference_cites_absent_primitive",
        None,
        "the row infers an obligation from a primitive the runtime does not expose",
        _inference_cites_absent,
    ),
    MutationClass(
        "forbidden_primitive_present",
        None,
        "a forbidden (or declared-forbidden) primitive is present and one obligation is missing",
        _forbidden_primitive,
    ),
    MutationClass(
        "one_side_only",
        None,
        "hard_protected with only the scheduler or only the allocator side",
        _one_side_only,
    ),
    MutationClass(
        "signals_only",
        None,
        "every evidence item and observation removed, suggesting signals kept",
        _signals_only,
    ),
)


# --- enumeration -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    """One adversarial descriptor: its class, base row, view, document and both verdicts."""

    mutation: str
    seed_kind: str | None
    base: str
    view: dict[str, str]
    document: dict[str, Any]
    model: ConcreteVerdict
    python: ConcreteVerdict

    @property
    def fails_closed(self) -> bool:
        return not self.python.label.is_sound and not self.model.label.is_sound

    @property
    def agrees(self) -> bool:
        return self.model == self.python


def mutants(base: Base, mutation: MutationClass) -> Iterator[Mutant]:
    """Every mutant of `mutation` on `base`, each excluded from the rest by a blocking clause."""
    problem = mutation.build(base)
    if problem is None:
        return
    # Every override writes a value of the variable's domain (and absent sites keep their
    # canonical zeros), so a mutant is well formed by construction; the Descriptor model
    # validates each decoded document again.
    *instantiated, packed = base.instantiate(problem.overrides, [*problem.constraints, base.v.packed()])
    solver = base.job.solver()
    solver.add(*instantiated)
    while decided(solver.check(), solver):
        model = solver.model()
        values = [model.eval(k.var, model_completion=True).as_long() for k in problem.knobs]
        solver.add(z3.Not(z3.And([k.var == value for k, value in zip(problem.knobs, values, strict=True)])))
        chosen = {k.var_id: value for k, value in zip(problem.knobs, values, strict=True)}
        document = base.d.decode_values(base.values(chosen, problem.overrides), base=base.row.descriptor)
        yield Mutant(
            mutation=mutation.id,
            seed_kind=mutation.seed_kind,
            base=base.row.ident,
            view={k.name: k.values[value] for k, value in zip(problem.knobs, values, strict=True)},
            document=document,
            model=base.v.unpack(model.eval(packed, model_completion=True).as_long()),
            python=python_verdict(document),
        )


@dataclass
class AdversaryReport:
    """What one run produced. `complete` is false when the budget cut the enumeration short
    (then the output is a prefix and is not reproducible)."""

    seed: int
    complete: bool = True
    generated: int = 0
    distinct: int = 0
    seconds: float = 0.0
    by_class: dict[str, int] = field(default_factory=dict)
    not_failing_closed: list[dict[str, Any]] = field(default_factory=list)
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    bases: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.distinct / self.seconds if self.seconds else 0.0


def run_adversary(
    rows: list[PositiveRow],
    out: Path | None,
    *,
    seed: int = DEFAULT_SEED,
    budget_s: float = 120.0,
    classes: tuple[MutationClass, ...] = CLASSES,
    facts: Facts | None = None,
    on_mutant: Callable[[Mutant], None] | None = None,
    jobs: int = 1,
    map_rows: RowMap | None = None,
) -> AdversaryReport:
    """Enumerate every class on every positive row; write each distinct mutant as YAML under
    `out/descriptors/<class>/` (when `out` is given) with `out/descriptors/index.json`.

    Each row is searched on its own (its own `Base` and z3 context): by `map_rows` when given
    (a Ray cluster's map, `kvclaims.refinement.fanout.ray_map`), else on `jobs` worker
    processes; mutants are deduplicated and written in row order, so the output does not depend
    on where the rows were searched."""
    facts = facts or Facts.reference()
    report = AdversaryReport(seed=seed, bases=[r.ident for r in rows])
    seen: set[str] = set()
    index: list[dict[str, Any]] = []
    started = time.perf_counter()
    target = None if out is None else out / "descriptors"
    search = _RowSearch(facts, seed, classes)
    with ExitStack() as stack:
        if map_rows is None:
            map_rows = stack.enter_context(OrderedPool(jobs, [search])).map
        searches = map_rows(search, rows)
        stack.callback(getattr(searches, "close", lambda: None))  # a budget cut stops a generator's tasks
        for searched, written in enumerate(searches, start=1):
            for text, mutant in written:
                report.generated += 1
                digest = hashlib.sha256(text.encode()).hexdigest()
                if digest in seen:
                    continue
                seen.add(digest)
                report.by_class[mutant.mutation] = report.by_class.get(mutant.mutation, 0) + 1
                entry = _index_entry(mutant, report.by_class[mutant.mutation])
                if target is not None:
                    path = target / entry["file"]
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text, encoding="utf-8")
                index.append(entry)
                if not mutant.fails_closed:
                    report.not_failing_closed.append(entry)
                if not mutant.agrees:
                    report.disagreements.append(entry | {"document": mutant.document})
                if on_mutant is not None:
                    on_mutant(mutant)
            if searched < len(rows) and time.perf_counter() - started > budget_s:
                report.complete = False  # the rows searched so far: a prefix
                break
    report.seconds = time.perf_counter() - started
    report.distinct = len(seen)
    if target is not None:
        target.mkdir(parents=True, exist_ok=True)
        summary = {
            "format": "kvclaims-adversary/1",
            "seed": seed,
            "complete": report.complete,
            "bases": report.bases,
            "classes": {
                c.id: {"seed_kind": c.seed_kind, "summary": c.summary, "count": report.by_class.get(c.id, 0)}
                for c in classes
            },
            "descriptors": index,
        }
        (target / "index.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return report


RowMap = Callable[[Callable[[PositiveRow], list[tuple[str, Mutant]]], Sequence[PositiveRow]], Iterable[Any]]
"""`map(search, rows)`: each row's search result, in the order of `rows`."""


@dataclass(frozen=True)
class _RowSearch:
    """Every mutant of every class on one positive row, each with the YAML it is written as
    (rendered in the worker, where the search ran)."""

    facts: Facts
    seed: int
    classes: tuple[MutationClass, ...]

    def __call__(self, row: PositiveRow) -> list[tuple[str, Mutant]]:
        base = Base(row, self.facts, self.seed)
        return [(_yaml(m), m) for mutation in self.classes for m in mutants(base, mutation)]


def _index_entry(mutant: Mutant, number: int) -> dict[str, Any]:
    base = mutant.base.replace(":", "-")
    return {
        "file": f"{mutant.mutation}/{base}-{number:04d}.yaml",
        "class": mutant.mutation,
        "seed_kind": mutant.seed_kind,
        "base": mutant.base,
        "view": mutant.view,
        "model": verdict_json(mutant.model),
        "python_label": mutant.python.label.value,
        "fails_closed": mutant.fails_closed,
    }


def _yaml(mutant: Mutant) -> str:
    view = ", ".join(f"{k}={v}" for k, v in mutant.view.items())
    header = (
        f"# adversarial descriptor (kvclaims adversary): class {mutant.mutation}"
        f"{f' (seed 000 8.2: {mutant.seed_kind})' if mutant.seed_kind else ''}\n"
        f"# near miss of the positive row {mutant.base}; view: {view}\n"
        f"# must fail closed: model {mutant.model.label}, kvclaims.spec.lower {mutant.python.label}\n"
    )
    return header + block_yaml(_without_local_files(mutant.document))


def _without_local_files(document: dict[str, Any]) -> dict[str, Any]:
    """The mutant as written: a local trace or artifact anchor counts only if its file exists
    next to the descriptor, and a written mutant is not next to the files its anchors name (the
    shipped evidence, or none for the solver's synthetic anchors). Such a path becomes a URL
    that names it, so the written file is judged as the mutant was, by its mutation alone.
    (A copy of the parts that change; the rest is shared with `document`.)"""
    written = dict(document)
    for key in ("native", "observations"):
        if key in written:
            written[key] = [_item_without_local_file(item) for item in written[key]]
    if "adapters" in written:
        written["adapters"] = [
            adapter | {"evidence": [_item_without_local_file(item) for item in adapter["evidence"]]}
            if "evidence" in adapter
            else adapter
            for adapter in written["adapters"]
        ]
    return written


def _item_without_local_file(item: dict[str, Any]) -> dict[str, Any]:
    anchor = item.get("anchor")
    if (
        anchor
        and anchor.get("kind") in OBSERVING_ANCHOR_KINDS
        and anchor.get("path")
        and not anchor.get("repository")
    ):
        anchor = dict(anchor)
        anchor["url"] = f"not-shipped:{anchor.pop('path')}"
        return item | {"anchor": anchor}
    return item


def block_yaml(document: dict[str, Any]) -> str:
    """Block-style YAML for a plain document (dicts, lists, strings, ints, bools): keys plain,
    every string double-quoted (a JSON string is a valid YAML double-quoted scalar), no
    anchors or aliases. Ten times faster than PyYAML's representer, which dominated the rate."""
    lines: list[str] = []
    _emit_mapping(document, "", lines)
    return "\n".join(lines) + "\n"


def _scalar(value: Any) -> str:
    if type(value) is str:
        return _quoted(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if value is None:
        return "null"
    return _quoted(str(value))


@functools.lru_cache(maxsize=4096)
def _quoted(text: str) -> str:
    """A string as a double-quoted scalar (mutants repeat the same few hundred strings)."""
    if '"' not in text and "\\" not in text and text.isprintable():
        return f'"{text}"'
    return json.dumps(text, ensure_ascii=False)


def _emit_mapping(mapping: dict[str, Any], pad: str, lines: list[str], first: str | None = None) -> None:
    for n, (key, value) in enumerate(mapping.items()):
        lead = first if (first is not None and n == 0) else pad
        if isinstance(value, dict) and value:
            lines.append(f"{lead}{key}:")
            _emit_mapping(value, pad + "  ", lines)
        elif isinstance(value, list) and value:
            lines.append(f"{lead}{key}:")
            _emit_sequence(value, pad + "  ", lines)
        elif isinstance(value, dict | list):
            lines.append(f"{lead}{key}: {'{}' if isinstance(value, dict) else '[]'}")
        else:
            lines.append(f"{lead}{key}: {_scalar(value)}")


def _emit_sequence(items: list[Any], pad: str, lines: list[str]) -> None:
    for item in items:
        if isinstance(item, dict) and item:
            _emit_mapping(item, pad + "  ", lines, first=pad + "- ")
        else:
            lines.append(f"{pad}- {_scalar(item)}")
