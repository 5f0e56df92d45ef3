"""Check recorded traces against the resident-claim model (refinement), with counterexamples.

TRACE is a trace file, a directory (searched recursively for *.jsonl, *.ndjson, *.msgpack,
*.kvevents), or `-` for a trace on stdin. `--format auto` (the default) recognises kvclaims
trace v1 and the foreign vocabularies: blockpool, offload-hook, pydev-connector, and the KV
block events of vLLM, TensorRT-LLM and SGLang (`vllm-kv-events`, `trtllm-kv-events`,
`sglang-kv-events`: each needs `--registry`, an external claim registry; SGLang's frames look
like vLLM's, so name `--format sglang-kv-events`). A KV-event capture found without
`--registry` gets its own `inconclusive` verdict and the other traces are still judged; naming
a KV-event `--format` without `--registry` is bad input. A rejection prints its counterexample
with the surrounding events; several traces print one summary table (in file order) and the
totals by outcome. Several traces are checked in parallel, one process per core: `--jobs N` sets
the number of processes, `--jobs 1` checks them one after another; the verdicts are the same.
`--ray ADDRESS` checks each trace as a Ray task on that cluster (`--ray` alone: a local cluster
of `--jobs` CPUs started for the run), verdicts streamed back in file order, the same verdicts;
every node must see the traces at the same paths and run the same kvclaims (checked).
`--json` prints one JSON line per trace (the same shape for one trace or many). Each suffix may
also be gzip-compressed (*.gz). `--strict` makes a field outside trace v1 invalid input instead
of context kept unchecked (a misspelt field is invalid either way).

A kvclaims-v1 trace is complete only when it ends with `trace_closed` (its writer closed it);
without that end it is truncated and at best inconclusive. `--open` judges such a file as an
open prefix (a live trace, or one cut on purpose), as if it ended where it stops.

`--evidence-out FILE` writes the anchored evidence items (YAML, or JSON for *.json) that the
traces supply, ready to cite in a runtime descriptor; it writes nothing unless every trace is
accepted. A KV-event capture's anchors also name its format and `--registry` (path and
sha256), so whoever re-checks the descriptor's evidence reads the capture as it was read here.

`--fleet ROUTER` checks a fleet instead: TRACE... are the engines' own streams (each header
names its `engine_id`), ROUTER the routing hook's stream; the engine streams are checked one by
one, then the routing rules per claim and request across them (no order between streams is
assumed). Two streams of one engine (a restart), a truncated stream or a request the chosen
engine's stream never mentions make the fleet inconclusive. `--router-format
dynamo-active-sequences` reads ROUTER as NVIDIA Dynamo's KV router decisions (its
`ActiveSequenceEvent` lines) instead, with `--router-claims FILE` (a JSON object: request id ->
claim id) naming the claim each routed request reuses.

Exit codes (the worst over all traces): 0 accepted, 1 rejected, 2 invalid input, 3 inconclusive.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvclaims.cli._output import is_terminal, print_json_lines, print_table, stderr_console, stdout_console
from kvclaims.refinement import fanout
from kvclaims.refinement.sources import AUTO, FORMATS, ROUTER_FORMAT, ROUTER_FORMATS
from kvclaims.spec.errors import InputError, Problem
from kvclaims.spec.tables import KV_EVENT_FORMATS

if TYPE_CHECKING:
    from kvclaims.refinement.verdict import TraceVerdict

STDIN = Path("-")
"""The trace argument that means: read the trace from standard input."""

TRACE_SUFFIXES = (".jsonl", ".ndjson", ".msgpack", ".kvevents")
PROGRESS_MIN_BYTES = 8 * 1024 * 1024
"""Files at least this large get a progress bar (on a terminal only)."""

REFRESH_SECONDS = 0.1
"""How often a file's progress bar is redrawn (by the check itself: the bar runs no thread)."""

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
            found.extend(p for p in _walk(target) if _is_trace_name(p))
        else:
            found.append(target)
    return found


SKIPPED_DIRECTORIES = frozenset(
    {
        ".git",
        ".hypothesis",
        ".pytest_cache",
        ".ruff_cache",
        ".mypy_cache",
        "__pycache__",
        ".venv",
        "node_modules",
    }
)
"""Tool caches and metadata a directory walk never enters (a trace is never kept there)."""


def _walk(directory: Path) -> list[Path]:
    """The files under `directory` (sorted), never entering `SKIPPED_DIRECTORIES`."""
    found: list[Path] = []
    for root, directories, files in os.walk(directory):
        directories[:] = [d for d in directories if d not in SKIPPED_DIRECTORIES]
        found.extend(Path(root, name) for name in files if Path(root, name).is_file())
    return sorted(found)


def _is_trace_name(path: Path) -> bool:
    return Path(path.name.removesuffix(".gz")).suffix in TRACE_SUFFIXES


def _say_skipped(targets: list[Path]) -> None:
    """Name the files a directory held that are not checked (their suffix is not a trace's)."""
    skipped = [
        p
        for target in targets
        if target != STDIN and target.is_dir()
        for p in _walk(target)
        if not _is_trace_name(p)
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
    if args.router_claims is not None or args.router_format != ROUTER_FORMAT:
        raise InputError([Problem("--router-format", "only with --fleet")])
    files = trace_files(args.traces)
    if STDIN in files and args.evidence_out is not None:
        raise InputError(
            [Problem("-", "--evidence-out needs trace files: an evidence item cites its trace's path")]
        )
    if args.open and args.evidence_out is not None:
        raise InputError(
            [Problem("--open", "--evidence-out needs closed traces: an open prefix is evidence of nothing")]
        )
    if args.format in KV_EVENT_FORMATS and args.registry is None:
        # named for the whole run, so no trace of it could be judged: say so before reading any
        needs = f"--format {args.format} captures need a claim registry (--registry FILE)"
        raise InputError([Problem("--registry", needs)])
    _say_skipped(args.traces)
    if not files:
        stderr_console().print("[bold red]error:[/] no trace files found")
        return EXIT_CODES["invalid"]
    if args.ray not in (None, fanout.LOCAL) and Path(args.ray).exists():
        raise InputError(
            [
                Problem(
                    "--ray", f"ADDRESS {args.ray} is a path: put --ray after the traces, or give an address"
                )
            ]
        )
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    options = CheckOptions(args.format, args.registry, args.strict, args.open)
    verdicts: list[TraceVerdict] = []
    with _count_progress(len(files)) as advance:
        for verdict in stream_verdicts(files, options, jobs=jobs, on_done=advance, ray_address=args.ray):
            verdicts.append(verdict)
            if args.json:  # streamed: each line as soon as its trace and those before it are done
                print_json_lines([verdict.to_json()])
                sys.stdout.flush()
    if not args.json:
        if len(verdicts) == 1:
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
            written = _write_evidence(args.evidence_out, files, verdicts, args.registry)
            stderr_console().print(f"{written} evidence items written to {args.evidence_out}")
    return EXIT_CODES[worst.value]


@dataclass(frozen=True)
class CheckOptions:
    """How every trace of a run is checked (sent with each unit of work to where it runs)."""

    format: str = AUTO
    registry: Path | None = None
    strict: bool = False
    open_prefix: bool = False


_NOT_WITH_FLEET = ("registry", "open", "strict", "evidence_out", "ray")


def _run_fleet(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from kvclaims.refinement.fleet import check_fleet

    given = [f"--{name.replace('_', '-')}" for name in _NOT_WITH_FLEET if getattr(args, name)]
    if args.router_claims is not None and args.router_format == ROUTER_FORMAT:
        given.append("--router-claims")
    if given or args.format != AUTO:
        raise InputError([Problem("--fleet", f"not with {', '.join(given) or '--format'}")])
    files = trace_files(args.traces)
    if STDIN in files or not files:
        raise InputError([Problem("--fleet", "needs the engines' trace files")])
    verdict = check_fleet(args.fleet, files, router_format=args.router_format, claims=args.router_claims)
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
        for note in verdict.notes:
            console.print(escape(f"  note: {note}"))
    return EXIT_CODES[verdict.outcome.value]


def check_files(
    files: list[Path],
    *,
    format: str = AUTO,
    registry: Path | None = None,
    jobs: int = 1,
    on_done: Callable[[], None] | None = None,
    strict: bool = False,
    open_prefix: bool = False,
    ray_address: str | None = None,
) -> list[TraceVerdict]:
    """The verdict of each file, in the order of `files` (see `stream_verdicts`)."""
    options = CheckOptions(format, registry, strict, open_prefix)
    return list(stream_verdicts(files, options, jobs=jobs, on_done=on_done, ray_address=ray_address))


def stream_verdicts(
    files: list[Path],
    options: CheckOptions,
    *,
    jobs: int = 1,
    on_done: Callable[[], None] | None = None,
    ray_address: str | None = None,
) -> Iterator[TraceVerdict]:
    """The verdict of each file, yielded in the order of `files` as soon as it and those before
    it are done: checked in this process when `jobs` is 1 (or a trace is stdin), by
    `min(jobs, len(files))` worker processes, or as Ray tasks on the cluster at `ray_address`
    (`local`: a cluster of `jobs` CPUs started here). Each trace is one unit of
    `kvclaims.refinement.fanout`. `on_done` is called once per verdict. A bad registry raises
    `InputError` as a sequential run would."""
    if STDIN in files or (jobs <= 1 and ray_address is None):
        for path in files:
            # a byte bar per large file only when no bar over the traces is live (rich shows one)
            with _progress(path, alone=on_done is None) as progress:
                verdict = _check_one(path, options, progress)
            if on_done is not None:
                on_done()
            yield verdict
        return
    work = functools.partial(check_unit, options)
    units = [(path,) for path in files]
    for result in fanout.stream(work, units, jobs=jobs, ray_address=ray_address, on_done=on_done):
        if isinstance(result, InputProblems):
            raise InputError(list(result.problems))
        yield from result


@dataclass(frozen=True)
class InputProblems:
    """The problems of an `InputError` a unit raised: the error does not survive pickling (its
    constructor takes problems, its args hold text), its problems do."""

    problems: tuple[Problem, ...]


def check_unit(options: CheckOptions, unit: fanout.Unit) -> tuple[TraceVerdict, ...] | InputProblems:
    """The verdicts of one unit of work (here one trace per unit), where the unit runs."""
    try:
        return tuple(_check_one(path, options) for path in unit)
    except InputError as error:
        return InputProblems(tuple(error.problems))


def _check_one(path: Path, options: CheckOptions, progress: Any = None) -> TraceVerdict:
    from kvclaims.refinement.api import check_source, check_trace

    format, registry, strict = options.format, options.registry, options.strict
    open_prefix = options.open_prefix
    if path != STDIN:
        return check_trace(
            path, format=format, registry=registry, progress=progress, strict=strict, open=open_prefix
        )
    # the checker reads a trace more than once (format detection, the minimal prefix): stdin is
    # spooled to a temporary file, streamed so that memory stays flat
    import shutil
    import tempfile

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


class _count_progress:
    """A rich progress bar over the traces of a long run on a terminal; otherwise nothing.
    Entering it gives the per-trace callback (None when there is no bar)."""

    def __init__(self, total: int) -> None:
        self._total = total
        self._bar: Any = None

    def __enter__(self) -> Callable[[], None] | None:
        if not is_terminal(sys.stderr) or self._total < PROGRESS_MIN_TRACES:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self._bar = Progress(
            "[bold]checking traces[/]",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=stderr_console(),
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
        try:
            size = self._path.stat().st_size
        except OSError:
            return None
        if not self._alone or not is_terminal(sys.stderr) or size < PROGRESS_MIN_BYTES:
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
            console=stderr_console(),
            transient=True,
            auto_refresh=False,  # no refresh thread: a one-thread process may read ahead
        )
        self._bar.start()
        task = self._bar.add_task("check", total=size)
        shown = 0.0

        def advance(done: int) -> None:
            nonlocal shown
            self._bar.update(task, completed=done)
            if time.monotonic() - shown >= REFRESH_SECONDS:
                shown = time.monotonic()
                self._bar.refresh()

        return advance

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def print_one(verdict: Any, console: Any = None) -> None:
    """The shared plain-text rendering (`kvclaims.refinement.rendering`), the outcome coloured
    on a terminal (by default stdout; piped: the plain lines, without importing rich)."""
    from kvclaims.refinement.rendering import OFFENDING_MARKER, verdict_lines

    if console is None and not is_terminal(sys.stdout):
        sys.stdout.write("".join(f"{line}\n" for line in verdict_lines(verdict)))
        return
    from rich.markup import escape

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


def _write_evidence(out: Path, files: list[Path], verdicts: list[Any], registry: Path | None) -> int:
    from kvclaims.refinement.evidence import evidence_items

    items = [
        item.model_dump(mode="json", exclude_defaults=True)
        for path, verdict in zip(files, verdicts, strict=True)
        for item in evidence_items(verdict, path, relative_to=out.parent, registry=registry)
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".json":
        out.write_text(json.dumps({"evidence": items}, indent=2) + "\n", encoding="utf-8")
    else:
        import yaml

        out.write_text(yaml.safe_dump({"evidence": items}, sort_keys=False), encoding="utf-8")
    return len(items)


_PLAIN_FLAGS = {"--json": "json", "--strict": "strict", "--open": "open"}
_PLAIN_VALUES = {"--format": "format", "--registry": "registry", "-j": "jobs", "--jobs": "jobs"}


def plain_args(argv: list[str]) -> argparse.Namespace | None:
    """The options `command` would hand to `run` for `argv` (`check TRACE...`), when the line is
    a plain one: traces, `--json`, `--strict`, `--open`, `--format F`, `--registry FILE`,
    `-j/--jobs N` (a value after `=` or as the next word), each well-formed. None for any other
    line (help, another option, `--`, a value click would refuse): click parses those, and
    words their errors. A test checks that both parse the same lines the same way."""
    if not argv or argv[0] != "check":
        return None
    options: dict[str, Any] = {
        "traces": [],
        "format": AUTO,
        "registry": None,
        "jobs": None,
        "json": False,
        "open": False,
        "ray": None,
        "strict": False,
        "evidence_out": None,
        "fleet": None,
        "router_format": ROUTER_FORMAT,
        "router_claims": None,
    }
    words = iter(argv[1:])
    for word in words:
        if word in _PLAIN_FLAGS:
            options[_PLAIN_FLAGS[word]] = True
            continue
        name, equals, value = word.partition("=") if word.startswith("--") else (word, "", "")
        if name in _PLAIN_VALUES:
            value = _plain_value(name, value if equals else next(words, ""))
            if value is None:
                return None
            options[_PLAIN_VALUES[name]] = value
        elif not word or (word.startswith("-") and word != str(STDIN)):
            return None
        else:
            options["traces"].append(Path(word))
    if not options["traces"]:
        return None
    options["traces"] = tuple(options["traces"])
    return argparse.Namespace(**options)


def _plain_value(option: str, value: str) -> Any:
    """An option's value as click converts it, or None where click might differ or refuse."""
    if not value or value.startswith("-"):
        return None
    if option == "--format":
        return value if value in (AUTO, *FORMATS) else None
    if option == "--registry":
        return Path(value)
    return int(value) if value.isascii() and value.isdigit() and int(value) >= 1 else None


def __getattr__(name: str) -> Any:
    """`command`, the click command, made on first use: a plain check line never imports click."""
    if name == "command":
        return _click_command()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _click_command() -> Any:
    import click

    from kvclaims.cli._common import PathType, jobs_option, json_option, ray_option, runs

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
    @click.option("--registry", type=PathType, metavar="FILE", help="claim registry for *-kv-events")
    @jobs_option("check traces in N processes (default: one per core; 1 = sequential)")
    @json_option
    @click.option(
        "--open",
        is_flag=True,
        help="judge kvclaims-v1 traces without their trace_closed end as open prefixes "
        "(default: such a trace is truncated, inconclusive)",
    )
    @ray_option("check traces as Ray tasks on the cluster at ADDRESS")
    @click.option("--strict", is_flag=True, help="refuse fields outside trace v1 (default: keep as context)")
    @click.option(
        "--evidence-out", type=PathType, metavar="FILE", help="write evidence items (accepted only)"
    )
    @click.option(
        "--fleet",
        type=PathType,
        metavar="ROUTER",
        help="check a fleet: ROUTER is the routing hook's stream, TRACE... the engines' streams",
    )
    @click.option(
        "--router-format",
        type=click.Choice(ROUTER_FORMATS),
        default=ROUTER_FORMAT,
        show_default=True,
        help="with --fleet: what ROUTER is (the routing hook's stream, or Dynamo's KV router decisions)",
    )
    @click.option(
        "--router-claims",
        type=PathType,
        metavar="FILE",
        help="with --fleet and a router's own records: a JSON object, request id -> claim id",
    )
    def command(**options: object) -> int:
        return runs(run)(**options)

    return command
