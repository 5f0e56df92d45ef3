"""`kvclaims prove [NAME...] [--out DIR] [--check] [--list]`: run the named proof obligations.

Without NAME every obligation runs and DIR (default `proofs`) gets `<name>.json` for each plus
`REPORT.md` (statement, method, verdict, time, z3 version), and the generated table of what
would make each shipped runtime native (`native-upgrades.md` / `.json`, from the descriptors
in `--descriptors`). With NAMEs (exact names, or a prefix ending in `.` such as `lifecycle.`)
only those run and only their JSON is written. `--check` writes nothing and compares with DIR
instead (what CI runs).

Exit codes: 0 every obligation proved (and, with --check, nothing drifted); 1 an obligation
failed or was unknown, or a committed file drifted; 2 an unknown obligation name.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from kvclaims.cli._common import Exit, print_table, stderr_console, stdout_console
from kvclaims.spec.errors import InputError, Problem

if TYPE_CHECKING:
    from kvclaims.solver.proofs import ProofObligation


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "prove",
        help="prove the named properties of the lowering rules and the claim lifecycle (Z3)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="obligations to run (default: all)")
    parser.add_argument("--out", type=Path, default=Path("proofs"), metavar="DIR", help="default: proofs")
    parser.add_argument("--check", action="store_true", help="compare with DIR instead of writing")
    parser.add_argument(
        "--descriptors", type=Path, default=Path("descriptors"), metavar="DIR", help="default: descriptors"
    )
    parser.add_argument("--list", action="store_true", help="list the obligations and exit")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvclaims.solver.obligations import all_obligations
    from kvclaims.solver.proofs import run_obligation
    from kvclaims.solver.report import drifted, drifted_files, write_files, write_results

    obligations = all_obligations()
    if args.list:
        print_table(
            "proof obligations",
            ["name", "method", "statement"],
            [[o.name, o.method, o.statement] for o in obligations],
        )
        return Exit.ok
    selected = _select(obligations, args.names)
    complete = len(selected) == len(obligations)
    results = []
    with progress_steps(len(selected), "proving") as advance:
        for obligation in selected:
            results.append(run_obligation(obligation))
            advance(obligation.name)
    print_table(
        "proof obligations",
        ["name", "method", "verdict", "seconds"],
        [[r.name, r.method, r.verdict, f"{r.seconds:.2f}"] for r in results],
    )
    console = stdout_console()
    proved = sum(1 for r in results if r.proved)
    console.print(f"{proved}/{len(results)} proved in {sum(r.seconds for r in results):.2f} s")
    generated = _upgrades(args.descriptors, args.out) if complete else {}
    if args.check:
        problems = drifted(results, args.out, complete=complete) + drifted_files(generated)
        for problem in problems:
            stderr_console().print(f"[bold red]drift:[/] {problem}")
        if problems:
            stderr_console().print("regenerate with: kvclaims prove --out " + str(args.out))
        return Exit.ok if proved == len(results) and not problems else Exit.not_sound
    write_results(results, args.out, report=complete)
    write_files(generated)
    extra = " and REPORT.md, native-upgrades.md/.json" if complete else ""
    console.print(f"wrote {len(results)} results{extra} to {args.out}/")
    return Exit.ok if proved == len(results) else Exit.not_sound


def _upgrades(descriptors: Path, out: Path) -> dict[Path, str]:
    """The native-upgrade table for the descriptors in `descriptors` (none when it is empty)."""
    from kvclaims.solver.report import upgrades_files
    from kvclaims.solver.upgrades import upgrades, upgrades_json, upgrades_markdown
    from kvclaims.spec.descriptor import descriptor_paths, load_descriptors

    if not descriptors.is_dir() or not descriptor_paths([descriptors]):
        return {}
    found = upgrades(load_descriptors([descriptors]))
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
    """`kvclaims demo`: run every obligation into OUT/proofs and compare with the committed ones."""
    from kvclaims.solver.obligations import all_obligations
    from kvclaims.solver.proofs import run_obligation
    from kvclaims.solver.report import drifted, write_results

    committed = Path(__file__).resolve().parents[2] / "proofs"
    results = [run_obligation(o) for o in all_obligations()]
    write_results(results, out / "proofs", report=True)
    proved = sum(1 for r in results if r.proved)
    seconds = sum(r.seconds for r in results)
    drift = drifted(results, committed, complete=True) if committed.is_dir() else ["no committed proofs/"]
    by_method: dict[str, int] = {}
    for result in results:
        by_method[result.method.value] = by_method.get(result.method.value, 0) + 1
    methods = ", ".join(f"{count} {method}" for method, count in sorted(by_method.items()))
    status = "same as the committed proofs/" if not drift else f"DRIFT from proofs/: {'; '.join(drift)}"
    if proved != len(results) or drift:
        raise RuntimeError(f"{proved}/{len(results)} proved; {status}")
    return f"{proved}/{len(results)} obligations proved in {seconds:.1f} s ({methods}); {status}"
