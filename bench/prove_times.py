"""Proof obligation times: per obligation and in total, best of --repeat runs.

    .venv/bin/python bench/prove_times.py [--repeat 3]

Each run executes every obligation of `kvclaims prove` in a fresh z3 context (as the command
does) and records wall time and process CPU time. The best run per obligation is printed (the
machine is shared, so the minimum is the least disturbed measurement), with the total of the
per-run sums. Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import time

from kvclaims.solver.obligations import all_obligations
from kvclaims.solver.proofs import run_obligation
from kvclaims.solver.z3env import Z3_VERSION


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    obligations = all_obligations()
    best: dict[str, float] = {}
    totals_wall, totals_cpu = [], []
    for _ in range(args.repeat):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for obligation in obligations:
            result = run_obligation(obligation)
            if not result.proved:
                raise SystemExit(f"{obligation.name}: {result.verdict}")
            best[obligation.name] = min(best.get(obligation.name, float("inf")), result.seconds)
        totals_wall.append(time.perf_counter() - wall0)
        totals_cpu.append(time.process_time() - cpu0)
    print(f"z3 {Z3_VERSION}; {len(obligations)} obligations; best of {args.repeat} runs")
    print(f"{'obligation':72s} {'method':22s} seconds")
    for obligation in obligations:
        print(f"{obligation.name:72s} {obligation.method.value:22s} {best[obligation.name]:7.2f}")
    print(f"sum of per-obligation bests: {sum(best.values()):.2f} s")
    print(
        f"total per run (wall): {', '.join(f'{t:.2f}' for t in totals_wall)} s; best {min(totals_wall):.2f} s"
    )
    print(
        f"total per run (process CPU): {', '.join(f'{t:.2f}' for t in totals_cpu)} s; "
        f"best {min(totals_cpu):.2f} s"
    )


if __name__ == "__main__":
    main()
