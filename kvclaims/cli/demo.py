"""`kvclaims demo [-o DIR]`: the main job, end to end on the bundled defaults.

Runs every stage in order: the lowering matrix over the shipped descriptors, the JSON Schemas,
the refinement corpus, the MicroRuntime scenarios, the Z3 proofs, the adversary, the vLLM
scheduler and engine lanes (skipped, and said so, when vLLM is not installed), a refinement
check of every trace this run wrote, and the pictures. Then writes DIR/REPORT.md, the one
document that answers: does my runtime surface conform, did this run conform, are the rules
sound.

Progress is shown while it runs (plain lines when output is piped); each stage's own output
goes to DIR/logs/<stage>.log. A failing stage does not stop the run: it is recorded, the other
stages still run, and it is named in the final table and in REPORT.md.

Exit status: 0 when every stage succeeded or was skipped, 1 when any stage failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.markup import escape

from kvclaims.cli._common import Exit, print_table

if TYPE_CHECKING:
    from kvclaims.report.report import StageRecord
from kvclaims.cli.adversary import demo_stage as adversary_demo_stage
from kvclaims.cli.prove import demo_stage as prove_demo_stage
from kvclaims.cli.scenario import demo_stage as scenario_demo_stage
from kvclaims.cli.vllm import demo_stage as vllm_demo_stage
from kvclaims.cli.vllm import engine_demo_stage as vllm_engine_demo_stage

REPOSITORY = Path(__file__).resolve().parents[2]
DESCRIPTORS = REPOSITORY / "descriptors"

Stage = Callable[[Path], str]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the main job end to end and write DIR/REPORT.md",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=Path("kvclaims-out"),
        metavar="DIR",
        help="output folder (default: kvclaims-out)",
    )
    parser.set_defaults(run=run)


def _lowering_matrix(out: Path) -> str:
    import json

    from kvclaims.report.heatmap import render_heatmap
    from kvclaims.spec.descriptor import load_descriptors
    from kvclaims.spec.matrix import build_matrix, matrix_json, matrix_markdown

    rows = build_matrix(load_descriptors([DESCRIPTORS]))
    (out / "lowering-matrix.md").write_text(matrix_markdown(rows), encoding="utf-8")
    (out / "lowering-matrix.json").write_text(json.dumps(matrix_json(rows), indent=2) + "\n")
    render_heatmap(rows, out / "lowering-matrix.png")
    judged = sum(len(r.verdicts) for r in rows)
    sound = sum(1 for r in rows for v in r.verdicts if v.label.is_sound)
    native = sum(1 for r in rows for v in r.verdicts if v.label.value == "native_sound")
    return f"{len(rows)} descriptors, {judged} rows judged, {sound} sound ({native} native_sound)"


def _schemas(out: Path) -> str:
    from kvclaims.spec.schema import write_schemas

    return f"{len(write_schemas(out / 'schemas'))} JSON Schemas written"


def _refinement_corpus(out: Path) -> str:
    from collections import Counter

    from kvclaims.cli._common import print_table
    from kvclaims.refinement.corpus import SUMMARY_COLUMNS, check_corpus, default_corpus, summary_rows

    corpus = default_corpus()
    if not corpus.is_dir():
        return f"{NOT_RUN}no trace corpus at {corpus} (set KVCLAIMS_CORPUS to its folder)"
    results = check_corpus(corpus)
    rows = summary_rows(results)
    print_table("corpus verdicts vs source labels", SUMMARY_COLUMNS, rows)
    table = ["| " + " | ".join(SUMMARY_COLUMNS) + " |", "|" + "---|" * len(SUMMARY_COLUMNS)]
    table += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    (out / "corpus-verdicts.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    counts = Counter(verdict.outcome.value for _, verdict in results)
    tally = ", ".join(f"{counts[o]} {o}" for o in ("accepted", "rejected", "inconclusive", "invalid"))
    return f"{len(results)} corpus traces checked: {tally} (corpus-verdicts.md)"


def _check_every_trace(out: Path) -> str:
    import json
    from collections import Counter

    from kvclaims.report.verdicts import check_traces

    checks = check_traces(out, since_ns=_RUN_STARTED_NS)
    (out / "trace-verdicts.json").write_text(
        json.dumps([c.as_json() for c in checks], indent=2) + "\n", encoding="utf-8"
    )
    counts = Counter(c.outcome for c in checks)
    wrong = [f"{c.trace}: {c.outcome}, expected {c.expected}" for c in checks if not c.as_expected]
    tally = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    if wrong:
        raise RuntimeError(f"{len(wrong)} of {len(checks)} traces not as expected: {'; '.join(wrong)}")
    controls = sum(1 for c in checks if c.control)
    positives = len(checks) - controls
    return f"{len(checks)} traces ({tally}); all {positives} positives and {controls} controls as expected"


def _pictures(out: Path) -> str:
    from kvclaims.report.report import draw_pictures

    return draw_pictures(out, since_ns=_RUN_STARTED_NS)


NOT_RUN = "not run: "
"""A stage that returns a summary starting with this was skipped, not failed."""

_RUN_STARTED_NS = 0
"""When this `kvclaims demo` started: traces older than this belong to an earlier run."""

STAGES: tuple[tuple[str, Stage], ...] = (
    ("lowering matrix", _lowering_matrix),
    ("schemas", _schemas),
    ("refinement corpus", _refinement_corpus),
    ("MicroRuntime scenarios", scenario_demo_stage),
    ("proofs (Z3)", prove_demo_stage),
    ("adversary (Z3)", adversary_demo_stage),
    ("vLLM scheduler lane", vllm_demo_stage),
    ("vLLM engine lane", vllm_engine_demo_stage),
    ("check every trace", _check_every_trace),
    ("pictures", _pictures),
)


def run(args: argparse.Namespace) -> int:
    from kvclaims.report.report import write_report

    global _RUN_STARTED_NS
    _RUN_STARTED_NS = time.time_ns() - 2_000_000_000  # slack for coarse file-system clocks
    out: Path = args.out
    (out / "logs").mkdir(parents=True, exist_ok=True)
    console = _console()
    records: list[StageRecord] = []
    started = time.perf_counter()
    for number, (name, stage) in enumerate(STAGES, 1):
        records.append(_run_stage(console, f"[{number}/{len(STAGES)}] {name}", name, stage, out))
    total = time.perf_counter() - started
    report = write_report(out, records, total)
    _print_summary(records, total, report)
    return Exit.not_sound if any(r.status == "failed" for r in records) else Exit.ok


def _console() -> Console:
    """A console on a copy of the original stdout, so progress still reaches the user while a
    stage's own output (and vLLM's logging) is redirected into its log file."""
    sys.stdout.flush()
    stream = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")
    return Console(file=stream, highlight=False, soft_wrap=True)


def _run_stage(console: Console, label: str, name: str, stage: Stage, out: Path) -> StageRecord:
    from kvclaims.report.report import StageRecord

    log = out / "logs" / f"{name.split(' (')[0].replace(' ', '-').lower()}.log"
    if not console.is_terminal:
        console.print(f"{label} ...")
    began = time.perf_counter()
    with _status(console, label), _redirected(log) as stream:
        try:
            summary, status = stage(out), "ok"
        except Exception as error:  # a failing stage is recorded and the demo goes on
            traceback.print_exc(file=stream)
            summary, status = f"{type(error).__name__}: {error}", "failed"
    seconds = time.perf_counter() - began
    if summary.startswith(NOT_RUN):
        status, summary = "skipped", summary[len(NOT_RUN) :]
    mark = {"ok": "[green]ok[/]", "skipped": "[yellow]skipped[/]", "failed": "[bold red]FAILED[/]"}[status]
    console.print(f"{escape(label)}: {mark} in {seconds:.1f} s - {escape(summary)}")
    return StageRecord(name, status, seconds, summary)


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
    print_table("kvclaims demo: stages", ["stage", "status", "seconds"], rows)
    print(f"report: {report}  (stage logs in {report.parent / 'logs'}/)")
