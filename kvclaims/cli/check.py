"""`kvclaims check TRACE... [--format F] [--registry FILE] [--jobs N] [--open] [--json]
[--evidence-out FILE]`:
does each recorded trace refine the resident-claim model?

TRACE is a trace file or a directory (searched recursively for *.jsonl, *.ndjson, *.msgpack,
*.kvevents). `--format auto` (the default) recognises kvclaims trace v1 and the foreign
vocabularies: blockpool, offload-hook, pydev-connector, vllm-kv-events (which needs
`--registry`, an external claim registry). A rejection prints its counterexample with the
surrounding events; several traces print one summary table (in file order) and the totals by
outcome. Several traces are checked in parallel, one process per core: `--jobs N` sets the
number of processes, `--jobs 1` checks them one after another; the verdicts are the same.

A kvclaims-v1 trace is complete only when it ends with `trace_closed` (its writer closed it);
without that end it is truncated and at best inconclusive. `--open` judges such a file as an
open prefix (a live trace, or one cut on purpose), as if it ended where it stops.

`--evidence-out FILE` writes the anchored evidence items (YAML, or JSON for *.json) that the
traces supply, ready to cite in a runtime descriptor; it writes nothing unless every trace is
accepted.

Exit codes (the worst over all traces): 0 accepted, 1 rejected, 2 invalid input, 3 inconclusive.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvclaims.cli._common import print_json, print_table, stderr_console, stdout_console
from kvclaims.spec.errors import InputError

if TYPE_CHECKING:
    from kvclaims.refinement.verdict import TraceVerdict

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


def register(subparsers: argparse._SubParsersAction) -> None:
    from kvclaims.refinement.sources import AUTO, FORMATS

    parser = subparsers.add_parser(
        "check",
        help="check recorded traces against the model (refinement), with counterexamples",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("traces", nargs="+", metavar="TRACE", type=Path, help="trace files or directories")
    parser.add_argument(
        "--format", default=AUTO, choices=[AUTO, *FORMATS], help="trace format (default: auto)"
    )
    parser.add_argument("--registry", type=Path, metavar="FILE", help="claim registry for vllm-kv-events")
    parser.add_argument(
        "--jobs",
        type=_positive,
        default=None,
        metavar="N",
        help="check traces in N processes (default: one per core; 1 = sequential)",
    )
    parser.add_argument(
        "--open",
        action="store_true",
        help="judge kvclaims-v1 traces without their trace_closed end as open prefixes "
        "(default: such a trace is truncated, inconclusive)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON verdict per trace")
    parser.add_argument(
        "--evidence-out", type=Path, metavar="FILE", help="write evidence items (accepted only)"
    )
    parser.set_defaults(run=run)


def trace_files(targets: list[Path]) -> list[Path]:
    """Expand directories into their trace files (sorted); files are kept as given."""
    found: list[Path] = []
    for target in targets:
        if target.is_dir():
            found.extend(sorted(p for p in target.rglob("*") if p.is_file() and p.suffix in TRACE_SUFFIXES))
        else:
            found.append(target)
    return found


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    from kvclaims.refinement.verdict import Outcome

    files = trace_files(args.traces)
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
            judge_open=args.open,
        )
    if args.json:
        print_json([v.to_json() for v in verdicts] if len(verdicts) > 1 else verdicts[0].to_json())
    elif len(verdicts) == 1:
        _print_one(verdicts[0])
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


def check_files(
    files: list[Path],
    *,
    format: str = "auto",
    registry: Path | None = None,
    jobs: int = 1,
    on_done: Callable[[], None] | None = None,
    judge_open: bool = False,
) -> list[TraceVerdict]:
    """The verdict of each file, in the order of `files`, checked by `min(jobs, len(files))`
    worker processes (in this process when that is 1). `on_done` is called once per finished
    trace, in completion order. A bad registry raises `InputError` as a sequential run would."""
    workers = min(jobs, len(files))
    if workers <= 1:
        verdicts: list[TraceVerdict] = []
        for path in files:
            # a byte bar per large file only when no bar over the traces is live (rich shows one)
            with _progress(path, alone=on_done is None) as progress:
                verdicts.append(_check_one(path, format, registry, judge_open, progress))
            if on_done is not None:
                on_done()
        return verdicts
    found: list[Any] = [None] * len(files)  # every slot is filled before it is returned
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {
            pool.submit(_check_in_worker, path, format, registry, judge_open): i
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
    path: Path, format: str, registry: Path | None, judge_open: bool, progress: Any = None
) -> TraceVerdict:
    from kvclaims.refinement.api import check_trace

    return check_trace(path, format=format, registry=registry, progress=progress, open=judge_open)


def _check_in_worker(
    path: Path, format: str, registry: Path | None, judge_open: bool
) -> TraceVerdict | list[Any]:
    """A trace's verdict, or the problems of the `InputError` it raised: an InputError does not
    survive pickling (its constructor takes problems, its args hold text), its problems do."""
    try:
        return _check_one(path, format, registry, judge_open)
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


def _print_one(verdict: Any) -> None:
    """The shared plain-text rendering (`kvclaims.refinement.rendering`), the outcome coloured."""
    from rich.markup import escape

    from kvclaims.refinement.rendering import OFFENDING_MARKER, verdict_lines

    console = stdout_console()
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
    )
    from kvclaims.refinement.verdict import Outcome

    totals = Counter(v.outcome for v in verdicts)
    counted = ", ".join(
        f"[{OUTCOME_STYLES[outcome.value]}]{totals[outcome]} {outcome.value}[/]"
        for outcome in Outcome
        if totals[outcome]
    )
    stderr_console().print(f"{len(verdicts)} traces: {counted}")


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
