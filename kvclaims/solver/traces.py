"""Adversarial traces by bounded model checking: short, plausible event sequences that break
exactly one refinement rule at their last step.

The BMC system has two claims (`claim-a`, the target, and `claim-b`) with fixed profiles per
class, two requests (`req-1` serves claim-a's restores and reuses, `req-2` claim-b's), and the
bookkeeping refinement adds to the lifecycle (a pending restoration per claim, a failed one, a
refusal owed after a failure with outcome refusal). Each step takes one *action*; an action is
legal when the Z3 claim relation (built from `TRANSITIONS`), the Z3 request relation (from
`REQUEST_TRANSITIONS`) and the bookkeeping all allow it. A class asks for the shortest legal
prefix followed by one action its condition makes illegal (or, for owed-at-end classes, a
legal trace that ends owing something). Capacity classes end with a legal refusal whose numbers
break exactly one check of `kvclaims.solver.capacity_model`, chosen by Z3 `Optimize` as close
as possible to consistent numbers.

The rules that judge more than the lifecycle (terms, capacity_state, duration, block_identity,
confirmed restores) enter as *variant* actions, each a lifecycle event written with something
that rule judges (changed terms, an overclaimed protected term, an early expiry, a removal
quoting other content, a restore nothing confirms). A class opts into the variants it names;
the rest of the search sees the plain actions only. Each such class names its conforming twin:
the same path with the variant replaced by its plain action (same length), which the checker
accepts.

Each path is written as a kvclaims trace v1 file and checked by the refinement checker
(`kvclaims.refinement.check_trace`): a generated trace counts only when it is rejected with
the class's rule at its planted step; any other answer blocks that path and the search goes on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import z3

from kvclaims.solver.capacity_model import CAPACITY_FIELDS, CapacityTerms, capacity_checks
from kvclaims.solver.engines import Inputs, State, Step, TransitionSystem
from kvclaims.solver.lifecycle_model import (
    PHASES,
    REQUEST_EVENTS,
    REQUEST_PHASES,
    claim_step_for,
    request_step,
)
from kvclaims.solver.z3env import DEFAULT_SEED, Job, all_of, any_of, decided
from kvclaims.spec.tracefile import closing_line
from kvclaims.spec.vocabulary import NS_PER_MS, ConformanceRule, ProtectionMode
from kvclaims.statemachine.lifecycle import ClaimProfile, Event, Phase
from kvclaims.statemachine.requests import RequestEvent, RequestPhase
from kvclaims.statemachine.system import RESERVING

E, RE = Event, RequestEvent
CLAIMS = ("claim-a", "claim-b")
REQUESTS = ("req-1", "req-2")
HEADER_USABLE = 8
FOOTPRINT = 2
ACTIVE_BLOCKS = 7
PROTECTED_OVERCLAIM = 2 * FOOTPRINT
"""The protected term of an overclaimed refusal: both claims' footprints."""
DURATION_MS = 50
"""The promised duration (`duration_ms`) of a timed class's claim-a."""
AT_END = "end of trace"


class Variant(StrEnum):
    """How a variant action differs from its plain event (what its rule judges)."""

    accept_downgraded = "accept_downgraded"
    """`resident_claim_accepted` of a submitted claim on other terms (mode best_effort)."""
    accept_conditionally = "accept_conditionally"
    """`resident_claim_conditionally_accepted` with those other terms (the conforming twin)."""
    overclaimed = "refuse_overclaimed"
    """A capacity refusal whose protected term is both claims' footprints."""
    early = "expire_early"
    """An expiry before the claim's `duration_ms` passed."""
    other_content = "remove_other_content"
    """`block_removed` of the claim's first block quoting a hash it was not stored with."""
    unconfirmed = "restore_unconfirmed"
    """`resident_claim_restored` without `restored_blocks` (and no block events)."""


@dataclass(frozen=True)
class Action:
    """One step of a trace: a claim event, a request event, or both (`claim` and `request`
    are indices; `blocking` names claims for conflicts; `variant` a rule-judged variant)."""

    name: str
    claim: int | None = None
    event: Event | None = None
    request: int | None = None
    request_event: RequestEvent | None = None
    blocking: tuple[int, ...] = ()
    variant: Variant | None = None


_CLAIM_ONLY = (
    E.submit,
    E.accept,
    E.reject,
    E.materialize,
    E.demote,
    E.expire,
    E.release,
    E.harm,
    E.lose,
    E.predicate_broken,
    E.offload,
)
_RESTORE = (
    E.require_restore,
    E.restore,
    E.restore_checkpoint_match,
    E.restore_checkpoint_mismatch,
    E.fail_restoration_refusal,
    E.fail_restoration_demotion,
    E.fail_restoration_expiry,
    E.fail_restoration_harm,
)


def _actions() -> tuple[Action, ...]:
    found: list[Action] = []
    for c, claim in enumerate(CLAIMS):
        found += [Action(f"{e}({claim})", c, e) for e in _CLAIM_ONLY]
        request = c  # claim c restores and reuses through request c
        found += [
            Action(
                f"{e}({claim},{REQUESTS[request]})",
                c,
                e,
                request,
                RE.reuse if e is E.require_restore else None,
            )
            for e in _RESTORE
        ]
        found += [
            Action(f"{e}({claim},{REQUESTS[request]})", c, e, request, RE.reuse)
            for e in (E.reuse_satisfied, E.reuse_unsatisfied)
        ]
        V = Variant
        found += [
            Action(f"{V.accept_downgraded}({claim})", c, E.accept, variant=V.accept_downgraded),
            Action(f"{V.accept_conditionally}({claim})", c, E.accept, variant=V.accept_conditionally),
            Action(f"{V.early}({claim})", c, E.expire, variant=V.early),
            Action(f"{V.other_content}({claim})", c, E.predicate_broken, variant=V.other_content),
            Action(f"{V.unconfirmed}({claim},{REQUESTS[c]})", c, E.restore, c, variant=V.unconfirmed),
        ]
    for r, request in enumerate(REQUESTS):
        found += [Action(f"admit({request})", request=r, request_event=RE.admit)]
        found += [Action(f"finish({request})", request=r, request_event=RE.finish)]
        for blocking in ((0,), (1,), (0, 1)):
            names = "+".join(CLAIMS[b] for b in blocking)
            found += [
                Action(
                    f"refuse_capacity({request};{names})",
                    request=r,
                    request_event=RE.refuse_capacity,
                    blocking=blocking,
                )
            ]
            found += [
                Action(f"defer({request};{names})", request=r, request_event=RE.defer, blocking=blocking)
            ]
        found += [
            Action(
                f"{Variant.overclaimed}({request};{CLAIMS[0]})",
                request=r,
                request_event=RE.refuse_capacity,
                blocking=(0,),
                variant=Variant.overclaimed,
            )
        ]
        found += [
            Action(
                f"refuse_restoration({request};{CLAIMS[c]})",
                request=r,
                request_event=RE.refuse_restoration,
                blocking=(c,),
            )
            for c in range(len(CLAIMS))
        ]
    return tuple(found)


ACTIONS: tuple[Action, ...] = _actions()
_FAILURES = {
    E.fail_restoration_refusal,
    E.fail_restoration_demotion,
    E.fail_restoration_expiry,
    E.fail_restoration_harm,
}
_STATE = (
    "phase_a",
    "phase_b",
    "request_1",
    "request_2",
    "pending_a",
    "pending_b",
    "failed_a",
    "failed_b",
    "owed_a",
    "owed_b",
    "held_a",
    "held_b",
    "unconfirmed_a",
    "unconfirmed_b",
    "kv_a",
    "kv_b",
)
"""Claim phases and request phases (integers), then per claim: a restoration pending, a
restoration failed, a refusal owed, its first block held with the content it stored, a restore
nothing confirmed, its KV blocks restored since the offload (booleans)."""
_RESERVING = tuple(PHASES.index(p) for p in sorted(RESERVING))


class TraceSystem:
    """The BMC transition system for fixed claim profiles, over the plain actions and the
    `variants` (action names) a class opts into; claim-a has a `duration_ms` when `timed`."""

    def __init__(
        self,
        job: Job,
        profiles: tuple[ClaimProfile, ClaimProfile],
        variants: frozenset[str] = frozenset(),
        timed: bool = False,
    ) -> None:
        self.job = job
        self.profiles = profiles
        self.two_key = tuple(p.two_key for p in profiles)
        self.timed = timed
        self.enabled = tuple((k, a) for k, a in enumerate(ACTIONS) if a.variant is None or a.name in variants)
        self._phase = job.int("phase")
        self._request_relations: dict[RequestEvent, tuple[z3.BoolRef, z3.ArithRef]] = {}
        int_sort, bool_sort = z3.IntSort(job.ctx), z3.BoolSort(job.ctx)
        self.system = TransitionSystem(
            job,
            [(name, int_sort if index < 4 else bool_sort) for index, name in enumerate(_STATE)],
            [("action", int_sort)],
            self._init,
            self._trans,
        )

    def _init(self, s: State) -> z3.BoolRef:
        absent, idle = PHASES.index(Phase.absent), REQUEST_PHASES.index(RequestPhase.absent)
        return z3.And(s[0] == absent, s[1] == absent, s[2] == idle, s[3] == idle, *[z3.Not(x) for x in s[4:]])

    def _claim(self, c: int, event: Event, phase: z3.ArithRef) -> tuple[z3.BoolRef, z3.ArithRef]:
        """The claim relation for claim `c`'s profile and `event`, at `phase`."""
        step = claim_step_for(self.profiles[c], phase, event)
        return step.legal, step.target

    def _request(self, event: RequestEvent, phase: z3.ArithRef) -> tuple[z3.BoolRef, z3.ArithRef]:
        if event not in self._request_relations:
            step = request_step(self._phase, self.job.val(REQUEST_EVENTS.index(event)))
            self._request_relations[event] = (z3.simplify(step.legal), z3.simplify(step.target))
        legal, target = self._request_relations[event]
        return z3.substitute(legal, (self._phase, phase)), z3.substitute(target, (self._phase, phase))

    def legal(self, s: State, action: Action) -> z3.BoolRef:
        """Every part of `action` is allowed in `s`."""
        ctx = self.job.ctx
        terms = []
        if action.claim is not None and action.event is not None:
            terms += self._claim_terms(s, action.claim, action.event)
        if action.request is not None and action.request_event is not None:
            r = action.request
            terms.append(self._request(action.request_event, s[2 + r])[0])
            if action.request_event is RE.finish:
                terms += [z3.Not(s[8 + r]), z3.Not(s[4 + r])]
            if action.request_event is RE.refuse_restoration:
                terms += [s[8 + b] for b in action.blocking] + [z3.BoolVal(action.blocking == (r,), ctx)]
            else:  # a capacity conflict blames claims that reserve device blocks (capacity_state)
                terms += [_in(s[b], _RESERVING) for b in action.blocking]
        for b in action.blocking:
            terms.append(self._claim(b, E.block, s[b])[0])
        terms += self._variant_terms(s, action)
        return all_of(ctx, terms)

    def _claim_terms(self, s: State, c: int, event: Event) -> list[z3.BoolRef]:
        terms = [self._claim(c, event, s[c])[0]]
        pending, failed = s[4 + c], s[6 + c]
        if event is E.require_restore:
            terms += [z3.Not(pending), z3.Not(failed)]
        if event in _FAILURES or (event is E.restore and not self.two_key[c]):
            terms.append(pending)
        if event is E.reuse_satisfied:
            terms += [z3.Not(failed), z3.Not(s[12 + c])]  # no satisfied reuse after an unconfirmed restore
        if event in (E.restore_checkpoint_match, E.restore_checkpoint_mismatch):
            terms.append(s[14 + c])  # a two-key claim's KV blocks come back before its checkpoint
        return terms

    def _variant_terms(self, s: State, action: Action) -> list[z3.BoolRef]:
        """What the variant's rule adds to its plain action's legality."""
        ctx, c, variant = self.job.ctx, action.claim, action.variant
        submitted = z3.BoolVal(False, ctx) if c is None else s[c] == PHASES.index(Phase.submitted)
        return {
            None: [],
            Variant.accept_downgraded: [z3.Not(submitted)],  # a change of terms must be conditional
            Variant.accept_conditionally: [submitted],
            Variant.overclaimed: [self._reserved(s) >= PROTECTED_OVERCLAIM],
            Variant.early: [z3.BoolVal(not (self.timed and c == 0), ctx)],
            Variant.other_content: [] if c is None else [z3.Not(s[10 + c])],
            Variant.unconfirmed: [],
        }[variant]

    def _reserved(self, s: State) -> z3.ArithRef:
        """The footprints the preserving claims reserve in the device pool."""
        return z3.Sum(
            [
                z3.If(_in(s[c], _RESERVING), self.job.val(FOOTPRINT), self.job.val(0))
                for c, profile in enumerate(self.profiles)
                if profile.preserving
            ]
            or [self.job.val(0)]
        )

    def effect(self, s: State, action: Action, t: State) -> z3.BoolRef:
        """The state after `action` (where it is legal)."""
        nxt: list[z3.ExprRef] = list(s)
        true, false = z3.BoolVal(True, self.job.ctx), z3.BoolVal(False, self.job.ctx)
        if action.claim is not None and action.event is not None:
            c = action.claim
            nxt[c] = self._claim(c, action.event, s[c])[1]
            event = action.event
            if event is E.require_restore:
                nxt[4 + c] = true
            if (
                event in _FAILURES
                or event is E.restore_checkpoint_match
                or (event is E.restore and not self.two_key[c])
            ):
                nxt[4 + c] = false
            if event in _FAILURES:
                nxt[6 + c] = true
            if event is E.fail_restoration_refusal:
                nxt[8 + c] = true
            if event is E.materialize:
                nxt[10 + c], nxt[12 + c] = true, false  # its blocks (when written) and a report
            if event is E.predicate_broken and action.variant is None:
                nxt[10 + c] = false
            if event is E.restore:
                unconfirmed = action.variant is Variant.unconfirmed
                nxt[12 + c], nxt[14 + c] = z3.BoolVal(unconfirmed, self.job.ctx), true
            if event in (E.offload, E.reuse_satisfied):
                nxt[12 + c] = false
            if event is E.offload:
                nxt[14 + c] = false
        if action.request is not None and action.request_event is not None:
            r = action.request
            nxt[2 + r] = self._request(action.request_event, s[2 + r])[1]
            if action.request_event is RE.refuse_restoration:
                for b in action.blocking:
                    nxt[8 + b] = false
        return z3.And([after == value for after, value in zip(t, nxt, strict=True)])

    def _trans(self, s: State, i: Inputs, t: State) -> z3.BoolRef:
        return any_of(
            self.job.ctx,
            [z3.And(i[0] == k, self.legal(s, a), self.effect(s, a, t)) for k, a in self.enabled],
        )


def _in(phase: z3.ArithRef, indices: tuple[int, ...]) -> z3.BoolRef:
    return any_of(phase.ctx, [phase == k for k in indices])


# --- classes -----------------------------------------------------------------------------------

Condition = Callable[[State], z3.BoolRef]
M = ProtectionMode


def _phase(c: int, *phases: Phase) -> Condition:
    return lambda s: any_of(s[c].ctx, [s[c] == PHASES.index(p) for p in phases])


@dataclass(frozen=True)
class TraceClass:
    """A near-valid trace shape: the rule it must break, the claim modes, the last action (or
    `AT_END`), and a condition on the state before it."""

    id: str
    rule: ConformanceRule
    summary: str
    modes: tuple[ProtectionMode, ProtectionMode]
    final: tuple[str, ...]
    when: Condition = lambda s: z3.BoolVal(True, s[0].ctx)
    two_key: bool = False
    capacity_check: str | None = None
    needs: tuple[str, ...] = ()
    timed: bool = False
    """claim-a promises `DURATION_MS`; its plain expiry is written after it, a variant's not."""
    twin: tuple[tuple[str, str], ...] = ()
    """(variant action, plain action): replacing each gives the conforming twin."""

    @property
    def variants(self) -> frozenset[str]:
        """The variant actions this class's search may take."""
        return frozenset({*self.final, *self.needs, *(variant for variant, _ in self.twin)})

    def conforming_twin(self, actions: tuple[Action, ...]) -> tuple[Action, ...]:
        """The same path with each variant replaced by its plain action (same length)."""
        by_name = {a.name: a for a in ACTIONS}
        plain = dict(self.twin)
        return tuple(by_name[plain.get(a.name, a.name)] for a in actions)


CLASSES: tuple[TraceClass, ...] = (
    TraceClass(
        "duplicate_acceptance",
        ConformanceRule.identity,
        "a claim id accepted twice (duplicate ownership)",
        (M.hard_protected, M.best_effort),
        ("accept(claim-a)",),
        _phase(0, Phase.materialized),
    ),
    TraceClass(
        "post_hoc_claim_naming",
        ConformanceRule.identity,
        "claim events before the claim was ever accepted",
        (M.offloadable, M.best_effort),
        ("materialize(claim-b)", "offload(claim-b)", "demote(claim-b)"),
        _phase(1, Phase.absent),
        needs=("materialize(claim-a)",),
    ),
    TraceClass(
        "unclaimed_failure",
        ConformanceRule.identity,
        "a restoration failure names a claim that was never accepted",
        (M.offloadable, M.offloadable),
        ("fail_restoration_refusal(claim-b,req-2)",),
        _phase(1, Phase.absent),
        needs=("require_restore(claim-a,req-1)",),
    ),
    TraceClass(
        "harm_after_demotion",
        ConformanceRule.lifecycle,
        "harm reported after the claim was demoted",
        (M.demotable, M.best_effort),
        ("harm(claim-a)",),
        _phase(0, Phase.demoted),
        needs=("materialize(claim-a)",),
    ),
    TraceClass(
        "harm_after_expiry",
        ConformanceRule.lifecycle,
        "harm reported after the claim expired",
        (M.expiring, M.best_effort),
        ("harm(claim-a)",),
        _phase(0, Phase.expired),
        needs=("materialize(claim-a)",),
    ),
    TraceClass(
        "harm_of_best_effort_claim",
        ConformanceRule.lifecycle,
        "a best_effort claim is 'harmed' (it is only lost)",
        (M.best_effort, M.hard_protected),
        ("harm(claim-a)",),
        _phase(0, Phase.materialized),
    ),
    TraceClass(
        "release_after_release",
        ConformanceRule.lifecycle,
        "a claim released twice",
        (M.hard_protected, M.best_effort),
        ("release(claim-a)",),
        _phase(0, Phase.released),
    ),
    TraceClass(
        "preserving_claim_lost",
        ConformanceRule.no_silent_harm,
        "a hard claim's loss reported as 'lost', not harm",
        (M.hard_protected, M.best_effort),
        ("lose(claim-a)",),
        _phase(0, Phase.materialized),
    ),
    TraceClass(
        "silent_break_then_demotion",
        ConformanceRule.no_silent_harm,
        "the predicate broke and the runtime demoted instead of reporting harm",
        (M.demotable, M.best_effort),
        ("demote(claim-a)", "release(claim-a)"),
        _phase(0, Phase.breached),
    ),
    TraceClass(
        "silent_break_at_end",
        ConformanceRule.no_silent_harm,
        "the predicate broke and the trace ended without harm",
        (M.hard_protected, M.best_effort),
        (AT_END,),
        _phase(0, Phase.breached),
    ),
    TraceClass(
        "restore_without_offload",
        ConformanceRule.offload_order,
        "restore_required for a claim that was never offloaded",
        (M.offloadable, M.best_effort),
        ("require_restore(claim-a,req-1)",),
        _phase(0, Phase.materialized),
    ),
    TraceClass(
        "reuse_before_restore",
        ConformanceRule.offload_order,
        "a satisfied reuse of an offloaded claim before it was restored",
        (M.offloadable, M.best_effort),
        ("reuse_satisfied(claim-a,req-1)",),
        _phase(0, Phase.offloaded, Phase.restoring),
    ),
    TraceClass(
        "failure_without_restore_required",
        ConformanceRule.offload_order,
        "restoration_failed with no pending restore_required for the claim",
        (M.offloadable, M.best_effort),
        ("fail_restoration_refusal(claim-a,req-1)", "fail_restoration_demotion(claim-a,req-1)"),
        _phase(0, Phase.offloaded),
    ),
    TraceClass(
        "fallback_recompute_after_failure",
        ConformanceRule.offload_order,
        "after a failed restoration the request reports the reuse satisfied (recomputed)",
        (M.offloadable, M.best_effort),
        ("reuse_satisfied(claim-a,req-1)",),
        lambda s: s[6],
    ),
    TraceClass(
        "wrong_claim_failure",
        ConformanceRule.offload_order,
        "the restoration failure names the other (accepted, never offloaded) claim",
        (M.offloadable, M.offloadable),
        ("fail_restoration_refusal(claim-b,req-2)",),
        lambda s: z3.And(s[1] == PHASES.index(Phase.materialized), s[0] == PHASES.index(Phase.restoring)),
    ),
    TraceClass(
        "reuse_after_checkpoint_mismatch",
        ConformanceRule.hybrid_two_key,
        "a two-key restore with a different value hash, then a satisfied reuse",
        (M.offloadable, M.best_effort),
        ("reuse_satisfied(claim-a,req-1)",),
        _phase(0, Phase.checkpoint_mismatch),
        needs=("restore(claim-a,req-1)",),  # the KV key first (refinement rule 11)
        two_key=True,
    ),
    TraceClass(
        "checkpoint_mismatch_at_end",
        ConformanceRule.hybrid_two_key,
        "a two-key restore with a different value hash never ends in a restoration failure",
        (M.offloadable, M.best_effort),
        (AT_END,),
        _phase(0, Phase.checkpoint_mismatch),
        needs=("restore(claim-a,req-1)",),  # the KV key first (refinement rule 11)
        two_key=True,
    ),
    TraceClass(
        "smeared_blocking_ids",
        ConformanceRule.attribution,
        "a capacity refusal also blames a best_effort claim (no preservation obligation)",
        (M.hard_protected, M.best_effort),
        ("refuse_capacity(req-2;claim-a+claim-b)",),
        lambda s: z3.And(s[0] == PHASES.index(Phase.materialized), s[1] == PHASES.index(Phase.materialized)),
    ),
    TraceClass(
        "blocking_released_claim",
        ConformanceRule.attribution,
        "a refusal blames a claim that was already released",
        (M.hard_protected, M.best_effort),
        ("refuse_capacity(req-2;claim-a)", "defer(req-2;claim-a)"),
        _phase(0, Phase.released),
        needs=("materialize(claim-a)",),
    ),
    TraceClass(
        "wrong_claim_refusal",
        ConformanceRule.attribution,
        "claim-a's restoration failed with outcome refusal; the refusal names claim-b",
        (M.offloadable, M.offloadable),
        ("refuse_restoration(req-1;claim-b)",),
        lambda s: z3.And(s[8], s[1] == PHASES.index(Phase.materialized)),
    ),
    TraceClass(
        "finish_before_refusal",
        ConformanceRule.attribution,
        "the request finished before the refusal its failed restoration owes",
        (M.offloadable, M.best_effort),
        ("finish(req-1)",),
        lambda s: s[8],
    ),
    TraceClass(
        "capacity_sum_mismatch",
        ConformanceRule.capacity_arithmetic,
        "resident_plus_active_blocks is not protected + active",
        (M.hard_protected, M.best_effort),
        ("refuse_capacity(req-2;claim-a)",),
        _phase(0, Phase.materialized),
        capacity_check="sum",
    ),
    TraceClass(
        "capacity_shortfall_mismatch",
        ConformanceRule.capacity_arithmetic,
        "the shortfall is not max(0, sum - usable) (the seed artifact's 86 / 68 / 19 mistake)",
        (M.hard_protected, M.best_effort),
        ("refuse_capacity(req-2;claim-a)",),
        _phase(0, Phase.materialized),
        capacity_check="shortfall",
    ),
    TraceClass(
        "capacity_usable_differs_from_header",
        ConformanceRule.capacity_arithmetic,
        "the refusal's usable_blocks differs from the header's",
        (M.hard_protected, M.best_effort),
        ("refuse_capacity(req-2;claim-a)",),
        _phase(0, Phase.materialized),
        capacity_check="header_usable",
    ),
    TraceClass(
        "capacity_refusal_without_shortfall",
        ConformanceRule.capacity_arithmetic,
        "a capacity refusal whose numbers fit in the pool",
        (M.hard_protected, M.best_effort),
        ("refuse_capacity(req-2;claim-a)",),
        _phase(0, Phase.materialized),
        capacity_check="capacity_needs_shortfall",
    ),
    TraceClass(
        "protected_term_beyond_reservations",
        ConformanceRule.capacity_state,
        "a refusal protects both footprints while only claim-a reserves device blocks",
        (M.hard_protected, M.best_effort),
        (f"{Variant.overclaimed}(req-2;claim-a)",),
        _phase(0, Phase.materialized),
        twin=((f"{Variant.overclaimed}(req-2;claim-a)", "refuse_capacity(req-2;claim-a)"),),
    ),
    TraceClass(
        "expiry_before_duration",
        ConformanceRule.duration,
        f"a claim promising {DURATION_MS} ms expires 1 ms after its last event",
        (M.expiring, M.best_effort),
        (f"{Variant.early}(claim-a)",),
        _phase(0, Phase.materialized),
        timed=True,
        twin=((f"{Variant.early}(claim-a)", "expire(claim-a)"),),
    ),
    TraceClass(
        "removal_with_other_content",
        ConformanceRule.block_identity,
        "block_removed quotes a hash the claim's block was never stored with",
        (M.best_effort, M.best_effort),
        (f"{Variant.other_content}(claim-a)",),
        lambda s: s[10],
        twin=((f"{Variant.other_content}(claim-a)", "predicate_broken(claim-a)"),),
    ),
    TraceClass(
        "downgrade_on_acceptance",
        ConformanceRule.terms,
        "a hard_protected submission accepted as best_effort without a conditional acceptance "
        "(its harm would pass as 'lost')",
        (M.hard_protected, M.best_effort),
        (f"{Variant.accept_downgraded}(claim-a)",),
        _phase(0, Phase.submitted),
        twin=((f"{Variant.accept_downgraded}(claim-a)", f"{Variant.accept_conditionally}(claim-a)"),),
    ),
    TraceClass(
        "reuse_after_unconfirmed_restore",
        ConformanceRule.offload_order,
        "a satisfied reuse after a restore that neither restored_blocks nor blocks confirmed",
        (M.offloadable, M.best_effort),
        ("reuse_satisfied(claim-a,req-1)",),
        lambda s: s[12],
        twin=((f"{Variant.unconfirmed}(claim-a,req-1)", "restore(claim-a,req-1)"),),
    ),
    TraceClass(
        "checkpoint_before_kv_restore",
        ConformanceRule.hybrid_two_key,
        "a two-key claim's matching checkpoint restored before its KV blocks",
        (M.offloadable, M.best_effort),
        ("restore_checkpoint_match(claim-a,req-1)",),
        lambda s: z3.And(s[0] == PHASES.index(Phase.restoring), z3.Not(s[14])),
        two_key=True,
        twin=(("restore_checkpoint_match(claim-a,req-1)", "restore(claim-a,req-1)"),),
    ),
)

BOUND = 9
"""BMC bound (actions) for one adversarial trace."""


# --- search ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdversarialTrace:
    cls: TraceClass
    actions: tuple[Action, ...]
    lines: tuple[str, ...]
    planted_index: int | None

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _profiles(cls: TraceClass) -> tuple[ClaimProfile, ClaimProfile]:
    return (ClaimProfile.of(cls.modes[0], two_key=cls.two_key), ClaimProfile.of(cls.modes[1]))


def candidates(cls: TraceClass, seed: int = DEFAULT_SEED, limit: int = 8) -> Iterator[tuple[Action, ...]]:
    """Shortest action paths for `cls`, each excluded from the next search."""
    job = Job(seed=seed)
    model = TraceSystem(job, _profiles(cls), cls.variants, cls.timed)
    index = {a.name: k for k, a in enumerate(ACTIONS)}
    finals = [index[name] for name in cls.final if name != AT_END]
    blocked: list[list[int]] = []

    def target(s: State, i: Inputs) -> z3.BoolRef:
        if cls.final == (AT_END,):
            return z3.And(cls.when(s), i[0] == -1)
        planted = [z3.And(i[0] == k, z3.Not(model.legal(s, ACTIONS[k]))) for k in finals]
        if cls.capacity_check is not None:  # the refusal itself is legal; its numbers are not
            planted = [z3.And(i[0] == k, model.legal(s, ACTIONS[k])) for k in finals]
        return z3.And(cls.when(s), any_of(job.ctx, planted))

    for _ in range(limit):
        path = _shortest(model, target, cls, blocked, index)
        if path is None:
            return
        ids = [int(step.inputs["action"]) for step in path]
        blocked.append(ids)
        yield tuple(ACTIONS[k] for k in ids if k >= 0)


def _shortest(
    model: TraceSystem,
    target: Callable[[State, Inputs], z3.BoolRef],
    cls: TraceClass,
    blocked: list[list[int]],
    index: dict[str, int],
) -> list[Step] | None:
    """Incremental BMC: the shortest path whose last step meets `target`, that takes every
    action of the class's story (`needs`) and is not one of the `blocked` paths."""
    job, system = model.job, model.system
    solver = job.solver()
    states = [system.state("s0")]
    inputs: list[Inputs] = []
    solver.add(system.init(states[0]))
    for bound in range(BOUND + 1):
        inputs.append(system.inputs(f"i{bound}"))
        solver.push()
        solver.add(target(states[bound], inputs[bound]))
        for need in cls.needs:
            solver.add(any_of(job.ctx, [inputs[k][0] == index[need] for k in range(bound)]))
        for path in blocked:
            if len(path) == bound + 1:
                solver.add(z3.Not(z3.And([inputs[k][0] == a for k, a in enumerate(path)])))
        if decided(solver.check(), solver):
            found = solver.model()
            return [Step({}, {"action": found.eval(i[0], model_completion=True).as_long()}) for i in inputs]
        solver.pop()
        states.append(system.state(f"s{bound + 1}"))
        solver.add(system.trans(states[bound], inputs[bound], states[bound + 1]))
    return None


# --- writing trace v1 --------------------------------------------------------------------------


def _capacity_numbers(check: str | None, protected: int, seed: int) -> dict[str, int]:
    """Consistent numbers for `protected`, or (with `check`) the nearest numbers that break
    only that check."""
    consistent = {
        "protected_resident_blocks": protected,
        "active_live_blocks_required": ACTIVE_BLOCKS,
        "resident_plus_active_blocks": protected + ACTIVE_BLOCKS,
        "usable_blocks": HEADER_USABLE,
        "capacity_shortfall_blocks": max(0, protected + ACTIVE_BLOCKS - HEADER_USABLE),
    }
    if check is None:
        return consistent
    job = Job(seed=seed)
    terms = CapacityTerms.fresh(job, "refusal", with_header=True)
    checks = capacity_checks(terms)
    optimizer = job.optimize()
    optimizer.add(terms.non_negative(), terms.capacity_reason, terms.header_usable == HEADER_USABLE)  # type: ignore[operator]
    optimizer.add(z3.Not(checks[check]), *[term for name, term in checks.items() if name != check])
    values = terms.values()
    distance = z3.Sum(
        [
            z3.If(v >= consistent[n], v - consistent[n], consistent[n] - v)
            for n, v in zip(CAPACITY_FIELDS, values, strict=True)
        ]
    )
    optimizer.minimize(distance)
    if not decided(optimizer.check(), optimizer):
        raise AssertionError(f"no numbers break only {check}")
    model = optimizer.model()
    return {
        n: model.eval(v, model_completion=True).as_long()
        for n, v in zip(CAPACITY_FIELDS, values, strict=True)
    }


def write_trace(cls: TraceClass, actions: tuple[Action, ...], seed: int = DEFAULT_SEED) -> AdversarialTrace:
    """The actions as kvclaims trace v1 lines (header first, seq strictly increasing)."""
    lines = [
        json.dumps(
            {
                "kvclaims_trace": 1,
                "source": f"kvclaims adversary (BMC): {cls.id}",
                "usable_blocks": HEADER_USABLE,
                "block_size": 16,
            }
        )
    ]
    writer = _Writer(cls, actions)
    planted: int | None = None
    for position, action in enumerate(actions):
        last = position == len(actions) - 1 and cls.final != (AT_END,)
        if last:
            planted = writer.count + 1  # the seq of the planted event
        for event in writer.events(action, capacity=cls.capacity_check if last else None, seed=seed):
            lines.append(json.dumps(event))
    lines.append(closing_line(writer.count + 1).decode().rstrip("\n"))
    return AdversarialTrace(cls, actions, tuple(lines), planted)


@dataclass
class _Writer:
    cls: TraceClass
    actions: tuple[Action, ...]
    count: int = 0
    waited_ns: int = 0
    """Time skipped so that a timed claim's plain expiry comes after its duration."""
    broken: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.broken = {a.claim for a in self.actions if a.event is E.predicate_broken and a.claim is not None}

    def _event(self, name: str, **fields: Any) -> dict[str, Any]:
        self.count += 1
        return {"seq": self.count, "event": name, "t_ns": 1_000_000 * self.count + self.waited_ns, **fields}

    def _terms(self, c: int, *, downgraded: bool = False) -> dict[str, Any]:
        mode = ProtectionMode.best_effort if downgraded else self.cls.modes[c]
        two_key = self.cls.two_key and c == 0
        predicate = (
            {"kind": "hybrid_two_key", "boundary_blocks": FOOTPRINT}
            if two_key
            else {"kind": "leading_prefix_at_least", "blocks": FOOTPRINT}
        )
        terms = {
            "claim_id": CLAIMS[c],
            "owner_scope": f"tenant-{c}",
            "object_id": f"prefix-{c}",
            "mode": mode.value,
            "footprint_blocks": FOOTPRINT,
            "predicate": predicate,
        }
        if self.cls.timed and c == 0:
            terms["duration_ms"] = DURATION_MS
        elif mode is ProtectionMode.expiring:
            terms["duration_steps"] = 100
        return terms

    def events(self, action: Action, *, capacity: str | None, seed: int) -> Iterator[dict[str, Any]]:
        if action.event is not None and action.claim is not None:
            yield from self._claim_events(action)
            return
        assert action.request is not None and action.request_event is not None
        request = REQUESTS[action.request]
        kind = action.request_event
        if kind is RE.admit:
            yield self._event("active_request_admitted", request_id=request, active_live_blocks=1)
        elif kind is RE.finish:
            yield self._event("request_finished", request_id=request, status="finished")
        else:
            name = "active_request_deferred" if kind is RE.defer else "active_request_refused"
            reason = "restoration_failed" if kind is RE.refuse_restoration else "capacity"
            fields: dict[str, Any] = {
                "request_id": request,
                "reason": reason,
                "blocking_claim_ids": [CLAIMS[b] for b in action.blocking],
            }
            if reason == "capacity":
                overclaimed = action.variant is Variant.overclaimed
                protected = PROTECTED_OVERCLAIM if overclaimed else FOOTPRINT * len(action.blocking)
                fields |= _capacity_numbers(capacity, protected, seed)
            yield self._event(name, **fields)

    def _claim_events(self, action: Action) -> Iterator[dict[str, Any]]:
        c, event = action.claim, action.event
        assert c is not None and event is not None
        claim = CLAIMS[c]
        request = REQUESTS[c]
        two_key = self.cls.two_key and c == 0
        if event is E.submit:
            yield self._event("resident_claim_submitted", **self._terms(c))
        elif event is E.accept:
            conditional = action.variant is Variant.accept_conditionally
            name = "resident_claim_conditionally_accepted" if conditional else "resident_claim_accepted"
            yield self._event(name, **self._terms(c, downgraded=action.variant is not None))
        elif event is E.reject:
            yield self._event("resident_claim_rejected", claim_id=claim, reason="over budget")
        elif event is E.materialize:
            if c in self.broken:
                for position in range(FOOTPRINT):
                    yield self._event(
                        "block_stored", block_id=10 * c + position, block_hash=f"h{c}-{position}",
                        cache_level="gpu", claim_id=claim, position=position,
                    )  # fmt: skip
            fields: dict[str, Any] = {"claim_id": claim, "leading_blocks": FOOTPRINT}
            if two_key:
                fields["checkpoint"] = {
                    "boundary": FOOTPRINT,
                    "payload_hash": "payload-1",
                    "value_hash": "value-1",
                }
            yield self._event("resident_claim_materialized", **fields)
        elif event in (E.demote, E.expire, E.release):
            if event is E.expire and self.cls.timed and c == 0 and action.variant is None:
                self.waited_ns += DURATION_MS * NS_PER_MS
            name = {
                E.demote: "resident_claim_demoted",
                E.expire: "resident_claim_expired",
                E.release: "resident_claim_released",
            }[event]
            yield self._event(name, claim_id=claim)
        elif event is E.harm:
            yield self._event(
                "resident_claim_harmed", claim_id=claim, leading_blocks=0, required_blocks=FOOTPRINT
            )
        elif event is E.lose:
            yield self._event("resident_claim_lost", claim_id=claim, leading_blocks=0)
        elif event is E.predicate_broken:
            other = action.variant is Variant.other_content
            yield self._event(
                "block_removed",
                block_id=10 * c,
                block_hash=f"h{c}-0{'-other' if other else ''}",
                cache_level="gpu",
                claim_id=claim,
                position=0,
            )
        elif event is E.offload:
            yield self._event("resident_claim_offloaded", claim_id=claim, tier="cpu")
        elif event is E.require_restore:
            yield self._event("resident_claim_restore_required", claim_id=claim, request_id=request)
        elif event is E.restore:
            confirmed = {} if action.variant is Variant.unconfirmed else {"restored_blocks": FOOTPRINT}
            yield self._event("resident_claim_restored", claim_id=claim, request_id=request, **confirmed)
        elif event in (E.restore_checkpoint_match, E.restore_checkpoint_mismatch):
            value = "value-1" if event is E.restore_checkpoint_match else "value-2"
            yield self._event(
                "resident_claim_checkpoint_restored", claim_id=claim, boundary=FOOTPRINT,
                payload_hash="payload-1", value_hash=value,
            )  # fmt: skip
        elif event in _FAILURES:
            outcome = event.value.removeprefix("fail_restoration_")
            yield self._event(
                "resident_claim_restoration_failed", claim_id=claim, request_id=request, outcome=outcome
            )
        elif event in (E.reuse_satisfied, E.reuse_unsatisfied):
            satisfied = event is E.reuse_satisfied
            yield self._event(
                "request_reused", request_id=request, claim_id=claim,
                cached_blocks=FOOTPRINT if satisfied else 0, predicate_satisfied=satisfied,
            )  # fmt: skip
        else:
            raise ValueError(f"no trace event for {event}")


# --- running -----------------------------------------------------------------------------------

Check = Callable[[bytes], Any]
"""`check(trace bytes) -> verdict` (the refinement checker's `check_bytes`)."""


@dataclass
class TraceReport:
    written: list[dict[str, Any]] = field(default_factory=list)
    discarded: list[dict[str, Any]] = field(default_factory=list)
    missing_classes: list[str] = field(default_factory=list)


def generate(
    out: Path | None,
    check: Check | None,
    *,
    seed: int = DEFAULT_SEED,
    per_class: int = 1,
    classes: tuple[TraceClass, ...] = CLASSES,
) -> TraceReport:
    """For each class, up to `per_class` traces the checker rejects with the class's rule at the
    planted step (when `check` is given; otherwise every candidate is kept). Written under
    `out/traces/<class>-<n>.ndjson` with `out/traces/index.json`."""
    report = TraceReport()
    target = None if out is None else out / "traces"
    for cls in classes:
        kept = 0
        for actions in candidates(cls, seed=seed, limit=8 * per_class):
            trace = write_trace(cls, actions, seed=seed)
            entry: dict[str, Any] = {
                "class": cls.id,
                "rule": cls.rule.value,
                "summary": cls.summary,
                "actions": [a.name for a in actions] + ([AT_END] if cls.final == (AT_END,) else []),
                "planted_seq": trace.planted_index,
            }
            if check is not None:
                verdict = check(trace.text().encode())
                entry |= _judged(verdict)
                if not _as_planted(entry, trace, cls):
                    report.discarded.append(entry)
                    continue
            kept += 1
            entry["file"] = f"{cls.id}-{kept}.ndjson"
            if target is not None:
                target.mkdir(parents=True, exist_ok=True)
                (target / entry["file"]).write_text(trace.text(), encoding="utf-8")
            report.written.append(entry)
            if kept == per_class:
                break
        if kept == 0:
            report.missing_classes.append(cls.id)
    if target is not None:
        target.mkdir(parents=True, exist_ok=True)
        document = {"format": "kvclaims-adversarial-traces/1", "seed": seed, "traces": report.written}
        (target / "index.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return report


def _judged(verdict: Any) -> dict[str, Any]:
    counterexample = verdict.counterexample
    return {
        "outcome": str(verdict.outcome),
        "rejected_rule": str(counterexample.rule) if counterexample else None,
        "rejected_line": counterexample.line if counterexample else None,
    }


def _as_planted(entry: dict[str, Any], trace: AdversarialTrace, cls: TraceClass) -> bool:
    """Rejected with the class's rule, at the planted event (line = seq + 1), or at the end."""
    if entry["outcome"] != "rejected" or entry["rejected_rule"] != cls.rule.value:
        return False
    if cls.final == (AT_END,):
        return True
    return entry["rejected_line"] == (trace.planted_index or 0) + 1  # line 1 is the header
