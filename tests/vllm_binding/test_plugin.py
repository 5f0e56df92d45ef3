"""The vllm.general_plugins entry point: declared, idempotent, version-gated, never raising."""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

import pytest

from kvclaims.vllm_binding import plugin
from kvclaims.vllm_binding.plugin import SUPPORTED_VLLM_VERSIONS, UnsupportedVllmError, unsupported_reason


def test_entry_point_is_declared() -> None:
    found = [ep for ep in entry_points(group="vllm.general_plugins") if ep.value.startswith("kvclaims")]
    assert [ep.value for ep in found] == ["kvclaims.vllm_binding.plugin:register"]
    assert found[0].load() is plugin.register


def test_reasons_for_missing_and_other_versions() -> None:
    missing = unsupported_reason(None)
    assert missing is not None and "not installed" in missing
    for outside in ("0.31.0", "0.34.0", "0.33.1", "0.32"):
        other = unsupported_reason(outside)
        assert other is not None and f"found {outside}:" in other
        assert all(version in other for version in SUPPORTED_VLLM_VERSIONS)


def test_the_current_and_the_previous_release_are_supported() -> None:
    assert SUPPORTED_VLLM_VERSIONS == ("0.32.0", "0.33.0")
    for supported in SUPPORTED_VLLM_VERSIONS:
        assert unsupported_reason(supported) is None


def test_unsupported_vllm_registers_nothing_and_does_not_raise(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[tuple[str, str, str]] = []
    component = plugin.NamedComponent("x", "m", "C", lambda *a: calls.append(a))
    monkeypatch.setattr(plugin, "NAMED_COMPONENTS", (component,))
    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.setattr(plugin, "installed_vllm_version", lambda: "0.31.0")
    with caplog.at_level(logging.ERROR, logger=plugin.__name__):
        plugin.register()
    assert calls == []
    assert "supports vLLM" in caplog.text
    with pytest.raises(UnsupportedVllmError, match=r"found 0\.31\.0"):
        plugin.require_supported_vllm()


def test_supported_vllm_registers_each_component_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, str]] = []
    component = plugin.NamedComponent("x", "m", "C", lambda *a: calls.append(a))
    monkeypatch.setattr(plugin, "NAMED_COMPONENTS", (component,))
    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.setattr(plugin, "installed_vllm_version", lambda: SUPPORTED_VLLM_VERSIONS[0])
    plugin.register()
    plugin.register()  # vLLM may load plugins more than once per process
    assert calls == [("x", "m", "C")]


def test_binding_package_imports_without_touching_vllm() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import kvclaims.vllm_binding, kvclaims.lab.scheduler_scenarios; "
        "import kvclaims.cli; assert 'vllm' not in sys.modules, sorted(m for m in sys.modules if 'vllm' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.vllm
def test_the_components_are_registered_by_name_in_vllms_own_registries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    from kvclaims.vllm_binding.cache_policy import ClaimAwareLRUPolicy
    from kvclaims.vllm_binding.connector import ClaimOffloadingConnector
    from kvclaims.vllm_binding.offload_spec import ClaimCPUOffloadingSpec

    monkeypatch.setattr(plugin, "_registered", False)
    plugin.register()
    monkeypatch.setattr(plugin, "_registered", False)
    plugin.register()  # a second process-level run must not raise on vLLM's duplicate check
    assert (
        KVConnectorFactory.get_connector_class_by_name("KVClaimsOffloadingConnector")
        is ClaimOffloadingConnector
    )
    assert (
        OffloadingSpecFactory.get_spec_cls({"spec_name": "KVClaimsCPUOffloadingSpec"})
        is ClaimCPUOffloadingSpec
    )
    assert CachePolicyFactory.get_cache_policy_cls("kvclaims_claim_lru") is ClaimAwareLRUPolicy
