"""Check recorded traces against the resident-claim model (refinement), with counterexamples.

TRACE is a trace file, a directory (searched recursively for *.jsonl, *.ndjson, *.msgpack,
*.kvevents), or `-` for a trace on stdin. `--format auto` (the default) recognises kvclaims
trace v1 and the foreign vocabularies: blockpool, offload-hook, pydev-connector, vllm-kv-events
(which needs `--registry`, an external claim registry). A rejection prints its counterexample
with the surrounding events; several traces print one summary table (in file order) and the
totals by outcome. Several traces are checked in parallel, one process per core: `--jobs N` sets
the number of processes, `--jobs 1` checks them one after another; the verdicts are the same.
`--json` prints one JSON line per trace (the same shape for one trace or many). Each suffix may
also be gzip-compressed (*.gz). `--strict` makes a field outside trace v1 invalid input instead
of context kept unchecked (a misspelt field is invalid either way).

A kvclaims-v1 trace is complete only when it ends with `trace_closed` (its writer closed it);
without that end it is truncated and at best inconclusive. `--open` judges such a file as an
open prefix (a live trace, or one cut on purpose), as if it ended where it stops.

`--evidence-out FILE` writes the anchored evidence items (YAML, or JSON for *.json) that the
traces supply, ready to cite in a runtime descriptor; it writes nothing unless every trace is
accepted.

`--fleet ROUTER` checks a fleet instead: TRACE... are the engines' own streams (each header
names its `engine_id`), ROUTER the routing hook's stream; the engine streams are checked one by
one, then the routing rules per claim and request across them (no order between streams is
assumed). Two streams of one engine (a restart), a truncated stream or a request the chosen
engine's stream never mentions make the fleet inconclusive.

Exit codes (the worst over all traces): 0 accepted, 1 rejected, 2 invalid input, 3 inconclusive.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kvclaims.cli._common import (
    PathType,
    json_option,
    print_json_lines,
    print_table,
    runs,
    stderr_console,
    stdout_console,
)
from kvclaims.refinement.sources import AUTO, FORMATS
from kvclaims.spec.errors import InputError, Problem

if TYPE_CHECKING:
    from kvclaims.refinement.verdict import TraceVerdict

STDIN = Path("-")
"""The trace argument that means: read the trace from standard input."""

TRACE_SUFFIXES = (".jsonl", ".ndjson", ".msgpack", ".kvevents")
PROGRESS_MIN_BYTES = 8 * 1024 * 1024
"""Files at least this large get a progress bar (on a terminal only)."""

PROGRESS_MIN_TRACES = 8
"""Runs of at least this many traces get a progress bar over the traces (on a terminal only)."""

EXIT_CODES = {"accepted": 0, "rejected": 1, "invalid": 2, "inconclusive": 3}
"""The exit code of each outcome; a run exits with the code of its worst outcome."""

OUTCOME_STYLES: dict[str, str] = {
    "accepted": "bold green",
    "rejected": "bold red",
    "invalid": "magenta",
    "inconclusive": "yellow",
}


def trace_files(targets: list[Path]) -> list[Path]:
    """Expand directories into their trace files (sorted); files are kept as given."""
    found: list[Path] = []
    for target in targets:
        if target == STDIN:
            found.append(target)
        elif target.is_dir():
            found.extend(sorted(p for p in target.rglob("*") if p.is_file() and _is_trace_name(p)))
        else:
            found.append(target)
    return found


def _is_trace_name(path: Path) -> bool:
    return Path(path.name.removesuffix(".gz")).suffix in TRACE_SUFFIXES


def _say_skipped(targets: list[Path]) -> None:
    """Name the files a directory held that are not checked (their suffix is not a trace's)."""
    skipped = [
        p
        for target in targets
        if target != STDIN and target.is_dir()
        for p in sorted(target.rglob("*"))
        if p.is_file() and not _is_trace_name(p)
    ]
    if skipped:
        names = ", ".join(str(p) for p in skipped[:5]) + (", ..." if len(skipped) > 5 else "")
        stderr_console().print(
            f"skipped {len(skipped)} files that are not traces (not {', '.join(TRACE_SUFFIXES)}): {names}"
        )


def run(args: argparse.Namespace) -> int:
    from kvclaims.refinement.verdict import Outcome

    if args.fleet is not None:
        return _run_fleet(args)
    files = trace_files(args.traces)
    if STDIN in files and args.evidence_out is not None:
        raise InputError(
            [Problem("-", "--evidence-out needs trace files: an evidence item cites its trace's path")]
        )
    _say_skipped(args.traces)
    if not files:
        stderr_console().print("[bold red]error:[/] no trace files found")
        return EXIT_CODES["invalid"]
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    with _count_progress(len(files)) as advance:
        verdicts = check_files(
            files,
            format=args.format,
            registry=args.registry,
            jobs=jobs,
            on_done=advance,
            strict=args.strict,
            open_prefix=args.open,
        )
    if args.json:
        print_json_lines(v.to_json() for v in verdicts)
    elif len(verdicts) == 1:
        print_one(verdicts[0])
    else:
        _print_summary(verdicts)
    worst = Outcome.worst([v.outcome for v in verdicts])
    if args.evidence_out is not None:
        if worst is not Outcome.accepted:
            stderr_console().print(
                "[bold red]no evidence written:[/] only accepted traces are evidence "
                f"(worst outcome: {worst})"
            )
        else:
            written = _write_evidence(args.evidence_out, files, verdicts)
            stderr_console().print(f"{written} evidence items written to {args.evidence_out}")
    return EXIT_CODES[worst.value]


_NOT_WITH_FLEET = ("registry", "open", "strict", "evidence_out")


def _run_fleet(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from kvclaims.refinement.fleet import check_fleet

    given = [f"--{name.replace('_', '-')}" for name in _NOT_WITH_FLEET if getattr(args, name)]
    if given or args.format != AUTO:
        raise InputError([Problem("--fleet", f"not with {', '.join(given) or '--format'}")])
    files = trace_files(args.traces)
    if STDIN in files or not files:
        raise InputError([Problem("--fleet", "needs the engines' trace files")])
    verdict = check_fleet(args.fleet, files)
    if args.json:
        print_json_lines([verdict.to_json()])
    else:
        console = stdout_console()
        outcome = verdict.outcome.value
        console.print(f"[{OUTCOME_STYLES[outcome]}]{outcome}[/] fleet: {escape(verdict.reason)}")
        for engine in verdict.engines:
            console.print(
                escape(f"  engine {engine.engine_id or '?'} {engine.path}: {engine.verdict.reason}")
            )
        routes = ", ".join(f"{count} {name}" for name, count in verdict.routes.items())
        console.print(escape(f"  router {verdict.router}: routed reuse {routes}"))
    return EXIT_CODES[verdict.outcome.value]


def check_files(
    files: list[Path],
    *,
    format: str = "auto",
    registry: Path | None = None,
    jobs: int = 1,
    on_done: Callable[[], None] | None = None,
    strict: bool = False,
    open_prefix: bool = False,
) -> list[TraceVerdict]:
    """The verdict of each file, in the order of `files`, checked by `min(jobs, len(files))`
    worker processes (in this process when that is 1). `on_done` is called once per finished
    trace, in completion order. A bad registry raises `InputError` as a sequential run would."""
    workers = min(jobs, len(files))
    if workers <= 1 or STDIN in files:
        verdicts: list[TraceVerdict] = []
        for path in files:
            # a byte bar per large file only when no bar over the traces is live (rich shows one)
            with _progress(path, alone=on_done is None) as progress:
                verdicts.append(_check_one(path, format, registry, strict, open_prefix, progress))
            if on_done is not None:
                on_done()
        return verdicts
    found: list[Any] = [None] * len(files)  # every slot is filled before it is returned
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {
            pool.submit(_check_in_worker, path, format, registry, strict, open_prefix): i
            for i, path in enumerate(files)
        }
        try:
            for future in as_completed(futures):
                result = future.result()
                if isinstance(result, list):
                    raise InputError(result)
                found[futures[future]] = result
                if on_done is not None:
                    on_done()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return found


def _check_one(
    path: Path, format: str, registry: Path | None, strict: bool, open_prefix: bool, progress: Any = None
) -> TraceVerdict:
    from kvclaims.refinement.api import check_source, check_trace

    if path != STDIN:
        return check_trace(
            path, format=format, registry=registry, progress=progress, strict=strict, open=open_prefix
        )
    # the checker reads a trace more than once (format detection, the minimal prefix): stdin is
    # spooled to a temporary file, streamed so that memory stays flat
    with tempfile.TemporaryFile(prefix="kvclaims-stdin-") as spool:
        shutil.copyfileobj(sys.stdin.buffer, spool)
        return check_source(
            lambda: _reopen(spool),
            name="<stdin>",
            format=format,
            registry=registry,
            progress=progress,
            strict=strict,
            open=open_prefix,
        )


def _reopen(spool: Any) -> Any:
    """A fresh reader over the spooled stdin that leaves the spool itself open."""
    spool.seek(0)
    return open(os.dup(spool.fileno()), "rb", closefd=True)


def _check_in_worker(
    path: Path, format: str, registry: Path | None, strict: bool, open_prefix: bool
) -> TraceVerdict | list[Any]:
    """A trace's verdict, or the problems of the `InputError` it raised: an InputError does not
    survive pickling (its constructor takes problems, its args hold text), its problems do."""
    try:
        return _check_one(path, format, registry, strict, open_prefix)
    except InputError as error:
        return list(error.problems)


class _count_progress:
    """A rich progress bar over the traces of a long run on a terminal; otherwise nothing.
    Entering it gives the per-trace callback (None when there is no bar)."""

    def __init__(self, total: int) -> None:
        self._total = total
        self._bar: Any = None

    def __enter__(self) -> Callable[[], None] | None:
        console = stderr_console()
        if not console.is_terminal or self._total < PROGRESS_MIN_TRACES:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self._bar = Progress(
            "[bold]checking traces[/]",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self._bar.start()
        task = self._bar.add_task("traces", total=self._total)
        return lambda: self._bar.advance(task)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


class _progress:
    """A rich progress bar for a large file on a terminal (unless another bar is live, `alone`
    False); otherwise nothing."""

    def __init__(self, path: Path, *, alone: bool = True) -> None:
        self._path = path
        self._alone = alone
        self._bar: Any = None

    def __enter__(self) -> Any:
        console = stderr_console()
        try:
            size = self._path.stat().st_size
        except OSError:
            return None
        if not self._alone or not console.is_terminal or size < PROGRESS_MIN_BYTES:
            return None
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._bar = Progress(
            "[bold]checking[/] " + self._path.name,
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self._bar.start()
        task = self._bar.add_task("check", total=size)
        return lambda done: self._bar.update(task, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def print_one(verdict: Any, console: Any = None) -> None:
    """The shared plain-text rendering (`kvclaims.refinement.rendering`), the outcome coloured."""
    from rich.markup import escape

    from kvclaims.refinement.rendering import OFFENDING_MARKER, verdict_lines

    console = console or stdout_console()
    outcome = verdict.outcome.value
    first, *rest = verdict_lines(verdict)
    console.print(f"[{OUTCOME_STYLES[outcome]}]{outcome}[/]{escape(first.removeprefix(outcome))}")
    for line in rest:
        marked = line.startswith(f"  {OFFENDING_MARKER} ")
        console.print(f"[bold red]{escape(line)}[/]" if marked else escape(line))


def _print_summary(verdicts: list[Any]) -> None:
    print_table(
        "refinement verdicts",
        ["trace", "format", "outcome", "rule / class", "events", "reason"],
        [
            [
                v.path,
                v.format,
                v.outcome.value,
                (v.rule.value if v.rule else (v.error_class.value if v.error_class else "")),
                str(v.events),
                v.reason,
            ]
            for v in verdicts
        ],
        keys=("trace", "outcome"),
    )
    from kvclaims.refinement.verdict import Outcome

    totals = Counter(v.outcome for v in verdicts)
    counted = ", ".join(
        f"[{OUTCOME_STYLES[outcome.value]}]{totals[outcome]} {outcome.value}[/]"
        for outcome in Outcome
        if totals[outcome]
    )
    stderr_console().print(f"{len(verdicts)} traces: {counted}")
    for verdict in verdicts:
        if verdict.outcome is Outcome.rejected:  # the table has one line; here is its counterexample
            print_one(verdict, stderr_console())


def _write_evidence(out: Path, files: list[Path], verdicts: list[Any]) -> int:
    from kvclaims.refinement.evidence import evidence_items

    items = [
        item.model_dump(mode="json", exclude_defaults=True)
        for path, verdict in zip(files, verdicts, strict=True)
        for item in evidence_items(verdict, path, relative_to=out.parent)
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".json":
        out.write_text(json.dumps({"evidence": items}, indent=2) + "\n", encoding="utf-8")
    else:
        import yaml

        out.write_text(yaml.safe_dump({"evidence": items}, sort_keys=False), encoding="utf-8")
    return len(items)


@click.command(
    "check",
    help=__doc__,
    short_help="check recorded traces against the model (refinement), with counterexamples",
)
@click.argument("traces", nargs=-1, required=True, type=PathType, metavar="TRACE...")
@click.option(
    "--format",
    default=AUTO,
    show_default=True,
    type=click.Choice([AUTO, *FORMATS]),
    help="trace format",
)
@click.option("--registry", type=PathType, metavar="FILE", help="claim registry for vllm-kv-events")
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    metavar="N",
    help="check traces in N processes (default: one per core; 1 = sequential)",
)
@json_option
@click.option(
    "--open",
    is_flag=True,
    help="judge kvclaims-v1 traces without their trace_closed end as open prefixes "
    "(default: such a trace is truncated, inconclusive)",
)
@click.option("--strict", is_flag=True, help="refuse fields outside trace v1 (default: keep as context)")
@click.option("--evidence-out", type=PathType, metavar="FILE", help="write evidence items (accepted only)")
@click.option(
    "--fleet",
    type=PathType,
    metavar="ROUTER",
    help="check a fleet: ROUTER is the routing hook's stream, TRACE... the engines' streams",
)
def command(**options: object) -> int:
    return runs(run)(**options)
