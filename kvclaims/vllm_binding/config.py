"""The binding's engine-side configuration: one object, read from vLLM's `additional_config`.

An operator starts vLLM with `--scheduler-cls kvclaims.vllm_binding.ClaimScheduler` and, when
the defaults do not fit, `--additional-config '{"kvclaims": {...}}'` (offline:
`vllm.LLM(..., **BindingConfig(...).engine_kwargs())`). Everything here is operator input,
trusted and validated strictly: a malformed binding config stops the engine at start-up with
a located message, because serving with a half-understood claim policy would be worse.
Client input (per-request claim metadata) is never read from here; see `metadata`.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, ValidationError, model_validator

from kvclaims.spec._types import Identifier, PositiveInt, SpecModel, StrictStr
from kvclaims.spec.errors import InputError, Problem
from kvclaims.spec.vocabulary import ProtectionMode
from kvclaims.statemachine.ledger import ConflictAction

ADDITIONAL_CONFIG_KEY = "kvclaims"
"""The key of `VllmConfig.additional_config` that holds a `BindingConfig`."""

DP_RANK_PLACEHOLDER = "{dp_rank}"
"""Replaced in `trace_path` by the engine's data-parallel rank."""

SCHEDULER_CLS = "kvclaims.vllm_binding.ClaimScheduler"
"""The one value of `--scheduler-cls` / `scheduler_cls=` that enables the binding. It picks
the async variant itself when vLLM runs with async scheduling."""


SUPPORTED_MODES: frozenset[ProtectionMode] = frozenset(
    {
        ProtectionMode.best_effort,
        ProtectionMode.soft_priority,
        ProtectionMode.hard_protected,
        ProtectionMode.demotable,
        ProtectionMode.expiring,
        ProtectionMode.offloadable,
    }
)
"""Modes this binding accepts. soft_priority claims order vLLM's free-queue eviction by priority
(`soft_priority`); routed_reuse needs a router: its claims are rejected with a reason, never
accepted and silently downgraded. offloadable is accepted only on an engine running the
binding's offload connector (`OffloadSettings`); elsewhere it is rejected with that reason."""


class OffloadSettings(SpecModel):
    """The CPU tier under the binding's connector (`kvclaims.vllm_binding.connector`): vLLM's
    `OffloadingConnector` with the claim-aware CPU policy and a worker that runs on CPU too.
    `engine_kwargs()` turns it into vLLM's `kv_transfer_config`."""

    cpu_bytes: PositiveInt
    """Host memory for offloaded KV (vLLM's `cpu_bytes_to_use`)."""
    blocks_per_chunk: PositiveInt = 1
    """Device blocks per CPU-tier chunk."""
    kv_load_failure_policy: Literal["fail", "recompute"] = "fail"
    """vLLM's policy for failed loads nobody claims; claimed ones end in a claim outcome."""
    load_faults: dict[str, Any] | None = None
    """A `LoadFaultPlan` (tests and failure-injection lanes only; off when absent)."""

    def kv_transfer_config(self) -> dict[str, Any]:
        """vLLM's `KVTransferConfig` fields for this tier."""
        extra: dict[str, Any] = {
            "cpu_bytes_to_use": self.cpu_bytes,
            "blocks_per_chunk": self.blocks_per_chunk,
            "spec_name": "ClaimCPUOffloadingSpec",
            "spec_module_path": "kvclaims.vllm_binding.offload_spec",
            "eviction_policy": "ClaimAwareLRUPolicy",
            "cache_policy_module_path": "kvclaims.vllm_binding.cache_policy",
            "self_describing_kv_events": True,
        }
        if self.load_faults is not None:
            extra["kvclaims_load_faults"] = self.load_faults
        return {
            "kv_connector": "ClaimOffloadingConnector",
            "kv_connector_module_path": "kvclaims.vllm_binding.connector",
            "kv_role": "kv_both",
            "kv_load_failure_policy": self.kv_load_failure_policy,
            "kv_connector_extra_config": extra,
        }


class ContinuumSettings(SpecModel):
    """Continuum compatibility (`kvclaims.vllm_binding.continuum`): seed 003's `job_id` /
    `is_last_step` request keys become TTL pin claims. Invariant: the pin mode is one whose
    conflict action keeps Continuum's behaviour (demotable: pins are dropped, reported, to
    admit work; expiring: work waits, attributed, until pins lapse)."""

    pin_ms: PositiveInt = 2000
    """How long a finished non-last turn's blocks are kept at least (Continuum's fixed
    2.0 s, seed 003 10.3 step 4)."""
    mode: ProtectionMode = ProtectionMode.demotable
    refresh_on_hit: StrictBool = False
    """Whether a satisfied reuse of a pin restarts its clock (Continuum: no)."""

    @model_validator(mode="after")
    def _pin_mode(self) -> ContinuumSettings:
        if self.mode not in (ProtectionMode.demotable, ProtectionMode.expiring):
            raise ValueError(f"continuum.mode must be demotable or expiring, got {self.mode}")
        return self


_DEFAULT_ACTIONS: dict[ProtectionMode, ConflictAction] = {
    ProtectionMode.hard_protected: ConflictAction.refuse,
    ProtectionMode.demotable: ConflictAction.demote,
    ProtectionMode.expiring: ConflictAction.defer,
}

_ALLOWED_ACTIONS: dict[ProtectionMode, frozenset[ConflictAction]] = {
    ProtectionMode.hard_protected: frozenset({ConflictAction.refuse, ConflictAction.defer}),
    ProtectionMode.demotable: frozenset({ConflictAction.refuse, ConflictAction.defer, ConflictAction.demote}),
    ProtectionMode.expiring: frozenset({ConflictAction.refuse, ConflictAction.defer}),
}
"""What the feasibility check may do per mode: `refuse` finishes the request now with a
claim-attributed stop reason; `defer` keeps it queued (in its position) until the conflict
resolves or `max_deferral_steps` pass, then refuses; `demote` relaxes the blocking claims
(demotable mode only) and admits the request. The other `ConflictAction`s need resources one
engine's scheduler does not have."""

Fraction = Annotated[float, Field(gt=0.0, le=1.0, strict=True)]


class BindingConfig(SpecModel):
    """Claim policy of one engine. Invariants: budgets are fractions of the usable pool in
    (0, 1]; every preserving mode has a conflict action it may legally take (only demotable
    claims may be demoted to make room)."""

    trace_path: StrictStr | None = None
    """Where the engine writes kvclaims trace v1 (NDJSON); `None` writes no trace. A
    `{dp_rank}` placeholder is replaced by the engine's data-parallel rank; without one, the
    engine of rank N > 0 writes `<stem>.dpN<suffix>` (`trace_template`)."""
    trace_source: Identifier | None = None
    engine_id: Identifier | None = None
    """The engine's name in a fleet, written into its trace header (`engine_id`) so that
    `kvclaims check --fleet` can join routing events to the engine's stream; a `{dp_rank}`
    placeholder is replaced by the engine's data-parallel rank."""
    protected_fraction: Fraction = 0.5
    """Cap on distinct protected blocks, as a fraction of the usable pool."""
    owner_protected_fraction: Fraction = 0.5
    """Cap on one owner's distinct protected blocks, as a fraction of the usable pool."""
    conflict_actions: dict[ProtectionMode, ConflictAction] = Field(default_factory=dict)
    max_deferral_steps: PositiveInt = 256
    """A request deferred this many engine steps is refused: deferral never starves."""
    default_owner: Identifier = "default"
    """Owner of claims whose request names none (only when `owner_hmac_key` is unset)."""
    owner_hmac_key: StrictStr | None = None
    """When set, a claim operation must carry `kvclaims_owner_token` = hex HMAC-SHA256 of the
    owner under this key, minted by the deployment's authentication layer."""
    max_claims: PositiveInt = 4096
    """Claims held at once (any state but released / harmed)."""
    max_decided_claim_ids: PositiveInt = 1_000_000
    """Claim ids are single-use; beyond this many decided ids new claims are rejected."""
    owner_scoped_claim_ids: StrictBool = False
    """Require every submitted claim id to begin with `<owner>:`. Ids are one global, single-use
    namespace; without this, one owner can spend ("squat") an id another owner will submit
    later. With trusted owners (`owner_hmac_key` or a front end), this makes owners'
    outcomes independent of each other's ids."""
    max_claims_per_owner: PositiveInt = 1024
    """Claims one owner holds at once: one owner cannot take every slot of `max_claims`."""
    max_decided_claim_ids_per_owner: PositiveInt = 100_000
    """Claim ids one owner may spend (accepted or rejected); past it that owner's new claims are
    rejected and its further ids are not recorded, so a flood of ids costs only its own quota.
    Operations whose owner cannot be established share one quota of this size."""
    max_restore_attempts: PositiveInt = 3
    """Under `kv_load_failure_policy=recompute`, a claim's restoration for one request that
    failed this many times ends in its claim-scoped outcome (a refusal) instead of being
    retried forever (stock vLLM livelocks on a persistent CPU-tier fault). Under `fail` the
    first failure does. Unclaimed loads are capped alike (the request finishes, no claim)."""
    cpu_tier_pressure: Literal["keep", "demote"] = "keep"
    """When the CPU tier is full of claimed host copies: `keep` them (new stores are dropped,
    as vLLM drops any store that does not fit), or `demote` the oldest offloadable claims
    first (reported before any of their chunks can be evicted)."""
    typed_metadata: StrictBool = False
    """Refuse claim operations whose raw JSON types the HTTP boundary did not check
    (`http.ClaimMetadataMiddleware`; `kvclaims serve` installs it and sets this)."""
    negative_control: Literal["fallback_recompute", "generic_counters", "silent_resume"] | None = None
    """NEGATIVE CONTROLS ONLY: replace the claim-scoped failure path with a deliberately unsound
    one whose traces refinement must reject: `fallback_recompute` recomputes a failed
    restoration with no claim outcome; `generic_counters` sees only a generic failure counter
    and blames the claim the request reused; `silent_resume` resumes a two-key claim whose
    restored state has another value hash as a satisfied reuse. Never set this when serving."""
    offload: OffloadSettings | None = None
    """Run the binding's offload connector (needed for offloadable claims)."""
    continuum: ContinuumSettings | None = None
    """Keep seed 003's `job_id` / `is_last_step` request keys as TTL pin claims (off when
    absent: the keys are then ignored, as stock vLLM ignores them)."""
    checkpoints: StrictBool = False
    """Run the binding's checkpoint connector (hybrid models: needed for hybrid_two_key
    claims, the only claims such a model takes)."""

    @model_validator(mode="after")
    def _actions_are_legal(self) -> BindingConfig:
        for mode, action in self.conflict_actions.items():
            allowed = _ALLOWED_ACTIONS.get(mode)
            if allowed is None:
                raise ValueError(f"conflict_actions: mode {mode} has no conflict action (not protected)")
            if action not in allowed:
                raise ValueError(f"conflict_actions: {mode} may not {action}")
        if self.checkpoints and self.offload is not None:
            raise ValueError("checkpoints and offload each need vLLM's one KV connector; choose one")
        if self.owner_hmac_key is not None and len(self.owner_hmac_key) < 16:
            raise ValueError("owner_hmac_key must be at least 16 characters")
        if self.owner_hmac_key is not None and self.continuum is not None:
            raise ValueError(
                "continuum: Continuum's job keys carry no owner authentication; it cannot run "
                "on an engine that requires owner tokens (owner_hmac_key)"
            )
        return self

    def trace_template(self, dp_rank: int) -> str | None:
        """`trace_path` for the engine of data-parallel rank `dp_rank`, still holding the
        `DP_RANK_PLACEHOLDER` the engine fills in. Each data-parallel engine writes its own
        trace stream: a path without the placeholder gets `.dp{dp_rank}` before its suffix on
        every rank but 0, so two engines never write one file (and one engine's path is
        exactly the configured one)."""
        path = self.trace_path
        if path is None or DP_RANK_PLACEHOLDER in path or dp_rank == 0:
            return path
        name = PurePath(path)
        return str(name.with_name(f"{name.stem}.dp{DP_RANK_PLACEHOLDER}{name.suffix}"))

    def action_for(self, mode: ProtectionMode) -> ConflictAction:
        """The conflict action of a preserving mode (configured, else the default)."""
        return self.conflict_actions.get(mode, _DEFAULT_ACTIONS[mode])

    def engine_kwargs(self) -> dict[str, Any]:
        """`vllm.LLM` / `EngineArgs` keyword arguments that start an engine with the binding
        (and, with `offload`, its connector: `kv_transfer_config`)."""
        kwargs: dict[str, Any] = {
            "scheduler_cls": SCHEDULER_CLS,
            "additional_config": {ADDITIONAL_CONFIG_KEY: self.model_dump(mode="json", exclude_defaults=True)},
        }
        if self.offload is not None:
            kwargs["kv_transfer_config"] = self.offload.kv_transfer_config()
        if self.checkpoints:
            kwargs["kv_transfer_config"] = {
                "kv_connector": "ClaimCheckpointConnector",
                "kv_connector_module_path": "kvclaims.vllm_binding.checkpoint_connector",
                "kv_role": "kv_both",
            }
        return kwargs

    @classmethod
    def from_additional_config(cls, additional_config: object) -> BindingConfig:
        """Read the binding's section of `VllmConfig.additional_config` (absent: defaults).

        Raises `InputError` naming the offending field; the engine refuses to start.
        """
        section: object = {}
        if isinstance(additional_config, dict):
            section = additional_config.get(ADDITIONAL_CONFIG_KEY, {})
        try:
            return cls.model_validate(section)
        except ValidationError as error:
            raise InputError(
                [
                    Problem(
                        file="additional_config",
                        field=".".join([ADDITIONAL_CONFIG_KEY, *(str(p) for p in item["loc"])]),
                        message=item["msg"],
                    )
                    for item in error.errors()
                ]
            ) from None
