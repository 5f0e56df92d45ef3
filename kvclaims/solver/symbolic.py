"""A finite symbolic descriptor: evidence sites laid out as data, Z3 variables for their values.

A `Layout` fixes the *shape* of a descriptor: which adapters exist (name, depth), and which
evidence sites (an obligation name, native or in one adapter) and observation sites exist, in
the order `kvclaims.spec.lower` sees them (native items first, then each adapter's items in
adapter order). A `SymbolicDescriptor` gives every site Z3 variables for what can vary:

- evidence site: present, status, scope, anchor defect (`AnchorDefect`);
- observation site: present, scope, anchor defect;
- per adapter: the nine telemetry-join preconditions (read only for telemetry_join adapters);
- descriptor: approximation signals, descriptor-specific forbidden lowerings (mode, signal);
- row: mode, depth, and `inferred_from` (per obligation: no inference, or a signal).

The bound of the symbolic search is the layout. `Layout.regular(k)` is the default: one adapter
per adapter depth, `k` evidence sites per (obligation, native or adapter), `k` observation sites
per atom. `Layout.of(descriptor)` is the exact shape of a concrete descriptor, so the model
covers every shipped descriptor whatever its size. `decode` turns a model into a real
`descriptor: 1` document (validated by `Descriptor`); `fix` pins the variables to a concrete
descriptor and row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import z3

from kvclaims.solver.facts import Facts
from kvclaims.solver.terms import Ast, Terms
from kvclaims.solver.z3env import Job, all_of
from kvclaims.spec._types import is_blank
from kvclaims.spec.descriptor import Descriptor
from kvclaims.spec.evidence import Anchor, EvidenceItem, LoweringRow, Observation, fits_scope
from kvclaims.spec.verdict import LoweringRule
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    AnchorKind,
    ApproximationSignal,
    EvidenceScope,
    EvidenceStatus,
    Label,
    LabelSubtype,
    Obligation,
    ObservationAtom,
    ProtectionMode,
    TelemetryJoinPrecondition,
)

MODES: tuple[ProtectionMode, ...] = tuple(ProtectionMode)
DEPTHS: tuple[AdapterDepth, ...] = tuple(AdapterDepth)
STATUSES: tuple[EvidenceStatus, ...] = tuple(EvidenceStatus)
SCOPES: tuple[EvidenceScope, ...] = tuple(EvidenceScope)
SIGNALS: tuple[ApproximationSignal, ...] = tuple(ApproximationSignal)
OBLIGATIONS: tuple[Obligation, ...] = tuple(Obligation)
ATOMS: tuple[ObservationAtom, ...] = tuple(ObservationAtom)
PRECONDITIONS: tuple[TelemetryJoinPrecondition, ...] = tuple(TelemetryJoinPrecondition)
LABELS: tuple[Label, ...] = tuple(Label)
SUBTYPES: tuple[LabelSubtype, ...] = tuple(LabelSubtype)
RULES: tuple[LoweringRule, ...] = tuple(LoweringRule)
NATIVE = AdapterDepth.none
NO_INFERENCE = -1
NO_SUBTYPE = -1


class AnchorDefect(StrEnum):
    """Why an anchor does not count (the solver's view of `Anchor.problems`), or `ok`.

    Every non-`ok` value is one concrete way an anchor fails; `decode` writes it as such an
    anchor, and `defect_of` reads a concrete anchor back (failing loudly on a problem it does
    not know, so a new anchor rule cannot silently diverge from the model).
    """

    ok = "ok"
    absent = "absent"
    no_locator = "no_locator"
    no_note = "no_note"
    trace_unordered = "trace_unordered"
    trace_unscoped = "trace_unscoped"
    digest_unverified = "digest_unverified"


DEFECTS: tuple[AnchorDefect, ...] = tuple(AnchorDefect)
BOGUS_SHA256 = "0" * 64


# --- layout ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdapterSite:
    """One adapter of the shape: its name and depth (never `none`)."""

    name: str
    depth: AdapterDepth
    trust_boundary: str = ""


@dataclass(frozen=True)
class EvidenceSite:
    """One evidence item position. `name` is the obligation as written (a legacy alias is
    resolved through the facts, as the loader does); `adapter` indexes `Layout.adapters`,
    `None` for native evidence. `template` is the concrete item it came from, if any."""

    name: str
    adapter: int | None
    template: EvidenceItem | None = None


@dataclass(frozen=True)
class ObservationSite:
    atom: ObservationAtom
    template: Observation | None = None


@dataclass(frozen=True)
class Layout:
    """The shape of a descriptor: adapters, evidence sites in candidate order, observations."""

    adapters: tuple[AdapterSite, ...]
    evidence: tuple[EvidenceSite, ...]
    observations: tuple[ObservationSite, ...]

    def slot(self, site: EvidenceSite) -> AdapterDepth:
        """The depth an item at `site` is listed at (`none` for native)."""
        return NATIVE if site.adapter is None else self.adapters[site.adapter].depth

    @classmethod
    def regular(cls, k_items: int = 2, k_observations: int = 2) -> Layout:
        """The default symbolic bound: one adapter per depth, `k_items` sites per
        (obligation, native or adapter), `k_observations` sites per atom."""
        adapters = tuple(
            AdapterSite(name=f"{depth.value.replace('_', '-')}-adapter", depth=depth) for depth in DEPTHS[1:]
        )
        owners: list[int | None] = [None, *range(len(adapters))]
        evidence = tuple(
            EvidenceSite(name=o.value, adapter=owner)
            for owner in owners
            for o in OBLIGATIONS
            for _ in range(k_items)
        )
        observations = tuple(ObservationSite(atom) for atom in ATOMS for _ in range(k_observations))
        return cls(adapters, evidence, observations)

    @classmethod
    def of(cls, descriptor: Descriptor) -> Layout:
        """The exact shape of `descriptor` (every item and observation gets its own site)."""
        adapters = tuple(AdapterSite(a.name, a.depth, a.trust_boundary) for a in descriptor.adapters)
        evidence = [EvidenceSite(i.obligation.value, None, i) for i in descriptor.native]
        for index, adapter in enumerate(descriptor.adapters):
            evidence.extend(EvidenceSite(i.obligation.value, index, i) for i in adapter.evidence)
        observations = tuple(ObservationSite(o.atom, o) for o in descriptor.observations)
        return cls(adapters, tuple(evidence), observations)


def obligation_of(name: str, facts: Facts) -> Obligation:
    """The obligation an evidence name denotes, resolving legacy aliases like the loader."""
    return facts.legacy_obligation_aliases.get(name) or Obligation(name)


# --- variables -------------------------------------------------------------------------------


@dataclass
class EvidenceVars:
    present: z3.BoolRef
    status: z3.ArithRef
    scope: z3.ArithRef
    defect: z3.ArithRef


@dataclass
class ObservationVars:
    present: z3.BoolRef
    scope: z3.ArithRef
    defect: z3.ArithRef


@dataclass
class SymbolicDescriptor:
    """Z3 variables for one descriptor of a given layout and one row (mode, depth, inferences)."""

    job: Job
    layout: Layout
    prefix: str
    evidence: list[EvidenceVars] = field(init=False)
    observations: list[ObservationVars] = field(init=False)
    preconditions: list[dict[TelemetryJoinPrecondition, z3.BoolRef]] = field(init=False)
    signals: dict[ApproximationSignal, z3.BoolRef] = field(init=False)
    forbidden: dict[tuple[ProtectionMode, ApproximationSignal], z3.BoolRef] = field(init=False)
    mode: z3.ArithRef = field(init=False)
    depth: z3.ArithRef = field(init=False)
    inferred: dict[Obligation, z3.ArithRef] = field(init=False)
    names: dict[int, str] = field(init=False)
    python_names: dict[int, str] = field(init=False)

    def __post_init__(self) -> None:
        job, p = self.job, self.prefix
        self.evidence = [
            EvidenceVars(job.bool(f"{p}.e{i}.present"), job.int(f"{p}.e{i}.status"),
                         job.int(f"{p}.e{i}.scope"), job.int(f"{p}.e{i}.defect"))
            for i in range(len(self.layout.evidence))
        ]  # fmt: skip
        self.observations = [
            ObservationVars(
                job.bool(f"{p}.o{i}.present"), job.int(f"{p}.o{i}.scope"), job.int(f"{p}.o{i}.defect")
            )
            for i in range(len(self.layout.observations))
        ]
        self.preconditions = [
            {pre: job.bool(f"{p}.a{a}.{pre.value}") for pre in PRECONDITIONS}
            for a in range(len(self.layout.adapters))
        ]
        self.signals = {s: job.bool(f"{p}.signal.{s.value}") for s in SIGNALS}
        self.forbidden = {
            (m, s): job.bool(f"{p}.forbidden.{m.value}.{s.value}") for m in MODES for s in SIGNALS
        }
        self.mode = job.int(f"{p}.mode")
        self.depth = job.int(f"{p}.depth")
        self.inferred = {o: job.int(f"{p}.inferred.{o.value}") for o in OBLIGATIONS}
        self.names = {var.get_id(): var.decl().name() for var in self.variables()}
        # the same names keyed by the Python object (these objects live as long as `self`)
        self.python_names = {id(var): self.names[var.get_id()] for var in self.variables()}

    def variables(self) -> list[z3.ExprRef]:
        """Every Z3 constant of this descriptor."""
        found: list[z3.ExprRef] = [self.mode, self.depth, *self.inferred.values()]
        for ev in self.evidence:
            found += [ev.present, ev.status, ev.scope, ev.defect]
        for ob in self.observations:
            found += [ob.present, ob.scope, ob.defect]
        found += [var for pre in self.preconditions for var in pre.values()]
        found += [*self.signals.values(), *self.forbidden.values()]
        return found

    # --- constraints ---

    def well_formed(self) -> z3.BoolRef:
        """Domains, a canonical value for every absent site (so distinct models are distinct
        descriptors), and the descriptor validator's rule that a forbidden lowering names a
        present signal. (Built by `Terms`: the same terms as z3py's operators, faster.)"""
        t = Terms(self.job.ctx)
        try:
            return t.bool_ref(self._well_formed(t))
        finally:
            t.release()

    def _well_formed(self, t: Terms) -> Ast:
        terms = [
            t.in_range(self.mode.as_ast(), 0, len(MODES)),
            t.in_range(self.depth.as_ast(), 0, len(DEPTHS)),
        ]
        for ev in self.evidence:
            status, scope, defect = ev.status.as_ast(), ev.scope.as_ast(), ev.defect.as_ast()
            terms += [
                t.in_range(status, 0, len(STATUSES)),
                t.in_range(scope, 0, len(SCOPES)),
                t.in_range(defect, 0, len(DEFECTS)),
            ]
            absent = t.not_(ev.present.as_ast())
            terms.append(t.implies(absent, t.and_([t.eq(status, 0), t.eq(scope, 0), t.eq(defect, 0)])))
        for ob in self.observations:
            scope, defect = ob.scope.as_ast(), ob.defect.as_ast()
            terms += [t.in_range(scope, 0, len(SCOPES)), t.in_range(defect, 0, len(DEFECTS))]
            absent = t.not_(ob.present.as_ast())
            terms.append(t.implies(absent, t.and_([t.eq(scope, 0), t.eq(defect, 0)])))
        for (_, signal), flag in self.forbidden.items():
            terms.append(t.implies(flag.as_ast(), self.signals[signal].as_ast()))
        for var in self.inferred.values():
            terms.append(t.in_range(var.as_ast(), NO_INFERENCE, len(SIGNALS)))
        for index, site in enumerate(self.layout.adapters):
            if site.depth is not AdapterDepth.telemetry_join:
                terms += [t.not_(v.as_ast()) for v in self.preconditions[index].values()]
        return t.all_of(terms)

    def fix(self, descriptor: Descriptor, row: LoweringRow) -> z3.BoolRef:
        """Pin every variable to `descriptor` and `row`; the layout must be `Layout.of(descriptor)`."""
        if self.layout != Layout.of(descriptor):
            raise ValueError("fix() needs the layout of the same descriptor (Layout.of)")
        terms: list[z3.BoolRef] = [
            self.mode == MODES.index(row.mode),
            self.depth == DEPTHS.index(row.depth),
        ]
        for site, ev in zip(self.layout.evidence, self.evidence, strict=True):
            item = site.template
            assert item is not None
            terms += [
                ev.present,
                ev.status == STATUSES.index(item.status),
                ev.scope == SCOPES.index(item.scope),
                ev.defect == DEFECTS.index(defect_of(item.anchor)),
            ]
        for site, ob in zip(self.layout.observations, self.observations, strict=True):
            observation = site.template
            assert observation is not None
            terms += [
                ob.present,
                ob.scope == SCOPES.index(observation.scope),
                ob.defect == DEFECTS.index(defect_of(observation.anchor)),
            ]
        for index, adapter in enumerate(descriptor.adapters):
            for pre, var in self.preconditions[index].items():
                value = adapter.preconditions.get(pre, False)
                terms.append(var if value and adapter.depth is AdapterDepth.telemetry_join else z3.Not(var))
        present = set(descriptor.approximation_signals)
        terms += [var if s in present else z3.Not(var) for s, var in self.signals.items()]
        declared = {(f.mode, f.via) for f in descriptor.forbidden_lowerings}
        terms += [var if key in declared else z3.Not(var) for key, var in self.forbidden.items()]
        for obligation, var in self.inferred.items():
            signal = row.inferred_from.get(obligation)
            terms.append(var == (NO_INFERENCE if signal is None else SIGNALS.index(signal)))
        return all_of(self.job.ctx, terms)

    def sparse_literals(self) -> list[z3.BoolRef]:
        """Literals a sparse model prefers: every site absent, every signal and forbidden
        lowering off, every precondition false (see `kvclaims.solver.z3env.sparse_model`)."""
        literals = [z3.Not(ev.present) for ev in self.evidence] + [
            z3.Not(ob.present) for ob in self.observations
        ]
        literals += [z3.Not(var) for var in self.signals.values()]
        literals += [z3.Not(var) for var in self.forbidden.values()]
        literals += [z3.Not(var) for pre in self.preconditions for var in pre.values()]
        return literals

    # --- reading a model back ---

    def decode(
        self, model: z3.ModelRef, base: Descriptor | None = None, runtime: str = "solver"
    ) -> dict[str, Any]:
        """The `descriptor: 1` document this model denotes (one row in `lowerings`).

        Metadata, adapter names and counting anchors are taken from the layout's templates
        when there are any (the digest of a template anchor is dropped: a copy is not the
        file it was verified against), otherwise synthesized.
        """
        return self.decode_values(model_values(model), base, runtime)

    def decode_values(
        self, assigned: Mapping[str, int | bool], base: Descriptor | None = None, runtime: str = "solver"
    ) -> dict[str, Any]:
        """`decode` from the value of every variable by name (absent names take 0 / false)."""
        names = self.python_names

        def value(term: z3.ExprRef) -> int:
            return int(assigned.get(names[id(term)], 0))

        def truth(term: z3.BoolRef) -> bool:
            return bool(assigned.get(names[id(term)], False))

        signals = [s for s in SIGNALS if truth(self.signals[s])]
        native: list[dict[str, Any]] = []
        adapter_items: list[list[dict[str, Any]]] = [[] for _ in self.layout.adapters]
        for index, (site, ev) in enumerate(zip(self.layout.evidence, self.evidence, strict=True)):
            if not truth(ev.present):
                continue
            scope = SCOPES[value(ev.scope)]
            template = site.template.anchor if site.template else None
            item: dict[str, Any] = {
                "obligation": site.name,
                "status": STATUSES[value(ev.status)].value,
                "scope": scope.value,
            }
            anchor = anchor_document(DEFECTS[value(ev.defect)], scope, template, f"e{index}-{site.name}")
            if anchor is not None:
                item["anchor"] = anchor
            (native if site.adapter is None else adapter_items[site.adapter]).append(item)
        adapters: list[dict[str, Any]] = []
        for index, site in enumerate(self.layout.adapters):
            if not adapter_items[index]:
                continue
            adapter: dict[str, Any] = {"name": site.name, "depth": site.depth.value}
            if site.depth is AdapterDepth.telemetry_join:
                adapter["preconditions"] = {
                    pre.value: truth(var) for pre, var in self.preconditions[index].items()
                }
            if site.trust_boundary:
                adapter["trust_boundary"] = site.trust_boundary
            adapter["evidence"] = adapter_items[index]
            adapters.append(adapter)
        observations = []
        for index, (site, ob) in enumerate(zip(self.layout.observations, self.observations, strict=True)):
            if not truth(ob.present):
                continue
            scope = SCOPES[value(ob.scope)]
            template = site.template.anchor if site.template else None
            observation: dict[str, Any] = {"atom": site.atom.value, "scope": scope.value}
            anchor = anchor_document(
                DEFECTS[value(ob.defect)], scope, template, f"o{index}-{site.atom.value}"
            )
            if anchor is not None:
                observation["anchor"] = anchor
            observations.append(observation)
        forbidden = [
            {"mode": m.value, "via": s.value, "reason": "declared forbidden for this runtime (solver)"}
            for (m, s), var in self.forbidden.items()
            if truth(var)
        ]
        inferred = {
            o.value: SIGNALS[value(var)].value
            for o, var in self.inferred.items()
            if value(var) != NO_INFERENCE
        }
        row: dict[str, Any] = {
            "mode": MODES[value(self.mode)].value,
            "depth": DEPTHS[value(self.depth)].value,
        }
        if inferred:
            row["inferred_from"] = inferred
        document: dict[str, Any] = {
            "descriptor": 1,
            "runtime": base.runtime if base else runtime,
            "surface": base.surface if base else "symbolic descriptor decoded from a Z3 model",
        }
        if base is None or base.version:
            document["version"] = base.version if base else "0"
        if base is not None and base.commit:
            document["commit"] = base.commit
        document["approximation_signals"] = [s.value for s in signals]
        if forbidden:
            document["forbidden_lowerings"] = forbidden
        document["native"] = native
        document["adapters"] = adapters
        if observations:
            document["observations"] = observations
        document["lowerings"] = [row]
        return document


_DEFINITION = re.compile(r"\(define-fun (\S+) \(\) (?:Int|Bool)\s+(true|false|-?\d+|\(- \d+\))\)")


def model_values(model: z3.ModelRef) -> dict[str, int | bool]:
    """Every constant the model assigns, by name, read from one `sexpr()` of the model (a
    z3py `eval` per variable costs a hundred times more). A constant the model leaves free is
    absent and takes its default (0, false), as `eval(..., model_completion=True)` gives it."""
    values: dict[str, int | bool] = {}
    for name, text in _DEFINITION.findall(model.sexpr()):
        if text in ("true", "false"):
            values[name] = text == "true"
        else:
            values[name] = -int(text[3:-1]) if text.startswith("(") else int(text)
    return values


# --- anchors ---------------------------------------------------------------------------------

_KIND_BY_SCOPE: Mapping[EvidenceScope, AnchorKind] = {
    EvidenceScope.docs: AnchorKind.docs,
    EvidenceScope.source_inspection: AnchorKind.source,
    EvidenceScope.artifact_generated: AnchorKind.artifact,
}


def anchor_document(
    defect: AnchorDefect, scope: EvidenceScope, template: Anchor | None, label: str
) -> dict[str, Any] | None:
    """An anchor (as a document) that has exactly `defect`; `None` for `absent`."""
    if defect is AnchorDefect.absent:
        return None
    counting = None if template is None else _counting_template(template)
    if counting is not None and fits_scope(template, scope):  # type: ignore[arg-type]
        base = dict(counting)
    else:
        kind = _KIND_BY_SCOPE.get(scope, AnchorKind.trace)
        suffix = {"docs": "md", "source": "py", "artifact": "json", "trace": "jsonl"}[kind.value]
        base = {
            "kind": kind.value,
            "path": f"solver-evidence/{label}.{suffix}",
            "note": f"synthetic anchor {label}",
        }
        if kind is AnchorKind.trace:
            base |= {"ordering": "seq strictly increasing", "claim_scope": "claim_id on every event"}
    if defect is AnchorDefect.no_locator:
        base.pop("path", None)
        base.pop("url", None)
    elif defect is AnchorDefect.no_note:
        base.pop("note", None)
    elif defect in (AnchorDefect.trace_unordered, AnchorDefect.trace_unscoped):
        base["kind"] = AnchorKind.trace.value
        base.setdefault("ordering", "seq strictly increasing")
        base.setdefault("claim_scope", "claim_id on every event")
        base.pop("ordering" if defect is AnchorDefect.trace_unordered else "claim_scope")
    elif defect is AnchorDefect.digest_unverified:
        base["sha256"] = BOGUS_SHA256
    return base


_TEMPLATES: dict[int, tuple[Anchor, dict[str, Any] | None]] = {}


def _counting_template(template: Anchor) -> dict[str, Any] | None:
    """A template anchor as a document without its digest, `None` when it does not count
    (cached per template, which is verified once when its descriptor is loaded: `counts` and
    `model_dump` per decoded mutant were visible costs)."""
    cached = _TEMPLATES.get(id(template))
    if cached is None or cached[0] is not template:
        document = None
        if template.counts:
            document = template.model_dump(mode="json", exclude_defaults=True)
            document.pop("sha256", None)
        cached = _TEMPLATES[id(template)] = (template, document)
    return cached[1]


def defect_of(anchor: Anchor | None) -> AnchorDefect:
    """The defect of a concrete anchor; `ok` exactly when the anchor counts."""
    if anchor is None:
        return AnchorDefect.absent
    if anchor.counts:
        return AnchorDefect.ok
    if is_blank(anchor.path) and is_blank(anchor.url):
        return AnchorDefect.no_locator
    if is_blank(anchor.note):
        return AnchorDefect.no_note
    if anchor.kind is AnchorKind.trace and is_blank(anchor.ordering):
        return AnchorDefect.trace_unordered
    if anchor.kind is AnchorKind.trace and is_blank(anchor.claim_scope):
        return AnchorDefect.trace_unscoped
    if anchor.sha256 is not None:
        return AnchorDefect.digest_unverified
    raise ValueError(f"anchor does not count for a reason the solver does not model: {anchor.problems()}")
