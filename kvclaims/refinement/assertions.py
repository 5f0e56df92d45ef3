"""`assert_refines(trace)`: a trace check as a test assertion, failing closed.

    from kvclaims.testing import assert_refines
    def test_my_runtime_conforms(tmp_path):
        run_my_runtime(trace_out=tmp_path / "run.ndjson")
        assert_refines(tmp_path / "run.ndjson")

Only `accepted` passes. A rejection fails with its rendered counterexample (the same text
`kvclaims check` prints); `invalid` and `inconclusive` fail with their reason, because a trace
that could not be decided is not evidence of conformance. `allow_inconclusive=True` is the one
explicit way to let an undecided trace pass. A trace file that does not exist is not a verdict
but a broken test: `FileNotFoundError` naming the path it resolved.
"""

from __future__ import annotations

from pathlib import Path

from kvclaims.refinement.api import check_bytes, check_trace
from kvclaims.refinement.rendering import render_verdict
from kvclaims.refinement.sources import AUTO
from kvclaims.refinement.verdict import Outcome, TraceVerdict

FAILURE_HEADLINE = "the trace does not refine the resident-claim model"


def assert_refines(
    trace: str | Path | bytes,
    *,
    format: str = AUTO,
    registry: str | Path | None = None,
    allow_inconclusive: bool = False,
    relative_to: str | Path | None = None,
) -> TraceVerdict:
    """Check `trace` (a path, or the trace's bytes) and return its verdict if it is accepted
    (or inconclusive, with `allow_inconclusive`); otherwise raise `AssertionError` whose
    message is the headline plus `render_verdict` of the verdict: outcome and reason, and for
    a rejection the rule, event number and line, the abstract state before it, what the model allowed,
    the surrounding events and the minimal prefix. A relative path is read from `relative_to`
    (the pytest fixture passes the test file's folder), else from the working directory; a
    missing file raises `FileNotFoundError` with the path tried. `format` and `registry` are
    those of `check_trace`; a bad format name or registry raises `ValueError` / `InputError`."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this one
    if isinstance(trace, bytes):
        verdict = check_bytes(trace, format=format, registry=registry)
    else:
        trace = Path(relative_to or "", trace)
        if not trace.is_file():
            raise FileNotFoundError(f"trace file not found: {trace.resolve()}")
        verdict = check_trace(trace, format=format, registry=registry)
    passing = {Outcome.accepted, Outcome.inconclusive} if allow_inconclusive else {Outcome.accepted}
    if verdict.outcome not in passing:
        raise AssertionError(f"{FAILURE_HEADLINE}:\n{render_verdict(verdict, source=trace)}")
    return verdict
