"""Claims: what an application submits and what a runtime decides (seed 001 section 3.1, table 2).

The conformance schema is split so that inputs, decisions and lifecycle cannot blur: a
`ResidentClaimInput` is a request, a `ResidentClaimDecision` the runtime's answer, and the
lifecycle state lives in `kvclaims.statemachine`. Value, confidence, budgets and deadlines are
optional policy inputs, outside conformance.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from kvclaims.spec._types import (
    Identifier,
    NonNegativeInt,
    PositiveInt,
    PositivePrefixBlocks,
    SpecModel,
    StrictBool,
    StrictStr,
    Text,
    model_rule,
)
from kvclaims.spec.model_rules import caps_bound_their_durations, exactly_one_unit
from kvclaims.spec.vocabulary import DecisionKind, ProtectionMode


# Source: seed 001 table 2.
class CacheIdentity(SpecModel):
    """When two cached prefixes are the same reusable object.

    Reuse is legal only inside one identity: a different model, tokenizer, salt, block size,
    adapter or KV format makes an equal token sequence a different object.
    """

    cache_key_domain: Identifier = Field(description="The runtime's cache-key scheme.")
    model_id: Identifier = Field(description="The model (weights) the KV was computed with.")
    token_hash_domain: Identifier = Field(description="The tokenizer and hash of token blocks.")
    namespace: StrictStr = Field("", description="A cache salt or tenant namespace; empty: none.")
    block_size: PositiveInt = Field(description="Tokens per KV block.")
    adapter_identity: Identifier | None = Field(None, description="The LoRA or other adapter, if any.")
    prompt_embedding_identity: Identifier | None = Field(
        None, description="The prompt-embedding source, if embeddings were supplied."
    )
    kv_format: Identifier = Field(description="The KV layout and dtype.")


class LeadingPrefixAtLeast(SpecModel):
    """`leading_prefix_at_least(k)`: the first k blocks (or tokens) survive *contiguously*.

    Block i counts only if blocks 0..i-1 survive, so 59 surviving blocks with block 0 missing
    satisfy nothing. Exactly one of `blocks` / `tokens` is given.
    """

    kind: Literal["leading_prefix_at_least"] = "leading_prefix_at_least"
    blocks: PositivePrefixBlocks | None = Field(None, description="k in blocks; this or `tokens`.")
    tokens: PositiveInt | None = Field(
        None, description="k in tokens, rounded up to whole blocks; this or `blocks`."
    )

    _exactly_one_unit = model_rule(exactly_one_unit)

    def required_blocks(self, block_size: int) -> int:
        """Leading blocks needed; a token threshold rounds up to whole blocks."""
        if self.blocks is not None:
            return self.blocks
        assert self.tokens is not None
        return math.ceil(self.tokens / block_size)

    def holds(self, leading_blocks: int, block_size: int) -> bool:
        return leading_blocks >= self.required_blocks(block_size)


# Source: seed 002.
class HybridTwoKey(SpecModel):
    """The two-key hybrid resume predicate.

    Holds at boundary B only when both keys hold: the KV side has a leading prefix of B blocks
    (prefix identity) AND the restored non-KV state has the same `value_hash` as the checkpoint
    recorded at materialization (state identity). Equal `payload_hash` alone (unchanged bytes)
    never establishes logical equality; when it cannot be established the predicate fails closed.
    """

    kind: Literal["hybrid_two_key"] = "hybrid_two_key"
    boundary_blocks: PositiveInt = Field(description="The boundary B, in leading blocks.")
    checkpoint_key: Identifier | None = Field(
        None, description="An optional label of the non-KV checkpoint (informational)."
    )

    def required_blocks(self, block_size: int) -> int:
        del block_size
        return self.boundary_blocks

    def holds(self, leading_blocks: int, block_size: int) -> bool:
        """The KV key only; the value key is checked against recorded checkpoints."""
        return leading_blocks >= self.required_blocks(block_size)


MaterializationPredicate = Annotated[LeadingPrefixAtLeast | HybridTwoKey, Field(discriminator="kind")]


class PolicyInputs(SpecModel):
    """Optional inputs that guide admission policies; never part of conformance."""

    value: float | None = None
    confidence: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    budget_blocks: NonNegativeInt | None = None
    deadline_steps: NonNegativeInt | None = None


# Source: seed 001 section 3.1.
class ResidentClaimInput(SpecModel):
    """An application-visible future-reuse object submitted to a runtime.

    The obligation binds only after the runtime accepts it; a runtime may reject any claim.
    """

    claim_id: Identifier
    owner_scope: Identifier
    cache_identity: CacheIdentity
    object_id: Identifier
    materialization_predicate: MaterializationPredicate
    footprint_blocks: PositiveInt
    protection_mode: ProtectionMode
    duration_steps: PositiveInt | None = None
    duration_ms: PositiveInt | None = None
    refresh_on_hit: StrictBool = False
    max_duration_steps: PositiveInt | None = None
    max_duration_ms: PositiveInt | None = None
    policy: PolicyInputs | None = None

    @model_validator(mode="after")
    def _predicate_fits_footprint(self) -> ResidentClaimInput:
        required = self.materialization_predicate.required_blocks(self.cache_identity.block_size)
        if required > self.footprint_blocks:
            raise ValueError(
                f"predicate needs {required} leading blocks but footprint_blocks is "
                f"{self.footprint_blocks}: the claim could never materialize"
            )
        durations = [d for d in (self.duration_steps, self.duration_ms) if d is not None]
        if len(durations) == 2:
            # Expiring when the first clock ends would break the other clock's promise.
            raise ValueError("give duration_steps or duration_ms, not both")
        if self.protection_mode is ProtectionMode.expiring and not durations:
            raise ValueError("an expiring claim needs duration_steps or duration_ms")
        if self.refresh_on_hit and not durations:
            raise ValueError("refresh_on_hit needs a duration to refresh")
        caps_bound_their_durations(self)
        return self


class ResidentClaimDecision(SpecModel):
    """A runtime's answer to one submitted claim, at a decision step, with its reason."""

    claim_id: Identifier
    decision: DecisionKind
    decision_step: NonNegativeInt
    reason: Text = ""
