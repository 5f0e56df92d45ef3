"""`kvclaims fuzz [--minutes N] [--policy NAME] [--planted-bug]`: fuzz the MicroRuntime.

Runs the Hypothesis state machine `kvclaims.lab.micro_fuzzing.MicroRuntimeMachine` in random
batches until the time is up or an invariant breaks, with a progress bar. Reports which
lifecycle phases and transitions the runtime reached (against the graph derived from the
transition table) and how many rule steps and trace events it executed. On a failure, it
prints the minimal rule sequence Hypothesis shrank it to (shrinking may run past the budget).
`--planted-bug` fuzzes a runtime whose victim exclusion is off by one block, to watch the fuzzer
find it.

Exit 0 when no invariant broke, 1 when one did, 2 on bad options.
"""

from __future__ import annotations

import argparse

from kvclaims.cli._common import Exit, print_table, stdout_console


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fuzz",
        help="fuzz the MicroRuntime with the Hypothesis state machine",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--minutes", type=float, default=1.0, metavar="N", help="time budget (default 1)")
    parser.add_argument("--policy", default="full_arbiter", metavar="NAME", help="runtime policy to fuzz")
    parser.add_argument(
        "--planted-bug", action="store_true", help="fuzz the off-by-one victim-exclusion runtime"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from kvclaims.lab.micro_fuzzing import MicroRuntimeMachine, PlantedBugMachine, fresh_machine, fuzz
    from kvclaims.microruntime.policies import POLICIES
    from kvclaims.spec.errors import InputError, Problem
    from kvclaims.statemachine.graph import all_transitions
    from kvclaims.statemachine.lifecycle import Phase
    from kvclaims.statemachine.requests import REQUEST_TRANSITIONS

    if args.minutes <= 0:
        raise InputError([Problem("kvclaims fuzz", "--minutes must be positive", field="minutes")])
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
    seconds = args.minutes * 60
    progress = Progress(
        TextColumn("[bold]fuzzing[/]"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=stdout_console(),
        transient=False,
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
    print_table(
        "fuzzing coverage",
        ["measure", "value"],
        [
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
        ],
    )
    if report.example:
        stdout_console().print("[bold]minimal failing example[/] (replay these calls on the machine):")
        for line in report.example:
            print(f"    {line}")
    return Exit.not_sound if report.failure else Exit.ok
