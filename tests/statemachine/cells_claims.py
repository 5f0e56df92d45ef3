"""Hostile traces and conforming twins for the claims cells of the rule x event table
(docs/rule-event-table.md); `test_rule_event_table` gathers `CASES`, `HEADERS` and `PAIRS`
from here as from `test_choke_points`. Expected verdicts are written here, never computed."""

from __future__ import annotations

from typing import Any

from kvclaims.refinement import Outcome
from kvclaims.spec.vocabulary import ConformanceRule as R
from tests.statemachine.hostile import Event

CASES: list[tuple[str, list[Event], Outcome, R | None]] = []
"""(name, events, expected outcome, the rule a rejection names or None)."""

HEADERS: dict[str, dict[str, Any]] = {}
"""Case name -> its trace header, where it is not `hostile.HEADER`."""

PAIRS: dict[tuple[str, str], list[tuple[str, str]]] = {}
"""Cell (rule, event) -> (violating case, conforming twin), by case name."""
