"""The binding's engine-side configuration: one object, read from vLLM's `additional_config`.

An operator starts vLLM with `--scheduler-cls kvclaims.vllm_binding.ClaimScheduler` and, when
the defaults do not fit, `--additional-config '{"kvclaims": {...}}'` (offline:
`vllm.LLM(..., **BindingConfig(...).engine_kwargs())`). Everything here is operator input,
trusted and validated strictly: a malformed binding config stops the engine at start-up with
a located message, because serving with a half-understood claim policy would be worse.
Client input (per-request claim metadata) is never read from here; see `metadata`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, ValidationError, model_validator

from kvclaims.spec._types import Identifier, PositiveInt, SpecModel, StrictStr
from kvclaims.spec.errors import InputError, Problem
from kvclaims.spec.vocabulary import ProtectionMode

ADDITIONAL_CONFIG_KEY = "kvclaims"
"""The key of `VllmConfig.additional_config` that holds a `BindingConfig`."""

SCHEDULER_CLS = "kvclaims.vllm_binding.ClaimScheduler"
"""The one value of `--scheduler-cls` / `scheduler_cls=` that enables the binding. It picks
the async variant itself when vLLM runs with async scheduling."""


class ConflictAction(StrEnum):
    """What the feasibility check does with a waiting request that protected claims block.

    `refuse` finishes it now with a claim-attributed stop reason; `defer` keeps it queued (in
    its position) until the conflict resolves or `max_deferral_steps` pass, then refuses;
    `demote` relaxes the blocking claims (demotable mode only) and admits the request.
    """

    refuse = "refuse"
    defer = "defer"
    demote = "demote"


SUPPORTED_MODES: frozenset[ProtectionMode] = frozenset(
    {
        ProtectionMode.best_effort,
        ProtectionMode.hard_protected,
        ProtectionMode.demotable,
        ProtectionMode.expiring,
    }
)
"""Modes this binding accepts. soft_priority needs a priority-influence mechanism vLLM's free
queue lacks, offloadable needs the offload connector, routed_reuse a router: claims in those
modes are rejected with a reason, never accepted and silently downgraded."""

_DEFAULT_ACTIONS: dict[ProtectionMode, ConflictAction] = {
    ProtectionMode.hard_protected: ConflictAction.refuse,
    ProtectionMode.demotable: ConflictAction.demote,
    ProtectionMode.expiring: ConflictAction.defer,
}

_ALLOWED_ACTIONS: dict[ProtectionMode, frozenset[ConflictAction]] = {
    ProtectionMode.hard_protected: frozenset({ConflictAction.refuse, ConflictAction.defer}),
    ProtectionMode.demotable: frozenset(ConflictAction),
    ProtectionMode.expiring: frozenset({ConflictAction.refuse, ConflictAction.defer}),
}

Fraction = Annotated[float, Field(gt=0.0, le=1.0, strict=True)]


class BindingConfig(SpecModel):
    """Claim policy of one engine. Invariants: budgets are fractions of the usable pool in
    (0, 1]; every preserving mode has a conflict action it may legally take (only demotable
    claims may be demoted to make room)."""

    trace_path: StrictStr | None = None
    """Where the engine writes kvclaims trace v1 (NDJSON); `None` writes no trace. A
    `{dp_rank}` placeholder is replaced by the data-parallel rank."""
    trace_source: Identifier | None = None
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

    @model_validator(mode="after")
    def _actions_are_legal(self) -> BindingConfig:
        for mode, action in self.conflict_actions.items():
            allowed = _ALLOWED_ACTIONS.get(mode)
            if allowed is None:
                raise ValueError(f"conflict_actions: mode {mode} has no conflict action (not protected)")
            if action not in allowed:
                raise ValueError(f"conflict_actions: {mode} may not {action}")
        if self.owner_hmac_key is not None and len(self.owner_hmac_key) < 16:
            raise ValueError("owner_hmac_key must be at least 16 characters")
        return self

    def action_for(self, mode: ProtectionMode) -> ConflictAction:
        """The conflict action of a preserving mode (configured, else the default)."""
        return self.conflict_actions.get(mode, _DEFAULT_ACTIONS[mode])

    def engine_kwargs(self) -> dict[str, Any]:
        """`vllm.LLM` / `EngineArgs` keyword arguments that start an engine with the binding."""
        return {
            "scheduler_cls": SCHEDULER_CLS,
            "additional_config": {ADDITIONAL_CONFIG_KEY: self.model_dump(mode="json", exclude_defaults=True)},
        }

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
