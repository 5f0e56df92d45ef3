"""The long mutation profile of issue 12: single mutations of legal histories, oracle vs checker.

    .venv/bin/python bench/oracle_mutations.py [--cases 100000] [--seed 0] [--per-source 8]

Bases are `--per-source` histories each of `generate_valid_trace` and the MicroRuntime that
both the oracle and the checker accept; every case applies one random mutation
(`kvclaims.oracle.mutations.MUTATIONS`) and compares the two verdicts (the checker without its
minimal-prefix shrinking, which does not change outcome or rule; the oracle from its state
cached before the first changed event, `PreparedHistory`). `--budget-s` stops early and says
how many cases ran. Prints the counts, the
disagreements by class with the known-disagreement entry that explains each, and the shortest
example of every class no entry explains. Nothing is asserted; the CI profile is
tests/oracle/test_mutations.py.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from pathlib import Path

import yaml

from kvclaims.oracle.mutations import run

KNOWN = Path(__file__).resolve().parents[1] / "tests" / "oracle" / "data" / "known_disagreements.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-source", type=int, default=8)
    parser.add_argument("--budget-s", type=float, default=None, help="stop after this many seconds")
    args = parser.parse_args()
    known = yaml.safe_load(KNOWN.read_text())
    start = time.perf_counter()

    def progress(kinds: Counter[str], classes: Counter[str]) -> None:
        done, found = sum(kinds.values()), sum(classes.values())
        print(f"{done} cases, {found} disagreements, {time.perf_counter() - start:.0f} s", flush=True)

    kinds, classes, examples = run(
        args.cases, args.seed, args.per_source, budget_s=args.budget_s, progress=progress
    )
    seconds = time.perf_counter() - start
    by_entry: dict[str, int] = {}
    unexplained = {}
    for signature, count in classes.items():
        ids = [entry["id"] for entry in known if re.search(entry["match"], signature)]
        if ids:
            by_entry[ids[0]] = by_entry.get(ids[0], 0) + count
        else:
            unexplained[signature] = count
    print(
        json.dumps(
            {
                "cases": sum(kinds.values()),
                "seconds": round(seconds, 1),
                "cases_per_second": round(sum(kinds.values()) / seconds, 1),
                "mutations": dict(sorted(kinds.items())),
                "disagreements": sum(classes.values()),
                "by_known_entry": dict(sorted(by_entry.items(), key=lambda kv: -kv[1])),
                "unexplained": unexplained,
            },
            indent=2,
        )
    )
    for signature in unexplained:
        example = examples[signature]
        print(f"\n{signature}\n  oracle {example.oracle}\n  checker {example.checker}")
        stop = example.oracle.line - 1 if example.oracle.line else len(example.trace)
        for name, fields in example.trace[max(0, stop - 12) : stop]:
            print(f"    {name} {json.dumps(fields)[:240]}")


if __name__ == "__main__":
    main()
