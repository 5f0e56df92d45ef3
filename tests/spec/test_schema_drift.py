"""The committed JSON Schemas are exactly what the models generate."""

from pathlib import Path

from kvclaims.spec.schema import SCHEMA_FILES, drifted_schemas, generate_schemas

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_committed_schemas_match_the_models() -> None:
    assert drifted_schemas(SCHEMAS) == [], "run: kvclaims schema --out schemas"


def test_every_schema_file_is_generated() -> None:
    assert sorted(generate_schemas()) == sorted(SCHEMA_FILES)


def test_drift_is_detected(tmp_path: Path) -> None:
    for name in SCHEMA_FILES:
        (tmp_path / name).write_text((SCHEMAS / name).read_text())
    (tmp_path / SCHEMA_FILES[0]).write_text("{}\n")
    assert drifted_schemas(tmp_path) == [SCHEMA_FILES[0]]
