"""What would make a runtime native (seed 000 section 7), computed with `z3.Optimize`.

For every shipped descriptor and every mode whose best row is not `native_sound`, two minimal
plans over the lowering model, every existing item pinned:

- **native**: the fewest obligations (and observation atoms) whose native evidence would have
  to be upgraded (made supported, anchored and observed, replacing any contradicting native
  item) for the row at depth `none` to be `native_sound`;
- **adapter**: the shallowest adapter depth, then the fewest new adapter items (supported,
  anchored, observed; a telemetry join with all nine preconditions), that would make the mode
  sound at that depth with no native change: which obligations an adapter must supply where.

The generated table is committed as `proofs/native-upgrades.{md,json}` (drift-checked).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import z3

from kvclaims.solver.facts import Facts
from kvclaims.solver.lowering_model import judge
from kvclaims.solver.symbolic import (
    DEFECTS,
    DEPTHS,
    MODES,
    NO_INFERENCE,
    OBLIGATIONS,
    SCOPES,
    STATUSES,
    AdapterSite,
    AnchorDefect,
    EvidenceSite,
    Layout,
    ObservationSite,
    SymbolicDescriptor,
    defect_of,
    obligation_of,
)
from kvclaims.solver.z3env import DEFAULT_SEED, Job, decided
from kvclaims.spec.descriptor import Descriptor
from kvclaims.spec.evidence import LoweringRow
from kvclaims.spec.lowering import lower_row
from kvclaims.spec.tables import OBLIGATION_CODES
from kvclaims.spec.vocabulary import (
    AdapterDepth,
    EvidenceScope,
    EvidenceStatus,
    Label,
    ObservationAtom,
    ProtectionMode,
)

UPGRADED_SCOPE = EvidenceScope.conformance_trace
"""The scope an upgraded item is assumed to have: observed, so it can discharge enforcement."""


@dataclass(frozen=True)
class Upgrade:
    """The minimal plans for one (descriptor, mode)."""

    source: str
    surface: str
    mode: ProtectionMode
    best_label: Label
    best_depth: AdapterDepth
    native: tuple[str, ...] | None
    adapter_depth: AdapterDepth | None
    adapter: tuple[tuple[AdapterDepth, tuple[str, ...]], ...] | None
    observe: tuple[str, ...] = ()

    def summary(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "surface": self.surface,
            "mode": self.mode.value,
            "best_label": self.best_label.value,
            "best_depth": self.best_depth.value,
            "native_upgrade": list(self.native) if self.native is not None else None,
            "adapter_depth": self.adapter_depth.value if self.adapter_depth else None,
            "adapter_items": {d.value: list(codes) for d, codes in self.adapter}
            if self.adapter is not None
            else None,
            "adapter_observations": list(self.observe),
        }

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> Upgrade:
        """The inverse of `summary` (for the upgrade cache)."""
        items, depth = summary["adapter_items"], summary["adapter_depth"]
        return cls(
            source=summary["source"],
            surface=summary["surface"],
            mode=ProtectionMode(summary["mode"]),
            best_label=Label(summary["best_label"]),
            best_depth=AdapterDepth(summary["best_depth"]),
            native=None if summary["native_upgrade"] is None else tuple(summary["native_upgrade"]),
            adapter_depth=None if depth is None else AdapterDepth(depth),
            adapter=None
            if items is None
            else tuple((AdapterDepth(depth), tuple(codes)) for depth, codes in items.items()),
            observe=tuple(summary["adapter_observations"]),
        )


class _Plan:
    """One descriptor with spare sites: a native twin for every obligation, one spare adapter
    per depth with a site per obligation that depth may supply, one spare observation per atom."""

    def __init__(self, descriptor: Descriptor, facts: Facts, seed: int) -> None:
        exact = Layout.of(descriptor)
        spare_adapters = tuple(AdapterSite(f"upgrade-{d.value}", d) for d in DEPTHS[1:])
        native = [s for s in exact.evidence if s.adapter is None]
        adapted = [s for s in exact.evidence if s.adapter is not None]
        spare_native = [EvidenceSite(o.value, None) for o in OBLIGATIONS]
        spare_adapted = [  # only what each depth may supply: other items could never count
            EvidenceSite(o.value, len(exact.adapters) + k)
            for k, adapter in enumerate(spare_adapters)
            for o in OBLIGATIONS
            if o in facts.depth_supplies[adapter.depth]
        ]
        evidence = (*native, *spare_native, *adapted, *spare_adapted)
        self.layout = Layout(
            exact.adapters + spare_adapters,
            evidence,
            (*exact.observations, *[ObservationSite(a) for a in ObservationAtom]),
        )
        self.original_of = {i: site.template for i, site in enumerate(evidence) if site.template is not None}
        self.native_spare = {o: len(native) + k for k, o in enumerate(OBLIGATIONS)}
        self.adapter_spares = list(range(len(evidence) - len(spare_adapted), len(evidence)))
        self.listed_observations = len(exact.observations)
        self.facts, self.descriptor = facts, descriptor
        self.job = Job(seed=seed)
        self.d = SymbolicDescriptor(self.job, self.layout, "u")
        self.v = judge(self.d, facts)
        self.base = self._pinned()

    def _pinned(self) -> list[z3.BoolRef]:
        """Everything as listed, except that spare sites and spare observations, when present,
        are clean; spare telemetry joins hold all nine preconditions."""
        d = self.d
        terms = [d.well_formed()]
        for index in [*self.native_spare.values(), *self.adapter_spares]:
            terms.append(z3.Implies(d.evidence[index].present, self._clean(index)))
        for index, ob in enumerate(d.observations):
            if index < self.listed_observations:
                observation = self.descriptor.observations[index]
                terms += [ob.present, ob.scope == SCOPES.index(observation.scope)]
                terms.append(ob.defect == DEFECTS.index(defect_of(observation.anchor)))
            else:
                clean = z3.And(ob.scope == SCOPES.index(UPGRADED_SCOPE), ob.defect == 0)
                terms.append(z3.Implies(ob.present, clean))
        present = set(self.descriptor.approximation_signals)
        terms += [var if s in present else z3.Not(var) for s, var in d.signals.items()]
        declared = {(f.mode, f.via) for f in self.descriptor.forbidden_lowerings}
        terms += [var if key in declared else z3.Not(var) for key, var in d.forbidden.items()]
        terms += [var == NO_INFERENCE for var in d.inferred.values()]
        for index, adapter in enumerate(self.layout.adapters):
            listed = index < len(self.descriptor.adapters)
            for pre, var in d.preconditions[index].items():
                holds = self.descriptor.adapters[index].preconditions.get(pre, False) if listed else True
                terms.append(var if holds and adapter.depth is AdapterDepth.telemetry_join else z3.Not(var))
        return terms

    def _clean(self, index: int) -> z3.BoolRef:
        ev = self.d.evidence[index]
        return z3.And(
            ev.status == STATUSES.index(EvidenceStatus.supported),
            ev.scope == SCOPES.index(UPGRADED_SCOPE),
            ev.defect == DEFECTS.index(AnchorDefect.ok),
        )

    def _original(self, index: int, upgraded: z3.BoolRef | None) -> z3.BoolRef:
        """An original item as listed, or (when `upgraded`) made clean."""
        ev, item = self.d.evidence[index], self.original_of[index]
        listed = z3.And(
            ev.present,
            ev.status == STATUSES.index(item.status),
            ev.scope == SCOPES.index(item.scope),
            ev.defect == DEFECTS.index(defect_of(item.anchor)),
        )
        return listed if upgraded is None else z3.If(upgraded, z3.And(ev.present, self._clean(index)), listed)

    def _spare_observations(self) -> list[tuple[ObservationAtom, z3.BoolRef]]:
        return [
            (self.layout.observations[i].atom, self.d.observations[i].present)
            for i in range(self.listed_observations, len(self.layout.observations))
        ]

    def native_plan(self, mode: ProtectionMode) -> tuple[str, ...] | None:
        """The fewest native upgrades that make the row at depth none native_sound."""
        false = z3.BoolVal(False, self.job.ctx)
        bundle = [o for o in OBLIGATIONS if o in self.facts.mode_bundles[mode]]
        atoms = sorted(self.facts.mode_required_atoms[mode])
        upgrade = {o: self.job.bool(f"native.{o.value}") for o in bundle}
        observe = {a: self.job.bool(f"observe.{a.value}") for a in atoms}
        optimizer = self.job.optimize()
        optimizer.add(*self.base, self.d.mode == MODES.index(mode), self.d.depth == 0)
        for index in self.original_of:
            site = self.layout.evidence[index]
            obligation = obligation_of(site.name, self.facts)
            native = site.adapter is None and obligation in upgrade
            optimizer.add(self._original(index, upgrade[obligation] if native else None))
        for obligation, index in self.native_spare.items():
            optimizer.add(self.d.evidence[index].present == upgrade.get(obligation, false))
        optimizer.add(*[z3.Not(self.d.evidence[i].present) for i in self.adapter_spares])
        for atom, present in self._spare_observations():
            optimizer.add(present == observe.get(atom, false))
        optimizer.add(self.v.label_is(Label.native_sound))
        optimizer.minimize(z3.Sum([z3.If(x, 1, 0) for x in [*upgrade.values(), *observe.values()]]))
        if not decided(optimizer.check(), optimizer):
            return None
        model = optimizer.model()
        chosen = [
            OBLIGATION_CODES[o]
            for o, x in upgrade.items()
            if z3.is_true(model.eval(x, model_completion=True))
        ]
        chosen += [a.value for a, x in observe.items() if z3.is_true(model.eval(x, model_completion=True))]
        return tuple(chosen)

    def adapter_plan(
        self, mode: ProtectionMode
    ) -> tuple[AdapterDepth, tuple[tuple[AdapterDepth, tuple[str, ...]], ...], tuple[str, ...]] | None:
        """The shallowest depth, then the fewest new adapter items, that make the mode sound.
        Spare items that could never count (an obligation outside the bundle, or one the
        spare's depth may not supply) stay absent; depths are tried shallowest first."""
        useful = [
            i
            for i in self.adapter_spares
            if obligation_of(self.layout.evidence[i].name, self.facts) in self.facts.mode_bundles[mode]
            and obligation_of(self.layout.evidence[i].name, self.facts)
            in self.facts.depth_supplies[self.layout.slot(self.layout.evidence[i])]
        ]
        constraints = [*self.base, self.d.mode == MODES.index(mode)]
        constraints += [self._original(i, None) for i in self.original_of]
        constraints += [z3.Not(self.d.evidence[i].present) for i in self.native_spare.values()]
        constraints += [z3.Not(self.d.evidence[i].present) for i in self.adapter_spares if i not in useful]
        for atom, present in self._spare_observations():
            if atom not in self.facts.mode_required_atoms[mode]:
                constraints.append(z3.Not(present))
        constraints.append(self.v.sound())
        solver = self.job.solver()
        solver.add(*constraints)
        shallowest = next(
            (k for k in range(len(DEPTHS)) if decided(solver.check(self.d.depth == k), solver)), None
        )
        if shallowest is None:
            return None
        optimizer = self.job.optimize()
        optimizer.add(*constraints, self.d.depth == shallowest)
        added = [self.d.evidence[i].present for i in useful]
        added += [present for _, present in self._spare_observations()]
        optimizer.minimize(z3.Sum([z3.If(x, 1, 0) for x in added]))
        placement = [
            z3.If(self.d.evidence[i].present, DEPTHS.index(self.layout.slot(self.layout.evidence[i])), 0)
            for i in useful
        ]
        optimizer.minimize(z3.Sum([*placement, z3.IntVal(0, self.job.ctx)]))  # ties: the shallower adapter
        if not decided(optimizer.check(), optimizer):
            return None
        model = optimizer.model()

        def chosen(term: z3.BoolRef) -> bool:
            return z3.is_true(model.eval(term, model_completion=True))

        depth = DEPTHS[model.eval(self.d.depth, model_completion=True).as_long()]
        by_depth: dict[AdapterDepth, list[str]] = {}
        for index in self.adapter_spares:
            if chosen(self.d.evidence[index].present):
                site = self.layout.evidence[index]
                code = OBLIGATION_CODES[obligation_of(site.name, self.facts)]
                by_depth.setdefault(self.layout.slot(site), []).append(code)
        observed = tuple(atom.value for atom, present in self._spare_observations() if chosen(present))
        route = tuple(sorted(((d, tuple(c)) for d, c in by_depth.items()), key=lambda x: x[0].rank))
        return depth, route, observed


def upgrades(
    loaded: list[tuple[Path, Descriptor]], facts: Facts | None = None, seed: int = DEFAULT_SEED
) -> list[Upgrade]:
    """Both plans for every (descriptor, mode) that is not native_sound at its best row."""
    return [found for item in loaded for found in descriptor_upgrades(item, facts, seed)]


def descriptor_upgrades(
    loaded: tuple[Path, Descriptor], facts: Facts | None = None, seed: int = DEFAULT_SEED
) -> list[Upgrade]:
    """Both plans for every mode of one descriptor that is not native_sound at its best row."""
    path, descriptor = loaded
    facts = facts or Facts.reference()
    plan = _Plan(descriptor, facts, seed)
    found = []
    for mode in ProtectionMode:
        verdicts = [lower_row(descriptor, LoweringRow(mode=mode, depth=d)) for d in AdapterDepth]
        best = max(verdicts, key=lambda v: (v.label.rank, -v.depth.rank))
        if best.label is Label.native_sound:
            continue
        adapter = plan.adapter_plan(mode)
        found.append(
            Upgrade(
                source=path.name,
                surface=descriptor.surface,
                mode=mode,
                best_label=best.label,
                best_depth=best.depth,
                native=plan.native_plan(mode),
                adapter_depth=adapter[0] if adapter else None,
                adapter=adapter[1] if adapter else None,
                observe=adapter[2] if adapter else (),
            )
        )
    return found


def upgrades_json(found: list[Upgrade]) -> str:
    return (
        json.dumps({"format": "kvclaims-native-upgrades/1", "rows": [u.summary() for u in found]}, indent=2)
        + "\n"
    )


def upgrades_markdown(found: list[Upgrade]) -> str:
    lines = [
        "# What would make each runtime native",
        "",
        "Generated by `kvclaims prove` (z3 `Optimize` over the lowering model); do not edit by hand.",
        "For each shipped descriptor and mode that is not `native_sound`: the fewest obligations",
        "(codes) and observation atoms whose *native* evidence would have to be supported, anchored",
        "and observed for the row at depth `none` to be `native_sound` (seed 000 section 7), and the",
        "shallowest adapter route: the depth, then the fewest new adapter items, that would make the",
        "mode sound without any native change.",
        "",
        "| surface | mode | best now | native upgrade | shallowest adapter route |",
        "|---|---|---|---|---|",
    ]
    for u in found:
        native = " ".join(u.native) if u.native else ("—" if u.native is not None else "impossible")
        if u.adapter is None:
            route = "none"
        else:
            parts = [f"{d}: {' '.join(c)}" for d, c in u.adapter] + (
                [f"observe: {' '.join(u.observe)}"] if u.observe else []
            )
            route = f"sound at {u.adapter_depth}" + (f" with {'; '.join(parts)}" if parts else " already")
        lines.append(
            f"| {u.surface} (`{u.source}`) | {u.mode} | {u.best_label} @ {u.best_depth} "
            f"| {native} | {route} |"
        )
    return "\n".join(lines) + "\n"
