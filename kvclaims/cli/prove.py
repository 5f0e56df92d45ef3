"""Run the named proof obligations (Z3) on the lowering rules and the claim lifecycle.

Without NAME every obligation runs; with `-o DIR`, DIR gets `<name>.json` for each plus
`REPORT.md` (statement, method, verdict, time, z3 version), and the generated table of what
would make each runtime native (`native-upgrades.md` / `.json`, from the descriptors in
`--descriptors`, by default the shipped ones). With NAMEs (exact names, or a prefix ending in
`.` such as `lifecycle.`) only those run and only their JSON is written. Without `-o` nothing
is written. `-o DIR --check` writes nothing and compares with DIR instead (what CI runs).
`--json` prints one JSON line per obligation.

Exit codes: 0 every obligation proved (and, with --check, nothing drifted); 1 an obligation
failed or was unknown, or a committed file drifted; 2 an unknown obligation name.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kvclaims.cli._common import (
    Exit,
    descriptors_option,
    jobs_option,
    json_option,
    note_skipped_descriptor,
    out_option,
    print_json_lines,
    print_table,
    runs,
    stderr_console,
    stdout_console,
)
from kvclaims.spec.errors import InputError, Problem

if TYPE_CHECKING:
    from kvclaims.solver.proofs import ProofObligation
    from kvclaims.solver.upgrades import Upgrade
    from kvclaims.spec.descriptor import Descriptor


def run(args: argparse.Namespace) -> int:
    from kvclaims.solver.obligations import all_obligations, run_named_obligation
    from kvclaims.solver.parallel import OrderedPool, available_cores
    from kvclaims.solver.report import drifted, drifted_files, write_files, write_results

    obligations = all_obligations()
    if args.list:
        if args.json:
            print_json_lines(
                {"name": o.name, "method": o.method, "statement": o.statement} for o in obligations
            )
            return Exit.ok
        print_table(
            "proof obligations",
            ["name", "method", "statement"],
            [[o.name, o.method, o.statement] for o in obligations],
        )
        return Exit.ok
    if args.check and args.out is None:
        raise InputError([Problem("kvclaims prove", "--check needs -o DIR (the results to compare with)")])
    selected = _select(obligations, args.names)
    complete = len(selected) == len(obligations)
    results = []
    # Everything is submitted before the progress bar starts its thread: workers are forked.
    loaded = _descriptors(args.descriptors) if complete and args.out is not None else []
    search = _upgrade_search(args.cache)
    with OrderedPool(args.jobs or available_cores(), [search, run_named_obligation]) as pool:
        searched = pool.map(search, loaded)  # the longest tasks first
        proving = pool.map(run_named_obligation, [o.name for o in selected])
        with progress_steps(len(selected), "proving") as advance:
            for result in proving:
                results.append(result)
                advance(result.name)
        found = [upgrade for plans in searched for upgrade in plans]
    proved = sum(1 for r in results if r.proved)
    if args.json:
        print_json_lines(
            {
                "name": r.name,
                "method": str(r.method),
                "verdict": str(r.verdict),
                "seconds": round(r.seconds, 3),
            }
            for r in results
        )
    else:
        print_table(
            "proof obligations",
            ["name", "method", "verdict", "seconds"],
            [[r.name, r.method, r.verdict, f"{r.seconds:.2f}"] for r in results],
        )
        stdout_console().print(f"{proved}/{len(results)} proved in {sum(r.seconds for r in results):.2f} s")
    code = Exit.ok if proved == len(results) else Exit.not_sound
    if args.out is None:
        return code
    generated = _upgrade_files(found, args.out) if loaded else {}
    if args.check:
        problems = drifted(results, args.out, complete=complete) + drifted_files(generated)
        for problem in problems:
            stderr_console().print(f"[bold red]drift:[/] {problem}")
        if problems:
            stderr_console().print(f"regenerate with: kvclaims prove -o {args.out}")
        return Exit.not_sound if problems else code
    write_results(results, args.out, report=complete)
    write_files(generated)
    extra = (" and REPORT.md" if complete else "") + "".join(f", {p.name}" for p in generated)
    stderr_console().print(f"wrote {len(results)} results{extra} to {args.out}/")
    return code


def _descriptors(descriptors: Path) -> list[tuple[Path, Descriptor]]:
    """The descriptors for the native-upgrade table (none when the folder has none)."""
    from kvclaims.spec.descriptor import descriptor_paths, load_descriptors

    if not descriptors.is_dir() or not descriptor_paths([descriptors]):
        return []
    return load_descriptors([descriptors], on_skip=note_skipped_descriptor)


def _upgrade_search(cache: bool) -> Callable[[tuple[Path, Descriptor]], list[Upgrade]]:
    from kvclaims.solver.upgrade_cache import cached_descriptor_upgrades
    from kvclaims.solver.upgrades import descriptor_upgrades

    return cached_descriptor_upgrades if cache else descriptor_upgrades


def _upgrade_files(found: list[Upgrade], out: Path) -> dict[Path, str]:
    from kvclaims.solver.report import upgrades_files
    from kvclaims.solver.upgrades import upgrades_json, upgrades_markdown

    return upgrades_files(out, upgrades_json(found), upgrades_markdown(found))


def _select(obligations: Sequence[ProofObligation], names: list[str]) -> list[ProofObligation]:
    if not names:
        return list(obligations)
    known = {o.name for o in obligations}
    unknown = [
        n for n in names if n not in known and not (n.endswith(".") and any(k.startswith(n) for k in known))
    ]
    if unknown:
        raise InputError(
            [Problem("<arguments>", f"unknown obligation {name!r} (see --list)") for name in unknown]
        )
    return [
        o
        for o in obligations
        if o.name in names or any(n.endswith(".") and o.name.startswith(n) for n in names)
    ]


@contextmanager
def progress_steps(total: int, label: str) -> Iterator[Callable[[str], None]]:
    """A rich progress bar on a terminal (silent when piped); yields `advance(description)`."""
    console = stderr_console()
    if not console.is_terminal:
        yield lambda description: None
        return
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda description: bar.update(task, advance=1, description=description)


def demo_stage(out: Path) -> str:
    """`kvclaims demo`: run every obligation into OUT/proofs, on every core."""
    from kvclaims.solver.obligations import all_obligations, run_named_obligation
    from kvclaims.solver.parallel import OrderedPool, available_cores
    from kvclaims.solver.report import write_results

    with OrderedPool(available_cores(), [run_named_obligation]) as pool:
        results = list(pool.map(run_named_obligation, [o.name for o in all_obligations()]))
    write_results(results, out / "proofs", report=True)
    proved = sum(1 for r in results if r.proved)
    seconds = sum(r.seconds for r in results)
    by_method: dict[str, int] = {}
    for result in results:
        by_method[result.method.value] = by_method.get(result.method.value, 0) + 1
    methods = ", ".join(f"{count} {method}" for method, count in sorted(by_method.items()))
    summary = f"{proved}/{len(results)} obligations proved in {seconds:.1f} s ({methods})"
    if proved != len(results):
        raise RuntimeError(summary)
    return summary


@click.command(
    "prove",
    help=__doc__,
    short_help="prove the named properties of the lowering rules and the claim lifecycle (Z3)",
)
@click.argument("names", nargs=-1, metavar="[NAME]...")
@out_option("write the results here (or, with --check, compare with them); default: write nothing")
@click.option("--check", is_flag=True, help="compare with -o DIR instead of writing")
@descriptors_option("descriptors for the native-upgrades table")
@click.option("--list", is_flag=True, help="list the obligations and exit")
@jobs_option("run obligations and descriptors' upgrade searches in N processes (default: one per core)")
@click.option(
    "--cache/--no-cache",
    default=True,
    show_default=True,
    help="reuse the native-upgrade search for unchanged descriptors and solver code "
    "(kept in $KVCLAIMS_CACHE_DIR, else the user cache directory)",
)
@json_option
def command(**options: object) -> int:
    return runs(run)(**options)
