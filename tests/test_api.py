"""The top-level API for runtime authors: every public name resolves, is documented, and
`import kvclaims` stays light (no pydantic, Z3, Hypothesis or vLLM until a name is used)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import kvclaims
import kvclaims.testing
from kvclaims.refinement.testing import TraceBuilder

HEAVY = ("z3", "hypothesis", "vllm", "torch", "pydantic", "matplotlib", "networkx")


def modules_loaded_by(code: str) -> set[str]:
    """Top-level packages in sys.modules after running `code` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_import_kvclaims_imports_nothing_heavy() -> None:
    assert not modules_loaded_by("import kvclaims") & set(HEAVY)


def test_checking_a_trace_through_the_top_level_loads_neither_z3_hypothesis_nor_vllm() -> None:
    loaded = modules_loaded_by("import kvclaims\nkvclaims.check_trace('missing.ndjson')\nkvclaims.lower")
    assert not loaded & {"z3", "hypothesis", "vllm", "torch"}


def test_every_public_name_resolves_and_has_a_contract_docstring() -> None:
    assert kvclaims.__all__ and len(set(kvclaims.__all__)) == len(kvclaims.__all__)
    for name in kvclaims.__all__:
        value = getattr(kvclaims, name)
        if name in ("__version__", "FORMATS"):
            continue
        assert inspect.getdoc(value), f"kvclaims.{name} has no docstring"
    assert set(kvclaims.__all__) <= set(dir(kvclaims)) and "testing" in dir(kvclaims)
    assert kvclaims.testing is sys.modules["kvclaims.testing"]
    assert "kvclaims-v1" in kvclaims.FORMATS


def test_every_name_of_kvclaims_testing_resolves_and_has_a_contract_docstring() -> None:
    for name in kvclaims.testing.__all__:
        value = getattr(kvclaims.testing, name)
        if name != "OBJECTS":
            assert inspect.getdoc(value), f"kvclaims.testing.{name} has no docstring"
    assert kvclaims.testing.MicroRuntimeMachine.TestCase is not None


def test_unknown_names_raise_attribute_error() -> None:
    for module in (kvclaims, kvclaims.testing):
        try:
            module.no_such_name  # type: ignore[attr-defined]  # noqa: B018
        except AttributeError as error:
            assert "no_such_name" in str(error)
        else:
            raise AssertionError(f"{module.__name__}.no_such_name resolved")


def test_the_documented_round_trip_check_lower_and_assert(tmp_path: Path) -> None:
    """The names work together: a checked trace, a descriptor from the repository, a lowering."""
    trace = TraceBuilder(usable_blocks=80).accept("C").store_prefix("C", 4).materialize("C", 4)
    path = tmp_path / "run.ndjson"
    path.write_bytes(trace.ndjson())
    verdict = kvclaims.check_trace(path)
    assert isinstance(verdict, kvclaims.TraceVerdict) and verdict.outcome is kvclaims.Outcome.accepted
    assert kvclaims.check_bytes(trace.ndjson()).outcome is kvclaims.Outcome.accepted
    assert kvclaims.assert_refines(path) == verdict
    descriptors = Path(__file__).resolve().parents[1] / "descriptors"
    (first_path, descriptor), *_ = kvclaims.load_descriptors([descriptors])
    assert isinstance(descriptor, kvclaims.Descriptor)
    assert kvclaims.load_descriptor(first_path) == descriptor
    lowered = kvclaims.lower(descriptor, kvclaims.ProtectionMode.best_effort, kvclaims.AdapterDepth.none)
    assert isinstance(lowered, kvclaims.Verdict) and isinstance(lowered.label, kvclaims.Label)
