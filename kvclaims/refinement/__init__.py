"""kvclaims.refinement: does a recorded runtime trace refine the resident-claim model?

`check_trace(path) -> TraceVerdict` streams a trace (kvclaims trace v1, or a foreign vocabulary
through its abstraction function), replays every abstract step through the lifecycle machines of
`kvclaims.statemachine`, and answers accepted / rejected (with a counterexample) / inconclusive
/ invalid. Accepted traces become anchored evidence items (`kvclaims.refinement.evidence`).
Depends on `kvclaims.spec` and `kvclaims.statemachine` only.
"""

from kvclaims.refinement.api import check_bytes, check_source, check_trace
from kvclaims.refinement.checker import Budget
from kvclaims.refinement.sources import FORMATS
from kvclaims.refinement.verdict import Counterexample, ErrorClass, Finding, Outcome, TraceVerdict, Witness

__all__ = [
    "FORMATS",
    "Budget",
    "Counterexample",
    "ErrorClass",
    "Finding",
    "Outcome",
    "TraceVerdict",
    "Witness",
    "check_bytes",
    "check_source",
    "check_trace",
]
