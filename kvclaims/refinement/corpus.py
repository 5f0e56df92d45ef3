"""The seed artifact's labelled trace corpus: every trace's verdict beside the source's label.

The corpus (`$KVCLAIMS_CORPUS`, or the workplace's `shared/corpus/`) holds one folder
per source repository with a `MANIFEST.json` whose `traces` list names each trace file, its
lane and the label the source repository itself assigned (`gate_verdict`, `role`). The source's
labels come from gates that count events; ours come from refinement, so they can differ, and
where they do the corpus test records why (`tests/refinement/data/corpus_expectations.yaml`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kvclaims.refinement.api import check_trace
from kvclaims.refinement.verdict import TraceVerdict
from kvclaims.spec.tables import OBLIGATION_CODES, WITNESS_OBLIGATIONS
from kvclaims.spec.vocabulary import Obligation

CORPUS_ENV = "KVCLAIMS_CORPUS"


_REPOSITORY = Path(__file__).resolve().parents[2]
CORPUS_CANDIDATES: tuple[Path, ...] = (
    _REPOSITORY / "shared" / "corpus",
    _REPOSITORY.parent / "shared" / "corpus",
)
"""Where the workplace keeps `shared/`: inside the checkout or beside it.
The corpus is external test data and is never committed to this repository."""


def default_corpus() -> Path:
    """`$KVCLAIMS_CORPUS`, else the first candidate that exists (else the first candidate,
    so that a missing corpus is reported at a real path)."""
    configured = os.environ.get(CORPUS_ENV)
    if configured:
        return Path(configured)
    return next((c for c in CORPUS_CANDIDATES if c.is_dir()), CORPUS_CANDIDATES[1])


@dataclass(frozen=True)
class CorpusTrace:
    """One trace of a manifest: where it is and what its source says about it."""

    source: str
    path: str
    file: Path
    lane: str
    gate_verdict: str
    role: str

    @property
    def key(self) -> str:
        """`<source folder>/<path in the source repository>`, unique across the corpus."""
        return f"{self.source}/{self.path}"

    @property
    def source_label(self) -> str:
        return f"{self.gate_verdict} ({self.role})"


def corpus_traces(root: Path) -> Iterator[CorpusTrace]:
    """Every trace listed by every `MANIFEST.json` directly under `root`, in manifest order."""
    for manifest in sorted(root.glob("*/MANIFEST.json")):
        document = json.loads(manifest.read_text(encoding="utf-8"))
        for entry in document["traces"]:
            yield CorpusTrace(
                source=manifest.parent.name,
                path=entry["path"],
                file=manifest.parent / entry["path"],
                lane=entry["lane"],
                gate_verdict=str(entry["gate_verdict"]),
                role=str(entry["role"]),
            )


def evidenced(verdict: TraceVerdict) -> list[Obligation]:
    """The obligations an accepted trace evidences (none for any other outcome)."""
    if verdict.outcome.value != "accepted":
        return []
    found = {o for w in verdict.witnesses for o in WITNESS_OBLIGATIONS[w.kind]}
    return [o for o in Obligation if o in found]


def check_corpus(root: Path) -> list[tuple[CorpusTrace, TraceVerdict]]:
    """Check every corpus trace (format auto-detected)."""
    return [(trace, check_trace(trace.file)) for trace in corpus_traces(root)]


def summary_rows(results: list[tuple[CorpusTrace, TraceVerdict]]) -> list[list[str]]:
    """Rows of the verdict-vs-label table: trace, lane, source label, outcome, rule, evidence."""
    return [
        [
            trace.path.removeprefix("artifacts/"),
            verdict.format,
            trace.source_label,
            verdict.outcome.value,
            (
                verdict.rule.value
                if verdict.rule
                else (verdict.error_class.value if verdict.error_class else "")
            ),
            " ".join(OBLIGATION_CODES[o] for o in evidenced(verdict)) or "-",
        ]
        for trace, verdict in results
    ]


SUMMARY_COLUMNS = ("trace", "format", "source label", "outcome", "rule / class", "evidences")
