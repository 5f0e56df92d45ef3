"""A virtual wall clock for lanes without a model: the binding's arbiter reads it as its
`clock`, so `t_ns` and `duration_ms` are judged on the schedule, not on this machine's speed."""

from __future__ import annotations

from kvclaims.spec.vocabulary import NS_PER_MS


class VirtualClock:
    """Wall-clock nanoseconds that move only when the driver says so."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance(self, ms: int) -> None:
        """Move the clock `ms` milliseconds forward."""
        self.ns += ms * NS_PER_MS
