"""Adversary rate: distinct adversarial descriptors per second, and the BMC trace time.

    .venv/bin/python bench/adversary_rate.py [--repeat 3] [--out DIR]

Each run enumerates every mutation class on every positive row (`kvclaims adversary`,
descriptors part, writing YAML to --out), and reports distinct descriptors, wall and process
CPU seconds, and the rates; the whole run counts (building the Z3 models of the positive rows,
solving, decoding, judging each descriptor with `kvclaims.spec.lower`, writing YAML). Then the
BMC traces are generated once and checked by the refinement checker. The machine is shared:
the best run is the least disturbed figure; all runs are printed. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from kvclaims.refinement import check_bytes
from kvclaims.solver.adversary import CLASSES, run_adversary
from kvclaims.solver.parallel import available_cores
from kvclaims.solver.positives import positive_rows
from kvclaims.solver.traces import CLASSES as TRACE_CLASSES
from kvclaims.solver.traces import generate

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=available_cores(), help="worker processes")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kvclaims-adversary-"))
    rows = positive_rows(ROOT / "descriptors")
    runs = []
    for n in range(args.repeat):
        shutil.rmtree(out / "descriptors", ignore_errors=True)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        report = run_adversary(rows, out, budget_s=3600, jobs=args.jobs)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        runs.append((report.distinct, wall, cpu))
        closed = not report.not_failing_closed and not report.disagreements
        print(
            f"run {n + 1}: {report.distinct} distinct descriptors, {wall:.2f} s wall "
            f"({report.distinct / wall:.0f}/s), {cpu:.2f} s CPU ({report.distinct / cpu:.0f}/s), "
            f"complete={report.complete}, all fail closed={closed}"
        )
    distinct, wall, cpu = min(runs, key=lambda r: r[1])
    produced = sum(1 for c in CLASSES if report.by_class.get(c.id))
    seed_classes = sum(1 for c in CLASSES if c.seed_kind and report.by_class.get(c.id))
    print(
        f"positive rows: {len(rows)}; classes producing descriptors: {produced}/{len(CLASSES)} "
        f"({seed_classes} seed kinds)"
    )
    print(f"best run: {distinct / wall:.0f} distinct descriptors/s wall, {distinct / cpu:.0f}/s CPU")
    started = time.perf_counter()
    traces = generate(out, check_bytes)
    seconds = time.perf_counter() - started
    print(f"BMC traces: {len(traces.written)} for {len(TRACE_CLASSES)} classes in {seconds:.2f} s")
    print(f"classes without a rejected-as-planted trace: {traces.missing_classes or 'none'}")
    print(f"outputs in {out}/")


if __name__ == "__main__":
    main()
