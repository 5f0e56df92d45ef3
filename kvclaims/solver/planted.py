"""A deliberately permissive lowering, to show that the proofs and the differential search
catch a fail-open table.

The planted bug lets a telemetry_join adapter supply victim exclusion (V): a telemetry join
that merely *observes* that a claimed block survived would count as the allocator excluding it
as a victim (seed 000 table 2, "telemetry cannot create enforcement"). It is a table override,
injected into the Z3 model through `planted_facts()` and into the Python judgment through
`planted_python()`; nothing else changes. For self-tests only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from kvclaims.solver.facts import Facts
from kvclaims.solver.lowering_model import ConcreteVerdict
from kvclaims.solver.lowering_proofs import python_verdict
from kvclaims.spec import lowering
from kvclaims.spec.vocabulary import AdapterDepth, Obligation

PLANTED_DEPTH = AdapterDepth.telemetry_join
PLANTED_OBLIGATIONS = frozenset({Obligation.victim_exclusion_before_violation})


def planted_facts() -> Facts:
    """The reference tables, except that telemetry_join may also supply victim exclusion."""
    return Facts.reference().with_depth_supplies(PLANTED_DEPTH, PLANTED_OBLIGATIONS)


@contextmanager
def planted_python() -> Iterator[None]:
    """`kvclaims.spec.lower` judging with the planted table, for the duration of the block."""
    with mock.patch.object(lowering, "DEPTH_SUPPLIES", planted_facts().depth_supplies):
        yield


def planted_python_verdict(document: dict[str, Any]) -> ConcreteVerdict:
    """`python_verdict` under the planted table."""
    with planted_python():
        return python_verdict(document)
