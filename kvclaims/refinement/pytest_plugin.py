"""The kvclaims pytest plugin (registered through the `pytest11` entry point, so installing
kvclaims is enough): fixtures for runtime authors' test suites.

- `assert_refines`: `kvclaims.testing.assert_refines`, passing only accepted traces and
  failing with the rendered counterexample; a relative trace path is read from the folder of
  the test file (not the directory pytest was started in), and a missing file is reported as
  a missing file (`FileNotFoundError` with the path tried), not as a verdict;
- `kvclaims_trace_builder`: a factory of `TraceBuilder`s, for writing trace v1 by hand.

It is loaded into every pytest run of an environment where kvclaims is installed, so it
imports nothing of kvclaims until a fixture is used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kvclaims.refinement.testing import TraceBuilder
    from kvclaims.refinement.verdict import TraceVerdict


@pytest.fixture
def assert_refines(request: pytest.FixtureRequest) -> Callable[..., TraceVerdict]:
    """`assert_refines(trace_path_or_bytes, *, format="auto", registry=None,
    allow_inconclusive=False)`: returns the verdict of an accepted trace, else fails the test
    with the counterexample (see `kvclaims.refinement.assertions`). Relative paths are read
    from the test file's folder."""
    from kvclaims.refinement.assertions import assert_refines as check

    return functools.partial(check, relative_to=request.path.parent)


@pytest.fixture
def kvclaims_trace_builder() -> Callable[..., TraceBuilder]:
    """`kvclaims_trace_builder(usable_blocks=80, block_size=16, **header)` -> a new, empty
    `TraceBuilder`; its `ndjson()` bytes go straight to `assert_refines`."""
    from kvclaims.refinement.testing import TraceBuilder

    def build(**header: Any) -> TraceBuilder:
        return TraceBuilder(**header)

    return build
