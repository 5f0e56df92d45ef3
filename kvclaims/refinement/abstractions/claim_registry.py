"""The external claim registry of a telemetry join (format `kvclaims_registry: 1`).

A runtime that only publishes block events (vLLM's KV events) knows nothing of claims. A
telemetry-join adapter may still report *observations* about claims (identity, predicate,
materialization, claim-scoped telemetry: I, P, M, T) when the claims are registered outside the
runtime, before the events, and the join from blocks to claims is deterministic (seed 000
table 5). This file is that registry. YAML or JSON; unknown keys and duplicate keys are errors:

```yaml
kvclaims_registry: 1
observation_point: "end of each KVEventBatch of the vLLM ZMQ publisher"   # named observation point
medium: GPU                      # the medium whose blocks make up a claim's resident prefix
cache_identity:                  # fixed cache identity: every joined event must agree with it
  cache_key_domain: vllm-prefix-cache
  model_id: Qwen/Qwen2.5-0.5B-Instruct@7ae557604adf67be50417f59c2c2f167def9a775
  token_hash_domain: sha256_cbor
  namespace: ""                  # the cache salt; "" when requests are unsalted
  block_size: 16
  kv_format: auto
request_ids: [req-1, req-2]      # optional: backend request ids (claim ids must differ from them)
claims:
  - claim_id: claim:system-prompt
    owner_scope: tenant-a
    object_id: prefix:system-prompt
    mode: best_effort            # observational modes only: telemetry cannot create enforcement
    predicate: {kind: leading_prefix_at_least, blocks: 4}
    footprint_blocks: 8
    registered_before_seq: 0     # registered before the publisher batch with this seq
    token_map:                   # deterministic request-token map of the reusable object
      tokenizer: Qwen/Qwen2.5-0.5B-Instruct@7ae557604adf67be50417f59c2c2f167def9a775
      token_ids: [151644, 8948, ...]   # at least footprint_blocks * block_size tokens
```

A block joins claim C at position i when its tokens are C's tokens of block i and its parent
is C's block i-1 (no parent for i = 0): the join needs no hash function, only the published
token ids and parent hashes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from kvclaims.spec._types import Identifier, NonNegativeInt, PositiveInt, SpecModel, StrictStr
from kvclaims.spec.claims import CacheIdentity, LeadingPrefixAtLeast
from kvclaims.spec.errors import InputError, Problem
from kvclaims.spec.tables import PRESERVING_MODES
from kvclaims.spec.vocabulary import ProtectionMode

MAX_REGISTRY_BYTES = 64 * 1024 * 1024


class TokenMap(SpecModel):
    """How the reusable object's tokens were produced, and the tokens themselves."""

    tokenizer: Annotated[StrictStr, Field(min_length=1)]
    token_ids: Annotated[list[NonNegativeInt], Field(min_length=1)]


class RegisteredClaim(SpecModel):
    """One externally registered claim. Only observational modes: a join of telemetry cannot
    enforce anything, so a preserving mode here would be a claim nobody can honour."""

    claim_id: Identifier
    owner_scope: Identifier
    object_id: Identifier
    mode: ProtectionMode
    predicate: LeadingPrefixAtLeast
    footprint_blocks: PositiveInt
    registered_before_seq: NonNegativeInt
    token_map: TokenMap

    @model_validator(mode="after")
    def _observational(self) -> RegisteredClaim:
        if self.mode in PRESERVING_MODES:
            raise ValueError(
                f"mode {self.mode} carries a preservation obligation; a telemetry join cannot "
                "create enforcement (only observational modes can be registered)"
            )
        return self


class ClaimRegistry(SpecModel):
    """The whole registry file."""

    kvclaims_registry: Literal[1]
    observation_point: Annotated[StrictStr, Field(min_length=1)]
    medium: Identifier
    cache_identity: CacheIdentity
    request_ids: list[Identifier] = []
    claims: Annotated[list[RegisteredClaim], Field(min_length=1)]


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """A SafeLoader that refuses duplicate mapping keys (PyYAML would keep the last); libyaml's
    parser where PyYAML has it (a registry holds every claim's token ids: thousands of
    numbers, ten times slower to scan in pure Python)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_registry(path: Path) -> ClaimRegistry:
    """Read and validate a registry file, or raise `InputError` naming file, line and field."""
    file = str(path)
    if not path.is_file():
        raise InputError([Problem(file, "claim registry not found")])
    if path.stat().st_size > MAX_REGISTRY_BYTES:
        raise InputError([Problem(file, f"claim registry larger than {MAX_REGISTRY_BYTES} bytes")])
    try:
        document = yaml.load(path.read_bytes().decode("utf-8"), Loader=_UniqueKeyLoader)
    except UnicodeDecodeError:
        raise InputError([Problem(file, "claim registry is not valid UTF-8")]) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        raise InputError(
            [
                Problem(
                    file,
                    f"invalid YAML: {error.problem or error.context}",
                    line=mark.line + 1 if mark else None,
                )
            ]
        ) from None
    except yaml.YAMLError as error:
        raise InputError([Problem(file, f"invalid YAML: {type(error).__name__}")]) from None
    try:
        return ClaimRegistry.model_validate(document)
    except ValidationError as error:
        raise InputError(
            [
                Problem(file, str(detail["msg"]), field=".".join(str(p) for p in detail["loc"]) or None)
                for detail in error.errors(include_url=False)
            ]
        ) from None
