"""The corpus verdict table: every trace of the seed artifact's corpus, its source label, the
refinement verdict, what it evidences, and (from the corpus test's data) why the two differ.

    .venv/bin/python bench/check_corpus.py [CORPUS_DIR] [--markdown]

Also prints the time to check the whole corpus. Reads the reasons from
tests/refinement/data/corpus_expectations.yaml when the file is there.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import yaml

from kvclaims.refinement.corpus import SUMMARY_COLUMNS, check_corpus, default_corpus, summary_rows

EXPECTATIONS = (
    Path(__file__).resolve().parents[1] / "tests" / "refinement" / "data" / "corpus_expectations.yaml"
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("corpus", nargs="?", type=Path, default=default_corpus())
    parser.add_argument(
        "--markdown", action="store_true", help="a Markdown table instead of tab-separated text"
    )
    args = parser.parse_args()
    reasons = yaml.safe_load(EXPECTATIONS.read_text()) if EXPECTATIONS.exists() else {}
    started = time.perf_counter()
    results = check_corpus(args.corpus)
    seconds = time.perf_counter() - started
    columns = [*SUMMARY_COLUMNS, "agrees with source", "reason"]
    rows = []
    for (trace, _), row in zip(results, summary_rows(results), strict=True):
        expected = reasons.get(trace.key, {})
        agrees = {True: "yes", False: "no", None: "no source verdict"}[expected.get("agrees")]
        rows.append([*row, agrees, " ".join(str(expected.get("reason", "")).split())])
    if args.markdown:
        print("| " + " | ".join(columns) + " |")
        print("|" + "---|" * len(columns))
        for row in rows:
            print("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |")
    else:
        print("\t".join(columns))
        for row in rows:
            print("\t".join(row))
    counts = Counter(verdict.outcome.value for _, verdict in results)
    tally = ", ".join(f"{counts[o]} {o}" for o in ("accepted", "rejected", "inconclusive", "invalid"))
    print(f"\n{len(results)} traces in {seconds:.2f}s: {tally}")


if __name__ == "__main__":
    main()
