"""vLLM-marked tests: run where vLLM 0.32 is installed, fail loudly where it is required.

Tests that drive vLLM carry `@pytest.mark.vllm` and import vLLM-facing modules inside the test
(never at module level), so this directory collects everywhere. Without vLLM they skip with
an install hint, unless `KVCLAIMS_REQUIRE_VLLM=1` (set by `make test`, i.e. in CI): then
every one of them fails, so a broken vLLM install can never pass as a skipped suite.
"""

from __future__ import annotations

import os

import hypothesis
import pytest

from kvclaims.lab.fuzz_settings import NO_DATABASE, FuzzSeed, fuzz_seed
from kvclaims.vllm_binding.plugin import installed_vllm_version, unsupported_reason

_REASON = unsupported_reason(installed_vllm_version())


def vllm_missing_reason() -> str | None:
    """Why vLLM-marked tests cannot run here, or None when they can."""
    if _REASON is not None:
        return _REASON
    try:
        import vllm.v1.core.sched.scheduler  # noqa: F401
    except Exception as error:  # a broken install (e.g. CUDA torchvision on CPU torch)
        return f"vLLM is installed but does not import: {type(error).__name__}: {error}"
    return None


def require_vllm() -> None:
    """Skip (or, under KVCLAIMS_REQUIRE_VLLM=1, fail) when vLLM cannot run here. Module-scoped
    fixtures that start vLLM call this first: they are set up before the autouse check."""
    require_lane(vllm_missing_reason(), "make setup-vllm")


def require_lane(reason: str | None, setup: str) -> None:
    """Skip a lane that cannot run here (`reason`), with how to set it up; under
    KVCLAIMS_REQUIRE_VLLM=1 (`make test`, CI: every lane is set up) fail instead."""
    if reason is None:
        return
    if os.environ.get("KVCLAIMS_REQUIRE_VLLM") == "1":
        pytest.fail(f"KVCLAIMS_REQUIRE_VLLM=1 but {reason}", pytrace=False)
    pytest.skip(f"{reason} (run `{setup}`)")


@pytest.fixture(autouse=True)
def _require_vllm(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("vllm") is not None:
        require_vllm()


@pytest.fixture(autouse=True, scope="session")
def _private_cache_directory(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Caches the commands keep (the native-upgrade search) go to a fresh folder per run,
    never to the user's cache directory, so no test depends on an earlier run."""
    os.environ["KVCLAIMS_CACHE_DIR"] = str(tmp_path_factory.mktemp("kvclaims-cache"))


@pytest.fixture(autouse=True, scope="session")
def _private_data_directory(tmp_path_factory: pytest.TempPathFactory) -> None:
    """What a command writes without -o goes to a fresh folder per test run, never to the
    user's data directory."""
    os.environ["KVCLAIMS_OUT_DIR"] = str(tmp_path_factory.mktemp("kvclaims-data"))


# Fuzzing that explores (issue 26 item 4): one seed per commit for every Hypothesis test, no
# example database, the seed in the run's header and the command that reproduces a failure.
_SEED: FuzzSeed = fuzz_seed()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before Hypothesis's own plugin reads it: the seed of every state machine and `@given`
    test without one (an explicit `--hypothesis-seed` wins)."""
    hypothesis.settings.load_profile(NO_DATABASE)
    if getattr(config.option, "hypothesis_seed", None) is None:
        config.option.hypothesis_seed = str(_SEED.value)


def pytest_report_header(config: pytest.Config) -> str:
    return f"kvclaims fuzz seed: {config.option.hypothesis_seed} ({_SEED.origin})"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`@seed` on every `@given` test: it outranks a `derandomize=True` in the test's own
    settings, so those tests explore too."""
    for item in items:
        test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        if getattr(test, "is_hypothesis_test", False):
            hypothesis.seed(_SEED.value)(test)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(
            (
                "kvclaims fuzz seed",
                f"seed {_SEED.value} ({_SEED.origin}); reproduce with: {_SEED.reproduce(item.nodeid)}",
            )
        )
