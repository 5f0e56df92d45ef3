"""The known-disagreements file, shared by the exhaustive and the mutation comparisons."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from kvclaims.oracle.exhaustive import CLOSED, Disagreement, classify

KNOWN_FILE = Path(__file__).parent / "data" / "known_disagreements.yaml"


def load_known() -> list[dict[str, Any]]:
    return yaml.safe_load(KNOWN_FILE.read_text())


def example_bytes(entry: dict[str, Any], header: dict[str, Any]) -> bytes:
    events = [json.loads(line) for line in entry["trace"]]
    events.append(CLOSED)
    lines = [json.dumps(header)] + [json.dumps({"seq": i, **event}) for i, event in enumerate(events, 1)]
    return ("\n".join(lines) + "\n").encode()


def unexplained(disagreements: list[Disagreement], known: list[dict[str, Any]]) -> dict[str, Disagreement]:
    """The signatures no known entry matches, each with its shortest trace."""
    found: dict[str, Disagreement] = {}
    for disagreement in disagreements:
        signature = classify(disagreement)
        if any(re.search(entry["match"], signature) for entry in known):
            continue
        if signature not in found or len(disagreement.trace) < len(found[signature].trace):
            found[signature] = disagreement
    return found
