"""The long mutation profile of issue 12: single mutations of legal histories, oracle vs checker.

    .venv/bin/python bench/oracle_mutations.py [--cases 100000] [--seed 0] [--per-source 8]

Bases are `--per-source` histories each of `generate_valid_trace` and the MicroRuntime that
both the oracle and the checker accept; every case applies one random mutation
(`kvclaims.oracle.mutations.MUTATIONS`) and compares the two verdicts (the checker without its
minimal-prefix shrinking, which does not change outcome or rule; the oracle from its state
cached before the first changed event, `PreparedHistory`). `--budget-s` stops early and says
how many cases ran. Prints the counts, the
disagreements by class, and the shortest example of every class. Nothing is asserted; the CI profile is
tests/oracle/test_mutations.py.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from kvclaims.oracle.mutations import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-source", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=None, help="stop after this many seconds")
    args = parser.parse_args()
    start = time.perf_counter()

    def progress(kinds: Counter[str], classes: Counter[str]) -> None:
        done, found = sum(kinds.values()), sum(classes.values())
        print(f"{done} cases, {found} disagreements, {time.perf_counter() - start:.0f} s", flush=True)

    kinds, classes, examples = run(
        args.cases, args.seed, args.per_source, budget_s=args.budget_s, progress=progress
    )
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "cases": sum(kinds.values()),
                "seconds": round(seconds, 1),
                "cases_per_second": round(sum(kinds.values()) / seconds, 1),
                "mutations": dict(sorted(kinds.items())),
                "disagreements": sum(classes.values()),
                "classes": dict(classes.most_common()),
            },
            indent=2,
        )
    )
    for signature in classes:
        example = examples[signature]
        print(f"\n{signature}\n  oracle {example.oracle}\n  checker {example.checker}")
        stop = example.oracle.line - 1 if example.oracle.line else len(example.trace)
        for name, fields in example.trace[max(0, stop - 12) : stop]:
            print(f"    {name} {json.dumps(fields)[:240]}")


if __name__ == "__main__":
    main()
