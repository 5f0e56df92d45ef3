"""The main job, end to end on the bundled inputs: `kvclaims report` on the shipped descriptors and
bundled traces, plus every trace this run makes.

Runs every stage (the Z3 stages at the same time as the vLLM ones, each group in its order, the
other stages in whichever group is free first once what they read is written; the table and the
report keep this order): the lowering matrix over the shipped descriptors,
the JSON Schemas, an external labelled trace corpus when this machine has one (skipped, and said
so, otherwise),
the MicroRuntime scenarios, the Z3 proofs, the adversary, the vLLM scheduler, engine and hybrid
lanes (skipped, and said so, when vLLM is not installed; the hybrid lane is seed 002's resume
and a caught corruption on a tiny hybrid model), a refinement check of every trace this run
wrote, and the pictures; the check of every trace includes the bundled trace corpus (the traces
the shipped descriptors cite as evidence, each read as its anchors say: format, claim
registry). Then writes DIR/REPORT.md, the one document that answers: does my runtime surface
conform, did this run conform, are the rules sound.

Progress is shown while it runs (plain lines when output is piped); each stage's own output goes
to DIR/logs/<stage>.log. A failing stage does not stop the run: it is recorded, the other stages
still run, and it is named in the final table and in REPORT.md. DIR must be empty or new
(`--force` writes into a non-empty one); without -o it is a new folder in the user's data
directory, printed at the end (and in --json's "out"); DIR/manifest.json lists exactly the files the run
wrote. `--stages` runs only the named stages (comma-separated, as the table names them).

Exit status: 0 when every stage succeeded or was skipped, 1 when any stage failed, 2 on bad
input.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import click

from kvclaims.bundled import DESCRIPTORS, TRACES
from kvclaims.cli import report
from kvclaims.cli._common import force_option, json_option, out_option, out_or_new_run_folder, runs
from kvclaims.cli.adversary import demo_stage as adversary_demo_stage
from kvclaims.cli.prove import demo_stage as prove_demo_stage
from kvclaims.cli.report import NOT_RUN, Stage
from kvclaims.cli.scenario import demo_stage as scenario_demo_stage
from kvclaims.cli.vllm import demo_stage as vllm_demo_stage
from kvclaims.cli.vllm import engine_demo_stage as vllm_engine_demo_stage
from kvclaims.cli.vllm import hybrid_demo_stage as vllm_hybrid_demo_stage
from kvclaims.report.verdicts import LANES, FoundTrace
from kvclaims.spec.errors import InputError, Problem

__all__ = ["NOT_RUN", "STAGES", "Stage"]

RUN_FOLDER = "demo"
"""The name of the folder `kvclaims demo` writes to without -o (`new_run_folder`)."""
TIMELINE_VLLM = "vllm-engine/path-c-multi-claim.ndjson"
TIMELINE_FALLBACK = "scenarios/offload-restore.ndjson"


def _schemas(out: Path) -> str:
    from kvclaims.spec.schema import write_schemas

    return f"{len(write_schemas(out / 'schemas'))} JSON Schemas written"


def _external_corpus(out: Path) -> str:
    """The seed artifact's labelled corpus, when this machine has it (`$KVCLAIMS_CORPUS`, or
    `shared/corpus` beside a checkout): each verdict beside the label its source gave."""
    from collections import Counter

    from kvclaims.refinement.corpus import SUMMARY_COLUMNS, check_corpus, default_corpus, summary_rows
    from kvclaims.report.markdown import markdown_table

    corpus = default_corpus()
    if not corpus.is_dir():
        return f"{NOT_RUN}no external trace corpus on this machine (set KVCLAIMS_CORPUS to one)"
    results = check_corpus(corpus)
    table = markdown_table(SUMMARY_COLUMNS, summary_rows(results))
    (out / "corpus-verdicts.md").write_text(table + "\n", encoding="utf-8")
    counts = Counter(verdict.outcome.value for _, verdict in results)
    tally = ", ".join(f"{counts[o]} {o}" for o in ("accepted", "rejected", "inconclusive", "invalid"))
    return f"{len(results)} external corpus traces checked: {tally} (corpus-verdicts.md)"


def _bundled_traces() -> list[FoundTrace]:
    """The bundled trace corpus, each trace read as the shipped descriptors' anchors say."""
    return report.descriptor_traces("bundled corpus", TRACES, DESCRIPTORS)


def _this_runs_traces(out: Path) -> list[FoundTrace]:
    from kvclaims.report.verdicts import lane_traces

    return _bundled_traces() + lane_traces(out, since_ns=report.RUN_STARTED_NS)


def _demo_timeline(out: Path) -> tuple[Path, str] | None:
    """The engine lane's two-claim trace when this run wrote one, else the MicroRuntime's
    offload-restore trace."""
    for name in (TIMELINE_VLLM, TIMELINE_FALLBACK):
        path = out / name
        if path.is_file() and path.stat().st_mtime_ns >= report.RUN_STARTED_NS:
            return path, name
    return None


STAGES: tuple[tuple[str, Stage], ...] = (
    ("lowering matrix", functools.partial(report.lowering_matrix, DESCRIPTORS)),
    ("schemas", _schemas),
    ("external trace corpus", _external_corpus),
    ("MicroRuntime scenarios", scenario_demo_stage),
    ("proofs (Z3)", prove_demo_stage),
    ("adversary (Z3)", adversary_demo_stage),
    ("vLLM scheduler lane", vllm_demo_stage),
    ("vLLM engine lane", vllm_engine_demo_stage),
    ("vLLM hybrid lane", vllm_hybrid_demo_stage),
    ("check every trace", functools.partial(report.check_every_trace, _this_runs_traces)),
    ("pictures", functools.partial(report.pictures, sweep=True, timeline_from=_demo_timeline)),
)

CONCURRENT: tuple[tuple[str, ...], ...] = (
    ("proofs (Z3)", "adversary (Z3)"),
    ("vLLM scheduler lane", "vLLM engine lane", "vLLM hybrid lane"),
)
"""Lanes that run at once, each in its own process (they write disjoint folders): the Z3 stages,
the longest, beside the vLLM stages, which share one lane so that vLLM is imported once (the
engine lane's import took 100 s of a 274 s stage on the loaded machine when it had a lane of its
own) and one `vllm.LLM` runs at a time. Every other stage runs in the first lane process free
once what it reads is written (`AFTER`), so the Z3 lane starts at once and the short stages
fill the other lane's time."""

AFTER: dict[str, tuple[str, ...]] = {
    "lowering matrix": (),
    "schemas": (),
    "external trace corpus": (),
    "MicroRuntime scenarios": (),
    "check every trace": tuple(LANES.values()),
    "pictures": ("MicroRuntime scenarios", "vLLM engine lane"),
}
"""What each stage outside the lanes waits for: the first four read only bundled inputs; the
trace check reads the traces of the stages that write them; the pictures draw the engine lane's
trace (or, without vLLM, a MicroRuntime scenario's) and nothing else of this run."""


def run(args: argparse.Namespace) -> int:
    stages = STAGES
    if args.stages:
        wanted = [name.strip() for name in args.stages.split(",") if name.strip()]
        known = {name for name, _ in STAGES}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise InputError(
                [
                    Problem(
                        "kvclaims demo", f"unknown stage {name!r}; stages: {', '.join(known)}", field="stages"
                    )
                    for name in unknown
                ]
            )
        stages = tuple((name, stage) for name, stage in STAGES if name in wanted)
    return report.run_stages(
        out_or_new_run_folder(args.out, RUN_FOLDER),
        stages,
        title="kvclaims demo report",
        force=getattr(args, "force", False),
        as_json=getattr(args, "json", False),
        concurrent=CONCURRENT,
        after=AFTER,
    )


@click.command(
    "demo", help=__doc__, short_help="run the main job end to end on the bundled inputs, write DIR/REPORT.md"
)
@out_option("output folder (new or empty)", run_folder=RUN_FOLDER)
@click.option("--stages", metavar="A,B,...", help="run only these stages (default: all)")
@force_option
@json_option
def command(**options: object) -> int:
    return runs(run)(**options)
