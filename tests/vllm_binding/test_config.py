"""The binding's operator configuration: strict, located errors, one object to start vLLM."""

from __future__ import annotations

import pytest

from kvclaims.spec.errors import InputError
from kvclaims.spec.vocabulary import ProtectionMode
from kvclaims.vllm_binding.config import ADDITIONAL_CONFIG_KEY, SCHEDULER_CLS, BindingConfig, ConflictAction


def test_absent_section_means_defaults() -> None:
    assert BindingConfig.from_additional_config({}) == BindingConfig()
    assert BindingConfig.from_additional_config(None) == BindingConfig()


def test_default_conflict_actions() -> None:
    config = BindingConfig()
    assert config.action_for(ProtectionMode.hard_protected) is ConflictAction.refuse
    assert config.action_for(ProtectionMode.demotable) is ConflictAction.demote
    assert config.action_for(ProtectionMode.expiring) is ConflictAction.defer


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"protected_fraction": 1.5}, "kvclaims.protected_fraction"),
        ({"protected_fraction": 0}, "kvclaims.protected_fraction"),
        ({"protected_fraction": "0.5"}, "kvclaims.protected_fraction"),
        ({"max_deferral_steps": 0}, "kvclaims.max_deferral_steps"),
        ({"surprise": 1}, "kvclaims.surprise"),
        ({"conflict_actions": {"hard_protected": "demote"}}, "kvclaims"),
        ({"conflict_actions": {"best_effort": "refuse"}}, "kvclaims"),
        ({"owner_hmac_key": "short"}, "kvclaims"),
        ({"engine_id": ""}, "kvclaims.engine_id"),
        ({"engine_id": 7}, "kvclaims.engine_id"),
    ],
)
def test_bad_operator_config_is_a_located_input_error(section: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as raised:
        BindingConfig.from_additional_config({ADDITIONAL_CONFIG_KEY: section})
    assert raised.value.problems[0].field is not None
    assert raised.value.problems[0].field.startswith(field)


def test_engine_kwargs_round_trip() -> None:
    config = BindingConfig(
        trace_path="t.ndjson",
        engine_id="A",
        conflict_actions={ProtectionMode.expiring: ConflictAction.refuse},
    )
    kwargs = config.engine_kwargs()
    assert kwargs["scheduler_cls"] == SCHEDULER_CLS
    assert BindingConfig.from_additional_config(kwargs["additional_config"]) == config


def test_each_data_parallel_engine_gets_its_own_trace_file() -> None:
    from kvclaims.vllm_binding.config import DP_RANK_PLACEHOLDER

    plain = BindingConfig(trace_path="out/claims.ndjson")
    files = {(plain.trace_template(rank) or "").replace(DP_RANK_PLACEHOLDER, str(rank)) for rank in range(3)}
    assert files == {"out/claims.ndjson", "out/claims.dp1.ndjson", "out/claims.dp2.ndjson"}
    templated = BindingConfig(trace_path="out/claims-{dp_rank}.ndjson")
    assert templated.trace_template(0) == templated.trace_template(4) == "out/claims-{dp_rank}.ndjson"
    assert BindingConfig().trace_template(1) is None
