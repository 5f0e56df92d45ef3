"""Inputs shipped inside the package, so `kvclaims demo` runs from an installed wheel with no
source checkout: the curated runtime descriptors (`descriptors/`, a link to the repository's
`descriptors/` folder in a checkout, copied into the wheel as package data) and the small trace
corpus they cite as evidence (`descriptors/evidence/`, traces the vLLM binding wrote)."""

from __future__ import annotations

from pathlib import Path

DESCRIPTORS = Path(__file__).parent / "descriptors"
"""The shipped runtime descriptors (`descriptor: 1` YAML files)."""

TRACES = DESCRIPTORS / "evidence"
"""The bundled trace corpus: every `*.ndjson` under it is a trace v1 the descriptors cite."""
