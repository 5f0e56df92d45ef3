"""`kvclaims adversary` descriptors: every class, every seed 000 8.2 kind, every mutant fails
closed under both judgments, the YAML round-trips, and the same seed gives the same output."""

import json
from pathlib import Path

import pytest
import yaml

from kvclaims.solver.adversary import CLASSES, SEED_KINDS, AdversaryReport, run_adversary
from kvclaims.solver.positives import PositiveRow, fixture_positive_rows, positive_rows, shipped_positive_rows
from kvclaims.spec.descriptor import load_descriptor
from kvclaims.spec.lowering import lower_row

DESCRIPTORS = Path(__file__).resolve().parents[2] / "descriptors"


@pytest.fixture(scope="module")
def rows() -> list[PositiveRow]:
    return positive_rows(DESCRIPTORS)


@pytest.fixture(scope="module")
def generated(
    rows: list[PositiveRow], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, AdversaryReport]:
    out = tmp_path_factory.mktemp("adversary")
    return out, run_adversary(rows, out, budget_s=900)


def test_every_generated_descriptor_fails_closed_and_the_judgments_agree(generated) -> None:  # type: ignore[no-untyped-def]
    _, report = generated
    assert report.complete
    assert report.distinct >= 1000
    assert report.not_failing_closed == []
    assert report.disagreements == []


def test_classes_cover_the_16_seed_kinds_and_more(generated) -> None:  # type: ignore[no-untyped-def]
    _, report = generated
    assert len(SEED_KINDS) == 16
    assert {c.seed_kind for c in CLASSES if c.seed_kind} == set(SEED_KINDS)
    for mutation in CLASSES:
        assert report.by_class.get(mutation.id, 0) > 0, f"class {mutation.id} produced nothing"
    assert sum(1 for c in CLASSES if c.seed_kind is None) >= 10


def test_the_shipped_positive_rows_are_the_bases(rows: list[PositiveRow]) -> None:
    shipped = shipped_positive_rows(DESCRIPTORS)
    assert shipped, "descriptors/ has shipped positive rows"
    assert rows[: len(shipped)] == shipped
    assert {r.source for r in rows[len(shipped) :]} == {r.source for r in fixture_positive_rows()}


def test_written_yaml_loads_and_is_judged_as_indexed(generated) -> None:  # type: ignore[no-untyped-def]
    out, _ = generated
    index = json.loads((out / "descriptors" / "index.json").read_text())
    assert index["complete"] is True
    seen: dict[str, int] = {}
    for entry in index["descriptors"]:
        seen[entry["class"]] = seen.get(entry["class"], 0) + 1
        if seen[entry["class"]] > 3:  # a sample per class: the loader is pure-Python YAML
            continue
        path = out / "descriptors" / entry["file"]
        assert yaml.safe_load(path.read_text()) is not None
        descriptor = load_descriptor(path)
        verdict = lower_row(descriptor, descriptor.rows()[0])
        assert verdict.label.value == entry["python_label"]
        assert not verdict.label.is_sound and entry["fails_closed"]


def test_same_seed_same_output_on_one_worker_or_two(rows: list[PositiveRow], tmp_path: Path) -> None:
    chosen = rows[:2] + rows[-2:]
    run_adversary(chosen, tmp_path / "one", seed=7, budget_s=900, jobs=1)
    run_adversary(chosen, tmp_path / "two", seed=7, budget_s=900, jobs=2)
    one = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    two = sorted(p.relative_to(tmp_path / "two") for p in (tmp_path / "two").rglob("*") if p.is_file())
    assert one == two and len(one) > 100
    for path in one:
        assert (tmp_path / "one" / path).read_bytes() == (tmp_path / "two" / path).read_bytes()


def test_a_budget_cut_is_reported_incomplete(rows: list[PositiveRow]) -> None:
    """The budget is checked between rows: the first row is searched, the second is not."""
    report = run_adversary(rows[:2], None, budget_s=0)
    assert not report.complete and report.distinct >= 1
    assert report.distinct == run_adversary(rows[:1], None, budget_s=0).distinct
