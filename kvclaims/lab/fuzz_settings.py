"""The Hypothesis settings and the fuzzing seed every test run uses, defined once.

The seed (`fuzz_seed`) comes from the commit: new examples on every commit, the same examples
when a commit is re-run. `KVCLAIMS_FUZZ_SEED` overrides it (to reproduce a failure: every
failing test prints the exact command); without git or a commit the seed is `FALLBACK_SEED`.
tests/conftest.py gives it to every Hypothesis test of the suite (`@given` tests and state
machines alike, including those whose own settings say `derandomize=True`) and loads the
`NO_DATABASE` profile, so no example database can replay, hide or add an example.

CI runs `bounded` settings: seeded as above, no example database, no deadline (a vLLM step or
a long trace is slow, not wrong). Long runs by the CLI draw random `batches` of the same
machines until their time is up.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings

FUZZ_SEED_ENV = "KVCLAIMS_FUZZ_SEED"
FALLBACK_SEED = 0
"""The seed where neither the environment nor git says one (a source tarball)."""

NO_DATABASE = "kvclaims-no-database"
settings.register_profile(NO_DATABASE, database=None)


@dataclass(frozen=True)
class FuzzSeed:
    value: int
    origin: str  # where it came from, for the run's header and a failure's report

    def reproduce(self, nodeid: str) -> str:
        """The command that re-runs one test with this seed, from the checkout's root."""
        return f"{FUZZ_SEED_ENV}={self.value} python -m pytest '{nodeid}' -p no:cacheprovider"


def fuzz_seed(checkout: Path | None = None) -> FuzzSeed:
    """`KVCLAIMS_FUZZ_SEED` (an integer, or any text, hashed), else the commit `checkout` (this
    package's own by default) is at, else `FALLBACK_SEED`."""
    given = os.environ.get(FUZZ_SEED_ENV, "").strip()
    if given:
        return FuzzSeed(_as_seed(given), f"{FUZZ_SEED_ENV}")
    commit = _commit(checkout or Path(__file__).resolve().parents[2])
    if commit is None:
        return FuzzSeed(FALLBACK_SEED, f"fallback: no git commit and no {FUZZ_SEED_ENV}")
    return FuzzSeed(_as_seed(commit), f"commit {commit[:12]}")


def _as_seed(text: str) -> int:
    if text.isdigit():
        return int(text)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _commit(checkout: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) >= 40 else None


DETERMINISTIC = settings(
    derandomize=False,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
"""What every bounded run shares: no database, no deadline; under pytest the suite's seed makes
it reproducible (tests/conftest.py), outside it each run draws new examples."""


def bounded(max_examples: int, stateful_step_count: int) -> settings:
    """A CI profile of `max_examples` examples of up to `stateful_step_count` steps."""
    return settings(DETERMINISTIC, max_examples=max_examples, stateful_step_count=stateful_step_count)


def batches(max_examples: int, stateful_step_count: int) -> settings:
    """One random (not derandomized) batch of a timed fuzzing run; every health check is off
    (a batch that filters or runs slowly is still a batch of examples)."""
    return settings(
        DETERMINISTIC,
        max_examples=max_examples,
        stateful_step_count=stateful_step_count,
        suppress_health_check=list(HealthCheck),
    )
