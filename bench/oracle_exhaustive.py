"""Bounded-exhaustive comparison of the oracle with the checker (issue 12), at full bounds.

    .venv/bin/python bench/oracle_exhaustive.py [--runs core:6 full:4 whole:5]

For each `menu:length` run, every trace up to `length` events over the universe of
`kvclaims.oracle.exhaustive` (2 claims, 4 blocks, 2 requests, a pool of 4), explored
breadth-first over unrejected prefixes deduplicated by the oracle's state; prints traces
compared, distinct states, seconds, rule mismatches and the disagreements by class (each with
its shortest trace). Nothing is asserted; the CI bound is tests/oracle/test_exhaustive.py.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from kvclaims.oracle.exhaustive import Disagreement, classify, explore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", default=["core:6", "full:4", "whole:5"])
    args = parser.parse_args()
    for run in args.runs:
        menu, length = run.split(":")
        report = explore(int(length), menu)
        classes: Counter[str] = Counter()
        shortest: dict[str, Disagreement] = {}
        for disagreement in report.disagreements:
            signature = classify(disagreement)
            classes[signature] += 1
            if signature not in shortest or len(disagreement.trace) < len(shortest[signature].trace):
                shortest[signature] = disagreement
        print(json.dumps({**report.summary(), "classes": dict(classes.most_common())}, indent=2))
        for signature, example in shortest.items():
            print(f"\n{signature}")
            for name, fields in example.trace:
                print(f"    {name} {json.dumps(fields, sort_keys=True)}")


if __name__ == "__main__":
    main()
