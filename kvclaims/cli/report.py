"""Answer the three questions for your own runtime: write OUT/REPORT.md from your descriptors
and your traces.

`--descriptors DIR`: runtime descriptors (YAML, format `descriptor: 1`), each lowered for every
protection mode at every adapter depth (the lowering matrix and its heatmap). `--traces DIR`:
traces your runtime wrote (searched recursively like `kvclaims check`), each checked by
refinement: a trace named `control-*` must not be accepted, every other trace must be. A trace
that an anchor of `--descriptors` cites is read as the anchor says (its `format` and claim
`registry`); a KV-event capture no anchor gives a registry is inconclusive. The
report answers each question in one sentence and shows only the rows a reader must look at
(the rest are counted). Pictures: the claim lifecycle, and the timeline of one of your accepted
traces. Give at least one of the two folders.

OUT must be empty or new (`--force` writes into a non-empty folder); every run writes
OUT/manifest.json, the list of exactly the files it wrote. Each stage's own output goes to
OUT/logs/<stage>.log; a failing stage is recorded and the others still run. `--json` prints one
JSON line with each stage's status and the report's path.

Exit status: 0 when every stage succeeded or was skipped, 1 when a stage failed (for example a
trace that did not get the verdict it should), 2 on bad input (a non-empty OUT without --force).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click
from rich.console import Console
from rich.markup import escape

from kvclaims.cli._common import (
    Exit,
    PathType,
    force_option,
    json_option,
    note_skipped_descriptor,
    out_option,
    print_json,
    print_table,
    runs,
)
from kvclaims.spec.errors import InputError, Problem

if TYPE_CHECKING:
    from kvclaims.report.report import StageRecord
    from kvclaims.report.verdicts import FoundTrace

Stage = Callable[[Path], str]
"""A stage writes into the output folder and returns a one-line summary of what it did."""

NOT_RUN = "not run: "
"""A stage that returns a summary starting with this was skipped, not failed."""

TRACE_CHECKS = "trace-verdicts.json"
TIMELINE_MAX_BYTES = 4 * 1024 * 1024
"""The timeline is drawn from an accepted trace no larger than this (it is read whole)."""


def run(args: argparse.Namespace) -> int:
    if args.descriptors is None and args.traces is None:
        raise InputError([Problem("kvclaims report", "give --descriptors DIR, --traces DIR, or both")])
    for option, folder in (("descriptors", args.descriptors), ("traces", args.traces)):
        if folder is not None and not folder.is_dir():
            raise InputError([Problem(str(folder), "no such directory", field=option)])
    stages: list[tuple[str, Stage]] = []
    if args.descriptors is not None:
        stages.append(("lowering matrix", functools.partial(lowering_matrix, args.descriptors)))
    if args.traces is not None:
        found = functools.partial(_user_traces, args.traces, args.descriptors)
        stages.append(("check every trace", functools.partial(check_every_trace, found)))
    timeline = functools.partial(accepted_trace, args.traces.parent) if args.traces else _no_trace
    stages.append(("pictures", functools.partial(pictures, sweep=False, timeline_from=timeline)))
    return run_stages(
        args.out, stages, title="kvclaims report: your runtime", force=args.force, as_json=args.json
    )


def _no_trace(out: Path) -> None:
    return None


def descriptor_traces(lane: str, folder: Path, descriptors: Path | None) -> list[FoundTrace]:
    """The traces under `folder`, each read as the anchors of the descriptors in `descriptors`
    that cite it say (its format and claim registry); a trace no anchor cites is detected."""
    from kvclaims.cli.check import trace_files
    from kvclaims.report.verdicts import anchored_checks, folder_traces
    from kvclaims.spec.descriptor import load_descriptors

    cited = load_descriptors([descriptors], on_skip=note_skipped_descriptor) if descriptors else []
    return folder_traces(lane, folder, trace_files([folder]), anchored_checks([d for _, d in cited]))


def _user_traces(folder: Path, descriptors: Path | None, out: Path) -> list[FoundTrace]:
    return descriptor_traces("your traces", folder, descriptors)


def lowering_matrix(descriptors: Path, out: Path) -> str:
    """The lowering matrix of the descriptors in `descriptors`: Markdown, JSON and heatmap."""
    from kvclaims.cli._recheck import load_rechecked
    from kvclaims.report.heatmap import render_heatmap
    from kvclaims.spec.matrix import build_matrix, matrix_json, matrix_markdown

    rows = build_matrix(load_rechecked([descriptors]))
    (out / "lowering-matrix.md").write_text(matrix_markdown(rows), encoding="utf-8")
    (out / "lowering-matrix.json").write_text(json.dumps(matrix_json(rows), indent=2) + "\n")
    render_heatmap(rows, out / "lowering-matrix.png")
    judged = sum(len(r.verdicts) for r in rows)
    sound = sum(1 for r in rows for v in r.verdicts if v.label.is_sound)
    native = sum(1 for r in rows for v in r.verdicts if v.label.value == "native_sound")
    return f"{len(rows)} descriptors, {judged} rows judged, {sound} sound ({native} native_sound)"


def check_every_trace(find: Callable[[Path], list[FoundTrace]], out: Path) -> str:
    """Check every trace `find` finds; raises when one did not get the verdict it should."""
    from collections import Counter

    from kvclaims.report.verdicts import check_traces

    checks = check_traces(find(out))
    (out / TRACE_CHECKS).write_text(
        json.dumps([c.as_json() for c in checks], indent=2) + "\n", encoding="utf-8"
    )
    if not checks:
        return f"{NOT_RUN}no trace files found"
    counts = Counter(c.outcome for c in checks)
    wrong = [f"{c.trace}: {c.outcome}, expected {c.expected}" for c in checks if not c.as_expected]
    tally = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    if wrong:
        raise RuntimeError(f"{len(wrong)} of {len(checks)} traces not as expected: {'; '.join(wrong)}")
    controls = sum(1 for c in checks if c.control)
    positives = len(checks) - controls
    return f"{len(checks)} traces ({tally}); all {positives} positives and {controls} controls as expected"


def accepted_trace(base: Path, out: Path) -> tuple[Path, str] | None:
    """The first accepted trace of this run's checks small enough to draw (its shown name is
    relative to `base`), and that name."""
    from kvclaims.report.verdicts import TraceCheck

    path = out / TRACE_CHECKS
    if not path.is_file():
        return None
    for check in (TraceCheck(**c) for c in json.loads(path.read_text(encoding="utf-8"))):
        source = base / check.trace
        if (
            check.outcome == "accepted"
            and source.suffix == ".ndjson"
            and source.stat().st_size <= TIMELINE_MAX_BYTES
        ):
            return source, check.trace
    return None


def pictures(out: Path, *, sweep: bool, timeline_from: Callable[[Path], tuple[Path, str] | None]) -> str:
    from kvclaims.report.report import draw_pictures

    return draw_pictures(out, sweep=sweep, timeline=timeline_from(out))


RUN_STARTED_NS = 0
"""When the current run started: files older than this belong to an earlier run."""


def run_stages(
    out: Path,
    stages: Sequence[tuple[str, Stage]],
    *,
    title: str,
    force: bool,
    as_json: bool = False,
    concurrent: Sequence[Sequence[str]] = (),
    after: Mapping[str, Sequence[str]] | None = None,
) -> int:
    """Run `stages` into the fresh folder `out`, then write REPORT.md and manifest.json; prints
    progress and a table of stages (or one JSON line). Without `concurrent` the stages run in
    order in this process. `concurrent` names lanes of stages that share no files: each lane
    runs in its own forked process, in its given order, all lanes at once; each other stage
    runs in the first lane process that is free once the stages it waits for have finished
    (those `after` names for it, else every stage before it). The records, the report and the
    logs keep the order of `stages`."""
    from kvclaims.report.report import snapshot, write_manifest, write_report

    global RUN_STARTED_NS
    _refuse_stale(out, force)
    before = snapshot(out)
    RUN_STARTED_NS = time.time_ns() - 2_000_000_000  # slack for coarse file-system clocks
    (out / "logs").mkdir(parents=True, exist_ok=True)
    console = _console(quiet=as_json)
    labels = [f"[{number}/{len(stages)}] {name}" for number, (name, _) in enumerate(stages, 1)]
    records: list[StageRecord | None] = [None] * len(stages)
    started = time.perf_counter()
    plan = _plan([name for name, _ in stages], concurrent, after or {})
    if plan is None:
        for index, stage in enumerate(stages):
            records[index] = _run_stage(console, labels[index], *stage, out)
    else:
        for index, record in _run_lanes(console, labels, stages, plan, out):
            records[index] = record
    total = time.perf_counter() - started
    done = [record for record in records if record is not None]
    report = write_report(out, done, total, title=title)
    manifest = write_manifest(out, before=before)
    failed = any(r.status == "failed" for r in done)
    if as_json:
        print_json(
            {
                "out": str(out),
                "report": str(report),
                "manifest": str(manifest),
                "failed": failed,
                "seconds": round(total, 3),
                "stages": [
                    {
                        "name": r.name,
                        "status": r.status,
                        "seconds": round(r.seconds, 3),
                        "cpu_seconds": round(r.cpu_seconds, 3),
                        "summary": r.summary,
                    }
                    for r in done
                ],
            }
        )
    else:
        _print_summary(done, total, report)
    return Exit.not_sound if failed else Exit.ok


def _refuse_stale(out: Path, force: bool) -> None:
    """A run writes to a fresh folder, so that no file of an earlier run is read as this run's."""
    if out.exists() and not out.is_dir():
        raise InputError([Problem(str(out), "is a file, not a folder", field="out")])
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(
            [Problem(str(out), "output folder is not empty (choose a new one, or add --force)", field="out")]
        )


def _console(*, quiet: bool) -> Console:
    """A console on a copy of the original stdout (stderr with --json), so progress still
    reaches the user while a stage's own output (and vLLM's logging) goes to its log file."""
    sys.stdout.flush()
    stream = os.fdopen(os.dup(2 if quiet else 1), "w", buffering=1, encoding="utf-8", errors="replace")
    return Console(file=stream, highlight=False, soft_wrap=True)


def _run_stage(console: Console, label: str, name: str, stage: Stage, out: Path) -> StageRecord:
    if not console.is_terminal:
        console.print(f"{label} ...")
    with _status(console, label):
        record = _run_logged(name, stage, out)
    _print_record(console, label, record)
    return record


def _run_logged(name: str, stage: Stage, out: Path) -> StageRecord:
    """Run `stage` with its output in its log file; a stage that raises is recorded as failed."""
    from kvclaims.report.report import StageRecord

    log = out / "logs" / f"{name.split(' (')[0].replace(' ', '-').lower()}.log"
    began, cpu_began = time.perf_counter(), _cpu_seconds()
    with _redirected(log) as stream:
        try:
            summary, status = stage(out), "ok"
        except Exception as error:  # a failing stage is recorded and the run goes on
            traceback.print_exc(file=stream)
            summary, status = f"{type(error).__name__}: {error}", "failed"
    seconds, cpu = time.perf_counter() - began, _cpu_seconds() - cpu_began
    if summary.startswith(NOT_RUN):
        status, summary = "skipped", summary[len(NOT_RUN) :]
    return StageRecord(name, status, seconds, summary, cpu)


def _cpu_seconds() -> float:
    """CPU time this process (all its threads) and the child processes it waited for used."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _print_record(console: Console, label: str, record: StageRecord) -> None:
    mark = MARKS[record.status]
    console.print(f"{escape(label)}: {mark} in {record.seconds:.1f} s - {escape(record.summary)}")


MARKS = {"ok": "[green]ok[/]", "skipped": "[yellow]skipped[/]", "failed": "[bold red]FAILED[/]"}
"""How the console shows each stage status."""


@dataclass
class Plan:
    """Which process runs what: `lanes[k]` are the stages only lane process k runs, in order;
    `free` are the other stages in order, each run by the first lane process free once every
    stage in `waits[index]` has finished."""

    lanes: list[list[int]]
    free: list[int]
    waits: dict[int, set[int]]

    def next_for(self, lane: int, finished: set[int]) -> int | None:
        """The stage lane process `lane` runs next (taken off the plan), or None for now."""
        if self.lanes[lane]:
            return self.lanes[lane].pop(0)
        for index in self.free:
            if self.waits[index] <= finished:
                self.free.remove(index)
                return index
        return None


def _plan(
    names: Sequence[str], concurrent: Sequence[Sequence[str]], after: Mapping[str, Sequence[str]]
) -> Plan | None:
    """The plan for `names` (None: one process in order, when fewer than two of the
    `concurrent` lanes have a stage asked for). A stage `after` names waits for those of its
    stages that are asked for; any other free stage waits for every stage before it."""
    lanes = [[names.index(name) for name in lane if name in names] for lane in concurrent]
    lanes = [lane for lane in lanes if lane]
    if len(lanes) < 2:
        return None
    laned = {index for lane in lanes for index in lane}
    free = [index for index in range(len(names)) if index not in laned]
    waits = {
        index: (
            {names.index(n) for n in after[names[index]] if n in names}
            if names[index] in after
            else set(range(index))
        )
        for index in free
    }
    return Plan(lanes, free, waits)


def _run_lanes(
    console: Console, labels: Sequence[str], stages: Sequence[tuple[str, Stage]], plan: Plan, out: Path
) -> Iterator[tuple[int, StageRecord]]:
    """Run `plan`: one forked process per lane (their output goes to the stages' logs, so the
    forks need their own file descriptors), each sent its next stage as it finishes one; yields
    each record as it arrives. A lane whose process dies records its stage and the rest of its
    lane as failed; free stages left when every process has ended run here."""
    import multiprocessing
    from multiprocessing.connection import wait

    from kvclaims.report.report import StageRecord

    context = multiprocessing.get_context("fork")
    console.print(
        "running at once: "
        + "; ".join(", ".join(labels[i] for i in lane) for lane in plan.lanes)
        + (f"; then, in the first free: {', '.join(labels[i] for i in plan.free)}" if plan.free else "")
    )
    sys.stdout.flush()
    sys.stderr.flush()
    finished: set[int] = set()
    processes: dict[Any, tuple[Any, int]] = {}  # connection -> (process, its lane)
    running: dict[Any, int] = {}  # connection -> the stage its process runs
    for lane in range(len(plan.lanes)):
        connection, child_end = context.Pipe()
        process = context.Process(target=_lane_process, args=(stages, out, child_end), daemon=False)
        process.start()
        child_end.close()
        processes[connection] = (process, lane)
    try:
        while processes:
            for connection, (_, lane) in list(processes.items()):
                if connection in running:
                    continue
                index = plan.next_for(lane, finished)
                if index is not None:
                    with suppress(OSError):  # a process killed while idle: its end is read below
                        connection.send(index)
                    running[connection] = index
                elif not (plan.lanes[lane] or plan.free):
                    _end_lane(processes.pop(connection)[0], connection)
            if not running:
                break  # free stages left wait for nothing a process could still finish
            for connection in wait(list(running)):
                index = running.pop(connection)
                try:
                    done, stage_record = connection.recv()
                except EOFError:
                    process, lane = processes.pop(connection)
                    process.join()
                    why = f"its process ended (exit code {process.exitcode}) before the stage finished"
                    lost, plan.lanes[lane] = [index, *plan.lanes[lane]], []
                    for stage in lost:
                        finished.add(stage)
                        stage_record = StageRecord(stages[stage][0], "failed", 0.0, why)
                        _print_record(console, labels[stage], stage_record)
                        yield stage, stage_record
                    continue
                finished.add(done)
                _print_record(console, labels[done], stage_record)
                yield done, stage_record
        for index in list(plan.free):  # no lane process is left to run these
            plan.free.remove(index)
            yield index, _run_stage(console, labels[index], *stages[index], out)
    finally:
        for connection, (process, _) in processes.items():
            process.terminate()
            process.join()
            connection.close()


def _end_lane(process: Any, connection: Any) -> None:
    """Tell an idle lane process it is done, and wait for it to exit."""
    connection.send(None)
    connection.close()
    process.join()


def _lane_process(stages: Sequence[tuple[str, Stage]], out: Path, connection: Any) -> None:
    """A lane process: run each stage it is sent, send back its record; None ends it."""
    while (index := connection.recv()) is not None:
        connection.send((index, _run_logged(*stages[index], out)))
    connection.close()


@contextmanager
def _status(console: Console, label: str) -> Iterator[None]:
    if console.is_terminal:
        with console.status(f"{escape(label)} ..."):
            yield
    else:
        yield


@contextmanager
def _redirected(log: Path) -> Iterator[TextIO]:
    """Send file descriptors 1 and 2 (Python's and any library's output) to `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log.open("w", encoding="utf-8") as stream:
        os.dup2(stream.fileno(), 1)
        os.dup2(stream.fileno(), 2)
        try:
            yield stream
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _print_summary(records: list[StageRecord], total: float, report: Path) -> None:
    rows = [[r.name, r.status, f"{r.seconds:.1f}"] for r in records]
    rows.append(["total", "failed" if any(r.status == "failed" for r in records) else "ok", f"{total:.1f}"])
    print_table("stages", ["stage", "status", "seconds"], rows)
    print(f"outputs in {report.parent}/: start with {report.name} (stage logs: logs/; files: manifest.json)")


@click.command(
    "report", help=__doc__, short_help="answer the three questions for your descriptors and traces"
)
@click.option("--descriptors", type=PathType, metavar="DIR", help="your runtime descriptors")
@click.option("--traces", type=PathType, metavar="DIR", help="traces your runtime wrote")
@out_option("output folder (new or empty)", required=True)
@force_option
@json_option
def command(**options: object) -> int:
    return runs(run)(**options)
