"""Fuzz the MicroRuntime with the Hypothesis state machine for a time budget.

Runs the Hypothesis state machine `kvclaims.lab.micro_fuzzing.MicroRuntimeMachine` in random
batches until `--budget` seconds are up (`--minutes` is the older spelling) or an invariant
breaks, with a progress bar. Reports which lifecycle phases and transitions the runtime reached
(against the graph derived from the transition table) and how many rule steps and trace events
it executed. On a failure, it prints the minimal rule sequence Hypothesis shrank it to
(shrinking may run past the budget). `--planted-bug` fuzzes a runtime whose victim exclusion is
off by one block, to watch the fuzzer find it.

The long profile, `--seeds N`, runs N independent batches of `--examples` examples instead,
Hypothesis seeded with `--first-seed`, `--first-seed`+1, ...: each seed's outcome is the same
wherever it runs, so the seeds fan out to `--jobs` processes or, with `--ray [ADDRESS]`, as Ray
tasks to a cluster (alone: a local cluster of --jobs CPUs), and the per-seed outcomes (in the
JSON, `seeds`) are those of a run in one process.

`--json` prints the coverage as one JSON line. Exit 0 when no invariant broke, 1 when one did, 2
on bad options.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import click

from kvclaims.cli._common import (
    Exit,
    jobs_option,
    json_option,
    print_json,
    print_table,
    ray_option,
    runs,
    stderr_console,
    stdout_console,
)

if TYPE_CHECKING:
    from kvclaims.lab.micro_fuzzing import Coverage

DEFAULT_SECONDS = 60.0


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from kvclaims.lab.micro_fuzzing import MicroRuntimeMachine, PlantedBugMachine, fresh_machine, fuzz
    from kvclaims.microruntime.policies import POLICIES
    from kvclaims.spec.errors import InputError, Problem
    from kvclaims.statemachine.lifecycle import Phase

    seconds = (
        args.budget
        if args.budget is not None
        else (args.minutes * 60 if args.minutes is not None else DEFAULT_SECONDS)
    )
    if seconds <= 0:
        raise InputError([Problem("kvclaims fuzz", "--budget must be positive", field="budget")])
    if args.policy not in POLICIES:
        raise InputError(
            [
                Problem(
                    "kvclaims fuzz",
                    f"unknown policy {args.policy!r}; known: {', '.join(POLICIES)}",
                    field="policy",
                )
            ]
        )
    if args.seeds is not None and (args.budget is not None or args.minutes is not None):
        raise InputError([Problem("kvclaims fuzz", "--seeds runs without a time budget", field="budget")])
    if args.seeds is not None:
        return _run_seeds(args)
    if args.ray is not None:
        raise InputError(
            [Problem("kvclaims fuzz", "--ray runs the long profile: give --seeds N", field="ray")]
        )
    base = PlantedBugMachine if args.planted_bug else MicroRuntimeMachine
    machine = fresh_machine(base, policy=POLICIES[args.policy])
    progress = Progress(
        TextColumn("[bold]fuzzing[/]"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=stderr_console() if args.json else stdout_console(),
        transient=args.json,
    )
    with progress:
        task = progress.add_task("fuzz", total=seconds, status="")

        def on_batch(report) -> None:  # type: ignore[no-untyped-def]
            cov = report.coverage
            progress.update(
                task,
                completed=min(report.seconds, seconds),
                status=f"{cov.examples} examples, {cov.steps} steps, {len(cov.phases)}/{len(Phase)} phases",
            )

        report = fuzz(machine, seconds=seconds, on_batch=on_batch)
    return _print_coverage(args, report.coverage, report.seconds, report.failure, report.example, {})


def _run_seeds(args: argparse.Namespace) -> int:
    """The long profile: `--seeds` seeded batches, fanned out, outcomes in seed order."""
    import time

    from kvclaims.lab.micro_fuzzing import SeededBatch, merged_coverage
    from kvclaims.refinement import fanout
    from kvclaims.solver.parallel import available_cores

    started = time.monotonic()
    work = SeededBatch(args.policy, args.planted_bug, args.examples)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = args.jobs or available_cores()
    outcomes = list(fanout.stream(work, seeds, jobs=jobs, ray_address=args.ray))
    first = next((o for o in outcomes if o.failure is not None), None)
    return _print_coverage(
        args,
        merged_coverage(outcomes),
        time.monotonic() - started,
        None if first is None else f"seed {first.seed}: {first.failure}",
        [] if first is None else first.example,
        {"seeds": [o.to_json() for o in outcomes]},
    )


def _print_coverage(
    args: argparse.Namespace,
    cov: Coverage,
    seconds: float,
    failure: str | None,
    example: list[str],
    extra: dict[str, Any],
) -> int:
    from kvclaims.statemachine.graph import all_transitions
    from kvclaims.statemachine.lifecycle import Phase
    from kvclaims.statemachine.requests import REQUEST_TRANSITIONS

    possible = all_transitions()
    measures = [
        ("policy", args.policy + (" (planted bug)" if args.planted_bug else "")),
        ("seconds", f"{seconds:.1f}"),
        ("examples", str(cov.examples)),
        ("rule steps", str(cov.steps)),
        ("trace events", str(cov.events)),
        ("phases reached", f"{len(cov.phases)}/{len(Phase)}"),
        ("phases missed", ", ".join(p.value for p in Phase if p not in cov.phases) or "none"),
        ("lifecycle transitions reached", f"{len(cov.transitions & possible)}/{len(possible)}"),
        ("request transitions reached", f"{len(cov.request_transitions)}/{len(REQUEST_TRANSITIONS)}"),
        ("result", failure or "no invariant broke"),
    ]
    if args.json:
        print_json(dict(measures) | {"minimal_failing_example": example} | extra)
        return Exit.not_sound if failure else Exit.ok
    print_table("fuzzing coverage", ["measure", "value"], measures)
    if example:
        stdout_console().print("[bold]minimal failing example[/] (replay these calls on the machine):")
        for line in example:
            print(f"    {line}")
    return Exit.not_sound if failure else Exit.ok


@click.command("fuzz", help=__doc__, short_help="fuzz the MicroRuntime with the Hypothesis state machine")
@click.option("--budget", type=float, metavar="SECONDS", help=f"time budget (default {DEFAULT_SECONDS:.0f})")
@click.option("--minutes", type=float, hidden=True)
@click.option("--policy", default="full_arbiter", show_default=True, metavar="NAME", help="runtime policy")
@click.option("--planted-bug", is_flag=True, help="fuzz the off-by-one victim-exclusion runtime")
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    metavar="N",
    help="the long profile: N seeded batches, no time budget",
)
@click.option(
    "--first-seed", type=int, default=0, show_default=True, metavar="S", help="the first batch's seed"
)
@click.option(
    "--examples",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    metavar="E",
    help="examples per seed",
)
@jobs_option("run seeds in N processes (default: one per core); the outcomes are the same")
@ray_option("run seeds as Ray tasks on the cluster at ADDRESS; the outcomes are the same")
@json_option
def command(**options: object) -> int:
    return runs(run)(**options)
