"""The generated trace v1 Structs (`kvclaims.spec.trace_structs`) are exactly what the models
generate, carry every field of their models, and a model validator the Structs could not run
stops the generation instead of being skipped."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, model_validator

from kvclaims.refinement.reader import model_fields
from kvclaims.spec import trace_structs
from kvclaims.spec.struct_codegen import MODULE, _Generator, generate
from kvclaims.spec.trace import EVENT_MODELS, TraceHeader


def test_committed_structs_match_the_models() -> None:
    assert MODULE.read_text(encoding="utf-8") == generate(), (
        "run: python -m kvclaims.spec.struct_codegen (make reports)"
    )


def test_every_struct_has_exactly_its_models_fields() -> None:
    assert set(trace_structs.EVENT_STRUCTS) == set(EVENT_MODELS)
    pairs = [(trace_structs.HEADER, TraceHeader)]
    pairs += [(trace_structs.EVENT_STRUCTS[name], model) for name, model in EVENT_MODELS.items()]
    for struct, model in pairs:
        assert model_fields(struct) == set(model.model_fields), model.__name__


class _PlainValidator(BaseModel):
    value: int

    @model_validator(mode="after")
    def _positive(self) -> _PlainValidator:
        if self.value < 1:
            raise ValueError("positive")
        return self


def test_a_validator_that_is_not_a_model_rule_stops_the_generation() -> None:
    with pytest.raises(TypeError, match="not a model_rule"):
        _Generator().struct(_PlainValidator, tag_field=None)
