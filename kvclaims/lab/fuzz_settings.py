"""The Hypothesis settings the lab's state machines run under, defined once.

CI runs `bounded` settings: derandomized (the same examples on every run), no example database,
no deadline (a vLLM step or a long trace is slow, not wrong). Long runs by the CLI draw random
`batches` of the same machines until their time is up.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

DETERMINISTIC = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
"""What every bounded run shares: reproducible, no database, no deadline."""


def bounded(max_examples: int, stateful_step_count: int) -> settings:
    """A deterministic CI profile of `max_examples` examples of up to `stateful_step_count` steps."""
    return settings(DETERMINISTIC, max_examples=max_examples, stateful_step_count=stateful_step_count)


def batches(max_examples: int, stateful_step_count: int) -> settings:
    """One random (not derandomized) batch of a timed fuzzing run; every health check is off
    (a batch that filters or runs slowly is still a batch of examples)."""
    return settings(
        DETERMINISTIC,
        derandomize=False,
        max_examples=max_examples,
        stateful_step_count=stateful_step_count,
        suppress_health_check=list(HealthCheck),
    )
