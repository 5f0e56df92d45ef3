"""Bounded-exhaustive comparison of the oracle with the checker (issue 12), at full bounds.

    .venv/bin/python bench/oracle_exhaustive.py [--runs core:6 full:4]

For each `menu:length` run, every trace up to `length` events over the universe of
`kvclaims.oracle.exhaustive` (2 claims, 4 blocks, 2 requests, a pool of 4), explored
breadth-first over unrejected prefixes deduplicated by the oracle's state; prints traces
compared, distinct states, seconds, rule mismatches and the disagreements by known entry (and
any no entry explains). Nothing is asserted; the CI bound is tests/oracle/test_exhaustive.py.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

import yaml

from kvclaims.oracle.exhaustive import classify, explore

KNOWN = Path(__file__).resolve().parents[1] / "tests" / "oracle" / "data" / "known_disagreements.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", default=["core:6", "full:4"])
    args = parser.parse_args()
    known = yaml.safe_load(KNOWN.read_text())
    for run in args.runs:
        menu, length = run.split(":")
        report = explore(int(length), menu)
        by_entry: Counter[str] = Counter()
        for disagreement in report.disagreements:
            signature = classify(disagreement)
            ids = [entry["id"] for entry in known if re.search(entry["match"], signature)]
            by_entry[ids[0] if ids else f"UNEXPLAINED: {signature}"] += 1
        print(json.dumps({**report.summary(), "by_known_entry": dict(by_entry.most_common())}, indent=2))


if __name__ == "__main__":
    main()
