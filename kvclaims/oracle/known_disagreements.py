"""The disagreements between the oracle and the checker where DESIGN and the trace format say
the checker is wrong, by the start of their signature (`exhaustive.classify`), each with the
finding that reports it to the model's owner and where it shows: the bounded-exhaustive
comparison, or the randomized differential's case of that seed. Tests check the comparisons find
exactly these (so the list shrinks when the checker is fixed: delete the entry and keep its
twins in tests/oracle/test_regressions.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    signature: str  # how the signature starts
    finding: str  # in the findings folder beside the checkout
    differential_seed: int | None = None  # None: found by the exhaustive comparison


KNOWN_CHECKER_DISAGREEMENTS: tuple[Known, ...] = (
    Known(
        "oracle accepted/- vs checker rejected/capacity_state: admitting request _ says "
        "claim_shared_blocks = #, more than the # blocks the claims hold",
        "oracle--model--in-place-restore-holds-no-blocks.md",
    ),
    Known(
        "oracle accepted/- vs checker rejected/block_identity: block_removed says block # held ",
        "oracle--model--other-tier-block-id-collides.md",
        differential_seed=6368,  # 2555 until the generator drew soft terms (issue 28)
    ),
)


def known(signature: str) -> Known | None:
    """The known checker bug a disagreement of `signature` is, if any."""
    return next((k for k in KNOWN_CHECKER_DISAGREEMENTS if signature.startswith(k.signature)), None)
