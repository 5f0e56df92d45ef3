"""A compact, exact-or-fail-closed set of retired identifiers (finished request ids; the checker
and the vLLM binding both keep one).

The checker must remember every finished request id (a finished id is never reused, and a
late refusal after `request_finished` is an attribution error), but memory must stay bounded by
*live* requests, not by the length of the trace. Retired ids are kept as their 64-bit string
hashes (computed once per `str` and cached by CPython), first in a set, then in sorted
`array('q')` runs: 8 bytes per id instead of ~80 for a `str` in a `set`.

A hash collision can only make a fresh id look retired, which the checker reports as a
rejection, never as an acceptance: the structure fails closed. For 10^7 ids the chance of any
collision is about 3e-6.
"""

from __future__ import annotations

import bisect
from array import array

_RECENT_LIMIT = 1 << 18
"""Hashes kept in a plain set before they become a sorted run."""


class RetiredIds:
    """Insert-only membership for identifiers, 8 bytes per id once merged.

    Hashes collect in a small set, then become a sorted run; runs of similar size are merged
    (Timsort merges two sorted runs in linear time), so there are O(log n) runs to search.
    """

    __slots__ = ("_recent", "_runs")

    def __init__(self) -> None:
        self._recent: set[int] = set()
        self._runs: list[array[int]] = []

    def add(self, identifier: str) -> None:
        self._recent.add(hash(identifier))
        if len(self._recent) >= _RECENT_LIMIT:
            self._flush()

    def __contains__(self, identifier: object) -> bool:
        digest = hash(identifier)
        if digest in self._recent:
            return True
        for run in self._runs:
            index = bisect.bisect_left(run, digest)
            if index < len(run) and run[index] == digest:
                return True
        return False

    def __len__(self) -> int:
        return sum(len(run) for run in self._runs) + len(self._recent)

    def _flush(self) -> None:
        run = array("q", sorted(self._recent))
        self._recent = set()
        while self._runs and len(self._runs[-1]) <= 2 * len(run):
            run = array("q", sorted(self._runs.pop() + run))
        self._runs.append(run)
