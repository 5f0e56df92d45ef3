"""Generate adversarial descriptors and traces (Z3) that must fail closed, into -o DIR.

Descriptors: near-misses of every positive row (the descriptors in `--descriptors`, plus
fixtures for the mode and depth shapes they lack) that look positive but must fail closed, one
Z3 enumeration per mutation class with blocking clauses over the class's view; each is written
as `descriptor: 1` YAML under DIR/descriptors/<class>/ and judged by `kvclaims.spec.lower`.
Traces: short event sequences found by bounded model checking that break exactly one refinement
rule at their last step, written as trace v1 under DIR/traces/ and checked by the refinement
checker.

`--ray [ADDRESS]` searches each positive row as a Ray task on that cluster (alone: a local
cluster of --jobs CPUs); the descriptors and index written are those of a local run.

Without -o, DIR is a new folder in the user's data directory; the last line names it (`--json`:
the summary's "out").

`--json` prints the summary as one JSON line.

Exit codes: 0 every descriptor failed closed (and model and Python agreed) and every trace class
was rejected with its rule at the planted step; 1 otherwise; 2 invalid input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import click

from kvclaims.bundled import DESCRIPTORS
from kvclaims.cli._common import (
    Exit,
    descriptors_option,
    jobs_option,
    json_option,
    out_option,
    out_or_new_run_folder,
    print_json,
    print_table,
    ray_option,
    runs,
    stderr_console,
    stdout_console,
)
from kvclaims.cli.prove import progress_steps

RUN_FOLDER = "adversary"
"""The name of the folder `kvclaims adversary` writes to without -o (`new_run_folder`)."""


def run(args: argparse.Namespace) -> int:
    from kvclaims.refinement import check_bytes, fanout
    from kvclaims.solver.adversary import CLASSES, run_adversary
    from kvclaims.solver.parallel import available_cores
    from kvclaims.solver.positives import positive_rows
    from kvclaims.solver.traces import CLASSES as TRACE_CLASSES
    from kvclaims.solver.traces import generate

    quiet = args.json
    rows = positive_rows(args.descriptors)
    args.out = out_or_new_run_folder(args.out, RUN_FOLDER)
    jobs = args.jobs or available_cores()
    with progress_steps(0, "adversarial descriptors") as advance:
        report = run_adversary(
            rows,
            args.out,
            seed=args.seed,
            budget_s=args.budget,
            on_mutant=lambda m: advance(m.mutation),
            jobs=jobs,
            map_rows=None if args.ray is None else fanout.ray_map(args.ray, jobs),
        )
    if not quiet:
        print_table(
            "adversarial descriptors by class",
            ["class", "distinct"],
            [[c.id, str(report.by_class.get(c.id, 0))] for c in CLASSES],
        )
    _say(
        quiet,
        f"{report.distinct} distinct descriptors from {len(rows)} positive rows in {report.seconds:.2f} s "
        f"({report.rate:.0f}/s), {len(report.not_failing_closed)} not failing closed, "
        f"{len(report.disagreements)} model/Python disagreements"
        + ("" if report.complete else f"; budget of {args.budget:.0f} s reached, enumeration incomplete"),
    )
    traces_ok = True
    if not args.no_traces:
        with progress_steps(len(TRACE_CLASSES), "adversarial traces") as advance:
            found = generate(args.out, check_bytes, seed=args.seed)
            advance("traces")
        if not quiet:
            print_table(
                "adversarial traces (bounded model checking)",
                ["class", "rule", "outcome", "events"],
                [
                    [e["class"], e["rule"], f"{e['outcome']} ({e['rejected_rule']})", str(len(e["actions"]))]
                    for e in found.written
                ],
            )
        traces_ok = not found.missing_classes
        _say(
            quiet,
            f"{len(found.written)} traces, classes without one: {', '.join(found.missing_classes) or 'none'}",
        )
    summary = {
        "seed": args.seed,
        "complete": report.complete,
        "positive_rows": report.bases,
        "distinct_descriptors": report.distinct,
        "seconds": round(report.seconds, 3),
        "rate_per_second": round(report.rate, 1),
        "not_failing_closed": report.not_failing_closed,
        "disagreements": report.disagreements,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if quiet:
        print_json(summary | {"out": str(args.out)})
    _say(quiet, f"outputs in {args.out}/")
    clean = report.complete and not report.not_failing_closed and not report.disagreements
    return Exit.ok if clean and traces_ok else Exit.not_sound


def _say(quiet: bool, text: str) -> None:
    """A progress line: on stdout, or on stderr when stdout carries JSON."""
    (stderr_console() if quiet else stdout_console()).print(text)


def demo_stage(out: Path) -> str:
    """`kvclaims demo`: the adversary over the shipped descriptors, into OUT/adversary."""
    from kvclaims.refinement import check_bytes
    from kvclaims.solver.adversary import CLASSES, run_adversary
    from kvclaims.solver.parallel import available_cores
    from kvclaims.solver.positives import positive_rows
    from kvclaims.solver.traces import generate

    rows = positive_rows(DESCRIPTORS)
    report = run_adversary(rows, out / "adversary", budget_s=300, jobs=available_cores())
    traces = generate(out / "adversary", check_bytes)
    failures = len(report.not_failing_closed) + len(report.disagreements) + len(traces.missing_classes)
    closed = "all" if not report.not_failing_closed else f"{len(report.not_failing_closed)} NOT"
    targeted = "each" if not traces.missing_classes else f"{len(traces.missing_classes)} classes NOT"
    summary = (
        f"{report.distinct} near-miss descriptors in {len(report.by_class)}/{len(CLASSES)} classes "
        f"from {len(rows)} sound rows ({report.rate:.0f}/s), {closed} failing closed; "
        f"{len(traces.written)} rule-breaking traces found by bounded model checking, {targeted} "
        "rejected by the rule it breaks"
    )
    if failures or not report.complete:
        raise RuntimeError(summary)
    return summary


@click.command(
    "adversary",
    help=__doc__,
    short_help="generate adversarial descriptors and traces (Z3) that must fail closed",
)
@out_option("output folder", run_folder=RUN_FOLDER)
@click.option(
    "--budget", type=float, default=300.0, show_default=True, metavar="SECONDS", help="descriptor search cap"
)
@click.option("--seed", type=int, default=0, show_default=True, metavar="N", help="solver seed")
@descriptors_option("positive rows")
@click.option("--no-traces", is_flag=True, help="descriptors only")
@jobs_option("search positive rows in N processes (default: one per core); the output is the same")
@ray_option("search positive rows as Ray tasks on the cluster at ADDRESS; the output is the same")
@json_option
def command(**options: object) -> int:
    return runs(run)(**options)
