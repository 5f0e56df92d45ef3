"""Fuzz the MicroRuntime with the Hypothesis state machine for a time budget.

Runs the Hypothesis state machine `kvclaims.lab.micro_fuzzing.MicroRuntimeMachine` in random
batches until `--budget` seconds are up (`--minutes` is the older spelling) or an invariant
breaks, with a progress bar. Reports which lifecycle phases and transitions the runtime reached
(against the graph derived from the transition table) and how many rule steps and trace events
it executed. On a failure, it prints the minimal rule sequence Hypothesis shrank it to
(shrinking may run past the budget). `--planted-bug` fuzzes a runtime whose victim exclusion is
off by one block, to watch the fuzzer find it.

`--json` prints the coverage as one JSON line. Exit 0 when no invariant broke, 1 when one did, 2
on bad options.
"""

from __future__ import annotations

import argparse

import click

from kvclaims.cli._common import (
    Exit,
    json_option,
    print_json,
    print_table,
    runs,
    stderr_console,
    stdout_console,
)

DEFAULT_SECONDS = 60.0


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from kvclaims.lab.micro_fuzzing import MicroRuntimeMachine, PlantedBugMachine, fresh_machine, fuzz
    from kvclaims.microruntime.policies import POLICIES
    from kvclaims.spec.errors import InputError, Problem
    from kvclaims.statemachine.graph import all_transitions
    from kvclaims.statemachine.lifecycle import Phase
    from kvclaims.statemachine.requests import REQUEST_TRANSITIONS

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
    cov = report.coverage
    possible = all_transitions()
    measures = [
        ("policy", args.policy + (" (planted bug)" if args.planted_bug else "")),
        ("seconds", f"{report.seconds:.1f}"),
        ("examples", str(cov.examples)),
        ("rule steps", str(cov.steps)),
        ("trace events", str(cov.events)),
        ("phases reached", f"{len(cov.phases)}/{len(Phase)}"),
        ("phases missed", ", ".join(p.value for p in Phase if p not in cov.phases) or "none"),
        ("lifecycle transitions reached", f"{len(cov.transitions & possible)}/{len(possible)}"),
        ("request transitions reached", f"{len(cov.request_transitions)}/{len(REQUEST_TRANSITIONS)}"),
        ("result", report.failure or "no invariant broke"),
    ]
    if args.json:
        print_json(dict(measures) | {"minimal_failing_example": list(report.example or [])})
        return Exit.not_sound if report.failure else Exit.ok
    print_table("fuzzing coverage", ["measure", "value"], measures)
    if report.example:
        stdout_console().print("[bold]minimal failing example[/] (replay these calls on the machine):")
        for line in report.example:
            print(f"    {line}")
    return Exit.not_sound if report.failure else Exit.ok


@click.command("fuzz", help=__doc__, short_help="fuzz the MicroRuntime with the Hypothesis state machine")
@click.option("--budget", type=float, metavar="SECONDS", help=f"time budget (default {DEFAULT_SECONDS:.0f})")
@click.option("--minutes", type=float, hidden=True)
@click.option("--policy", default="full_arbiter", show_default=True, metavar="NAME", help="runtime policy")
@click.option("--planted-bug", is_flag=True, help="fuzz the off-by-one victim-exclusion runtime")
@json_option
def command(**options: object) -> int:
    return runs(run)(**options)
