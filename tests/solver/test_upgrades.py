"""The native-upgrade table: committed copy up to date, and each plan checked in Python."""

from pathlib import Path

import pytest

from kvclaims.solver.report import drifted_files, upgrades_files
from kvclaims.solver.upgrades import Upgrade, upgrades, upgrades_json, upgrades_markdown
from kvclaims.spec.descriptor import Descriptor, load_descriptors
from kvclaims.spec.evidence import LoweringRow
from kvclaims.spec.lowering import lower_row
from kvclaims.spec.tables import OBLIGATION_CODES, TELEMETRY_JOIN_PRECONDITIONS
from kvclaims.spec.vocabulary import AdapterDepth

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def loaded() -> list:  # type: ignore[type-arg]
    return load_descriptors([ROOT / "descriptors"])


@pytest.fixture(scope="module")
def table(loaded) -> list[Upgrade]:  # type: ignore[no-untyped-def]
    return upgrades(loaded)


def test_committed_table_does_not_drift(table: list[Upgrade]) -> None:
    files = upgrades_files(ROOT / "proofs", upgrades_json(table), upgrades_markdown(table))
    assert drifted_files(files) == [], "regenerate with: kvclaims prove"


def test_native_plan_is_what_lower_misses_at_depth_none(loaded, table: list[Upgrade]) -> None:  # type: ignore[no-untyped-def]
    by_name = {path.name: descriptor for path, descriptor in loaded}
    for row in table:
        verdict = lower_row(by_name[row.source], LoweringRow(mode=row.mode, depth=AdapterDepth.none))
        expected = {OBLIGATION_CODES[o] for o in verdict.missing} | {a.value for a in verdict.missing_atoms}
        assert set(row.native or ()) == expected, (row.source, row.mode)


def test_adapter_plan_makes_the_mode_sound_in_python(loaded, table: list[Upgrade]) -> None:  # type: ignore[no-untyped-def]
    by_name = {path.name: descriptor for path, descriptor in loaded}
    codes = {code: o for o, code in OBLIGATION_CODES.items()}
    for row in table:
        assert row.adapter is not None and row.adapter_depth is not None, (row.source, row.mode)
        document = by_name[row.source].model_dump(mode="json", exclude_none=True)
        anchor = {  # a trace that exists: a planned adapter's evidence is a real run's trace
            "kind": "trace",
            "path": "evidence/kvclaims-vllm/hard-refusal.ndjson",
            "note": "planned",
            "ordering": "seq",
            "claim_scope": "claim_id",
        }
        for depth, items in row.adapter:
            adapter = {
                "name": f"plan-{depth.value}",
                "depth": depth.value,
                "evidence": [
                    {
                        "obligation": codes[c].value,
                        "status": "supported",
                        "scope": "conformance_trace",
                        "anchor": anchor,
                    }
                    for c in items
                ],
            }
            if depth is AdapterDepth.telemetry_join:
                adapter["preconditions"] = {p.value: True for p in TELEMETRY_JOIN_PRECONDITIONS}
            document["adapters"].append(adapter)
        document.setdefault("observations", [])
        document["observations"] += [
            {"atom": a, "scope": "controlled_pressure", "anchor": anchor} for a in row.observe
        ]
        document.pop("lowerings", None)
        planned = Descriptor.model_validate(document)
        for anchor in planned.anchors():  # verified like a loaded file: digests do not survive a dump
            anchor.verify(ROOT / "descriptors")
        verdict = lower_row(planned, LoweringRow(mode=row.mode, depth=row.adapter_depth))
        assert verdict.label.is_sound, (row.source, row.mode, verdict.missing)
