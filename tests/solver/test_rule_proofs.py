"""The rule obligations (terms, capacity_state, duration and its soft terms, block_identity,
confirmed restores): each is proved with a vacuity witness the system model accepts and a
counterexample without the rule that the system model rejects; and each Z3 encoding agrees with
`system.step` on every short history of its alphabet (so a proof about the encoding is a proof
about the model)."""

import itertools
from functools import partial
from typing import Any

import pytest
import z3

from kvclaims.solver import rule_proofs as rp
from kvclaims.solver.engines import Step
from kvclaims.solver.lifecycle_model import EVENTS, PHASES
from kvclaims.solver.proofs import ProofResult, Verdict, run_obligation
from kvclaims.solver.z3env import Job
from kvclaims.spec.trace import EVENT_MODELS, TraceHeader
from kvclaims.spec.vocabulary import ConformanceRule, ProtectionMode
from kvclaims.statemachine import system
from kvclaims.statemachine.lifecycle import Event, Phase

E, R = Event, ConformanceRule
BY_NAME = {o.name: o for o in rp.OBLIGATIONS}


@pytest.fixture(scope="module")
def results() -> dict[str, ProofResult]:
    return {name: run_obligation(obligation) for name, obligation in BY_NAME.items()}


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_obligation_is_proved_with_witnesses_the_system_model_accepts(
    name: str, results: dict[str, ProofResult]
) -> None:
    result = results[name]
    assert result.verdict is Verdict.proved, result.detail
    witnesses = result.detail["vacuity_witnesses"]
    assert witnesses and all(w["found"] and w["system_model"] == "accepted" for w in witnesses.values())
    assert result.detail["without_the_rule"]
    assert all(w["found"] and w["as_expected"] for w in result.detail["without_the_rule"].values())


@pytest.mark.parametrize(
    ("name", "guard", "rule"),
    [
        ("terms.plain_acceptance_cannot_launder_harm", "plain_acceptance_repeats_terms", R.terms),
        (
            "capacity.refusal_justified_by_reserved_blocks",
            "protected_term_within_reservations",
            R.capacity_state,
        ),
        ("duration.no_expiry_before_promised_duration", "no_expiry_before_duration", R.duration),
        ("duration.extensions_only_lengthen_within_the_cap", "extend_only", R.duration),
        ("duration.extensions_only_lengthen_within_the_cap", "within_the_cap", R.duration),
        ("duration.extensions_only_lengthen_within_the_cap", "expiry_after_the_promised_end", R.duration),
        ("restore.satisfied_reuse_only_after_confirmed_restore", "confirmation", R.offload_order),
        ("restore.satisfied_reuse_only_after_confirmed_restore", "kv_before_checkpoint", R.hybrid_two_key),
    ],
)
def test_without_the_rule_the_counterexample_is_rejected_with_exactly_that_rule(
    name: str, guard: str, rule: ConformanceRule, results: dict[str, ProofResult]
) -> None:
    entry = results[name].detail["without_the_rule"][guard]
    assert entry["system_model"].startswith(f"rejected: {rule} at event ")


def test_replay_names_the_rule_and_the_event() -> None:
    terms = {"claim_id": "c", "owner_scope": "t", "object_id": "o", "footprint_blocks": 2}
    predicate = {"predicate": {"kind": "leading_prefix_at_least", "blocks": 2}}
    downgrade = [
        {"event": "resident_claim_submitted", "mode": "hard_protected", **terms, **predicate},
        {"event": "resident_claim_accepted", "mode": "best_effort", **terms, **predicate},
    ]
    result = rp.replay(downgrade)
    assert (result.rule, result.position, result.state) == (R.terms, 2, None)
    conditional = [downgrade[0], {**downgrade[1], "event": "resident_claim_conditionally_accepted"}]
    conditional.append({"event": "resident_claim_lost", "claim_id": "c", "leading_blocks": 0})
    assert rp.accepted(rp.replay(conditional))


def test_an_outcome_is_not_proved_when_a_witness_is_missing_or_rejected() -> None:
    def write(events: list[dict[str, Any]]) -> rp.History:
        return events, None

    lost_unaccepted = [{"event": "resident_claim_lost", "claim_id": "c", "leading_blocks": 0}]
    rejected = rp._outcome(True, {}, witnesses={"w": (lost_unaccepted, write, rp.accepted)}, without={})
    missing = rp._outcome(True, {}, witnesses={"w": (None, write, rp.accepted)}, without={})
    unproved = rp._outcome(False, {}, witnesses={}, without={})
    assert not rejected.proved and rejected.detail["vacuity_witnesses"]["w"]["system_model"] != "accepted"
    assert not missing.proved and not unproved.proved


# --- each encoding agrees with system.step on every short history of its alphabet ---------------


class _Encoding:
    """A rule encoding's step, evaluated on concrete values (memoized: short histories revisit
    few states)."""

    def __init__(self, step: Any) -> None:
        self.step = step
        self.ctx = z3.Context()
        self.known: dict[tuple[tuple[Any, ...], tuple[int, ...]], tuple[bool, list[Any]]] = {}

    def _concrete(self, values: list[Any] | tuple[Any, ...]) -> list[z3.ExprRef]:
        return [z3.BoolVal(v, self.ctx) if isinstance(v, bool) else z3.IntVal(v, self.ctx) for v in values]

    def take(self, state: list[Any], taken: tuple[int, ...]) -> tuple[bool, list[Any]]:
        key = (tuple(state), taken)
        if key not in self.known:
            legal, after = self.step(self._concrete(state), self._concrete(taken))
            self.known[key] = (z3.is_true(z3.simplify(legal)), [_value(z3.simplify(x)) for x in after])
        return self.known[key]

    def run(self, init: list[Any], inputs: list[tuple[int, ...]]) -> tuple[list[Step], bool]:
        """The path taken, and whether every step was legal (the path ends at the first
        illegal step)."""
        state, path = init, []
        for taken in inputs:
            path.append(Step(dict(enumerate(state)), {"taken": taken}))
            legal, after = self.take(state, taken)
            if not legal:
                return path, False
            state = after
        return path, True


def _value(term: z3.ExprRef) -> Any:
    return z3.is_true(term) if z3.is_bool(term) else term.as_long()


def _agree(
    step: Any, init: list[Any], alphabet: list[tuple[int, ...]], write: Any, length: int, keep: Any = None
) -> int:
    """Every history of `length` steps over `alphabet` (that `keep` keeps): the encoding accepts
    it iff the system model does (up to the encoding's first illegal step). Returns how many
    were compared."""
    compared, encoding = 0, _Encoding(step)
    for inputs in itertools.product(alphabet, repeat=length):
        if keep is not None and not keep(inputs):
            continue
        path, legal = encoding.run(init, list(inputs))
        result = rp.replay(write(path)[0], write(path)[1])
        assert (result.rule is None) == legal, (inputs, result.rule, result.position)
        compared += 1
    return compared


def test_terms_encoding_agrees_with_the_system_model() -> None:
    modes = range(len(rp.MODES))
    alphabet = [(EVENTS.index(e), m) for e in (E.submit, E.accept) for m in modes]
    alphabet += [(rp._CONDITIONAL, m) for m in modes]
    alphabet += [(EVENTS.index(e), 0) for e in (E.materialize, E.lose)]

    def write(path: list[Step]) -> rp.History:
        return rp._terms_events(
            [Step({}, {"event": s.inputs["taken"][0], "mode": s.inputs["taken"][1]}) for s in path]
        )

    init = [PHASES.index(Phase.absent), -1, -1, False, False]
    assert _agree(lambda s, i: rp._terms_step(s, i, True), init, alphabet, write, 3) == len(alphabet) ** 3


def test_block_encoding_agrees_with_the_system_model() -> None:
    alphabet = [(rp._STORE, c, h) for c in (0, 1) for h in (0, 1)]
    alphabet += [(rp._REMOVE, n, h) for n in (-1, 0, 1) for h in (0, 1)]

    def write(path: list[Step]) -> rp.History:
        keys = ("kind", "claim", "hash")
        return rp._block_events([Step({}, dict(zip(keys, s.inputs["taken"], strict=True))) for s in path])

    init = [rp._NO_CONTENT, False, False, rp._NO_CONTENT, rp._NO_CONTENT]
    assert _agree(lambda s, i: rp._block_step(s, i, True), init, alphabet, write, 3) == len(alphabet) ** 3


def test_duration_encoding_agrees_with_the_system_model() -> None:
    """Over histories whose clocks never decrease (the encoding's assumption)."""
    ms = 1_000_000
    alphabet = [(kind, t) for kind in (rp._ACCEPT, rp._HIT, rp._EXPIRE) for t in (0, 2 * ms, 4 * ms)]

    def monotone(inputs: tuple[tuple[int, int], ...]) -> bool:
        return all(a[1] <= b[1] for a, b in itertools.pairwise(inputs))

    for refresh in (False, True):
        init = [rp._ABSENT, 0, 0, 0, 0, refresh, 3]

        def write(path: list[Step], init: list[Any] = init) -> rp.History:
            state = {"refresh": init[5], "duration_ms": init[6]}
            keys = ("kind", "t_ns")
            return rp._duration_events(
                [Step(state, dict(zip(keys, s.inputs["taken"], strict=True))) for s in path]
            )

        assert _agree(lambda s, i: rp._duration_step(s, i, True), init, alphabet, write, 3, monotone) > 100


def _soft_write(init: list[Any]) -> Any:
    def write(path: list[Step]) -> rp.History:
        fixed = {"refresh": init[6], "duration_ms": init[7], "max_duration_ms": init[8]}
        keys = ("kind", "t_ns", "grant_ms")
        return rp._soft_events([Step(fixed, dict(zip(keys, s.inputs["taken"], strict=True))) for s in path])

    return write


def test_soft_terms_encoding_agrees_with_the_system_model() -> None:
    """Over histories whose clocks never decrease: an acceptance (duration 3 ms, a cap of 3 or
    5 ms, with and without refresh_on_hit), then refreshing hits, extensions by 1 or 3 ms and
    expiries at 0..6 ms (shorter histories, acceptance anywhere, too)."""
    ms = 1_000_000
    times = (0, 2 * ms, 4 * ms, 6 * ms)
    alphabet = [(kind, t, 0) for kind in (rp._ACCEPT, rp._HIT, rp._EXPIRE) for t in times]
    alphabet += [(rp._EXTEND, t, g) for t in times for g in (1, 3)]

    def monotone(inputs: tuple[tuple[int, int, int], ...]) -> bool:
        return all(a[1] <= b[1] for a, b in itertools.pairwise(inputs))

    def accepted_first(inputs: tuple[tuple[int, int, int], ...]) -> bool:
        return inputs[0] == (rp._ACCEPT, 0, 0) and monotone(inputs)

    for refresh in (False, True):
        for cap in (3, 5):
            init = [rp._ABSENT, 0, 0, 0, 0, 0, refresh, 3, cap]
            step = partial(rp._soft_step, guards=rp._EXTENSION_GUARDS)
            write = _soft_write(init)
            assert _agree(step, init, alphabet, write, 2, monotone) > 50
            assert _agree(step, init, alphabet, write, 4, accepted_first) > 1000


def test_the_soft_terms_counterexamples_break_the_dropped_guard() -> None:
    """Each counterexample without a guard is rejected by `system.step` for that guard's reason
    (not merely with rule duration)."""
    reasons = {
        "extend_only": "deadlines only extend",
        "within_the_cap": "past its max_duration_ms",
        "expiry_after_the_promised_end": "it promised",
    }
    job = Job()
    for guard, why in reasons.items():
        path = rp._without_guard(job, guard)
        assert path is not None
        events, _ = rp._soft_events(path)
        violation = _first_violation(events)
        assert violation is not None and violation.rule is R.duration, (guard, events)
        assert why in violation.message, (guard, violation.message)
        if guard == "expiry_after_the_promised_end":
            assert [e["event"] for e in events][-2:] == ["resident_claim_extended", "resident_claim_expired"]


def _first_violation(events: list[dict[str, Any]]) -> Any:
    state = system.init(TraceHeader(kvclaims_trace=1, block_size=16))
    for k, fields in enumerate(events, start=1):
        fields = {"seq": k, **fields}
        after = system.step(state, EVENT_MODELS[fields["event"]].model_validate(fields), k)
        if isinstance(after, system.Violation):
            return after
    return None


def test_restore_encoding_agrees_with_the_system_model() -> None:
    others = (E.accept, E.materialize, E.offload, E.require_restore, E.reuse_satisfied)
    for name, profile in rp._RESTORE_PROFILES.items():
        encoding = _Encoding(lambda s, i, p=profile: rp._restore_step(p, s, i, rp._GUARDS))
        alphabet = [(EVENTS.index(E.restore), n) for n in (-1, 0, 2)]
        alphabet += [(EVENTS.index(e), 2) for e in others]
        if profile.two_key:
            alphabet += [(EVENTS.index(E.restore_checkpoint_match), 0)]
        prefix = [(EVENTS.index(E.accept), 0), (EVENTS.index(E.materialize), 2), (EVENTS.index(E.offload), 0)]
        init = [PHASES.index(Phase.absent), 2, 2, 0, *[False] * 7]

        def write(path: list[Step], profile: Any = profile) -> rp.History:
            steps = [
                Step(
                    {"required": 2, "footprint": 2},
                    {"event": s.inputs["taken"][0], "n": s.inputs["taken"][1]},
                )
                for s in path
            ]
            return rp._restore_events(profile)(steps)

        for suffix in itertools.product(alphabet, repeat=3):
            inputs = prefix + list(suffix)
            path, legal = encoding.run(init, inputs)
            events, usable = write(path)
            result = rp.replay(events, usable)
            assert (result.rule is None) == legal, (name, [EVENTS[k].value for k, _ in inputs], result.rule)


def test_the_terms_representatives_cover_every_one_key_profile() -> None:
    from kvclaims.statemachine.lifecycle import ClaimProfile

    assert {ClaimProfile.of(m) for m in rp.MODES} == {ClaimProfile.of(m) for m in ProtectionMode}
    assert len(rp.MODES) == len(set(rp.MODES))


def test_the_block_witness_shows_a_removal_affecting_both_holders(results: dict[str, ProofResult]) -> None:
    """The removal names claim-b; claim-a, which shared the block (equal hashes), lost it too."""
    witness = results["blocks.holders_keep_their_content"].detail["vacuity_witnesses"]
    events = witness["shared_block_removed_naming_one_holder"]["events"]
    stored = [e for e in events if e.startswith("block_stored")]
    assert len(stored) == 2 and "'claim_id': 'claim-a'" in stored[0] + stored[1]
    assert events[-1].startswith("block_removed") and "'claim_id': 'claim-b'" in events[-1]


def test_the_soft_terms_witnesses_extend_and_cap(results: dict[str, ProofResult]) -> None:
    witnesses = results["duration.extensions_only_lengthen_within_the_cap"].detail["vacuity_witnesses"]
    extended = [e.split()[0] for e in witnesses["expiry_after_a_hit_and_a_lengthening_extension"]["events"]]
    assert extended[-3:] == ["request_reused", "resident_claim_extended", "resident_claim_expired"]
    capped = [e.split()[0] for e in witnesses["expiry_at_the_cap_before_the_refreshed_duration"]["events"]]
    assert capped[-2:] == ["request_reused", "resident_claim_expired"]


def test_the_duration_witness_expires_after_the_refreshing_hit(results: dict[str, ProofResult]) -> None:
    events = results["duration.no_expiry_before_promised_duration"].detail["vacuity_witnesses"]
    names = [e.split()[0] for e in events["expiry_on_time_after_a_refreshing_hit"]["events"]]
    assert names[-2:] == ["request_reused", "resident_claim_expired"]
