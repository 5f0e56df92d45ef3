"""`kvclaims demo [--out DIR]`: the main job, end to end on the bundled defaults.

Runs each stage in order and prints what it produced: the lowering matrix over the shipped
descriptors, the JSON Schemas, and the later stages (proofs, scenarios, refinement, vLLM lanes)
as they exist. Exit 0 only if every stage succeeded.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from kvclaims.cli._common import Exit, stdout_console
from kvclaims.cli.adversary import demo_stage as adversary_demo_stage
from kvclaims.cli.prove import demo_stage as prove_demo_stage
from kvclaims.cli.scenario import demo_stage as scenario_demo_stage
from kvclaims.cli.vllm import demo_stage as vllm_demo_stage
from kvclaims.cli.vllm import engine_demo_stage as vllm_engine_demo_stage

REPOSITORY = Path(__file__).resolve().parents[2]
DESCRIPTORS = REPOSITORY / "descriptors"

Stage = Callable[[Path], str]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run the main job end to end", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("kvclaims-out"), metavar="DIR")
    parser.set_defaults(run=run)


def _lowering_matrix(out: Path) -> str:
    import json

    from kvclaims.cli._heatmap import render_heatmap
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
        return f"no trace corpus at {corpus} (set KVCLAIMS_CORPUS); nothing checked"
    results = check_corpus(corpus)
    rows = summary_rows(results)
    print_table("corpus verdicts vs source labels", SUMMARY_COLUMNS, rows)
    table = ["| " + " | ".join(SUMMARY_COLUMNS) + " |", "|" + "---|" * len(SUMMARY_COLUMNS)]
    table += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    (out / "corpus-verdicts.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    counts = Counter(verdict.outcome.value for _, verdict in results)
    tally = ", ".join(f"{counts[o]} {o}" for o in ("accepted", "rejected", "inconclusive", "invalid"))
    return f"{len(results)} corpus traces checked: {tally} (corpus-verdicts.md)"


STAGES: tuple[tuple[str, Stage], ...] = (
    ("lowering matrix", _lowering_matrix),
    ("schemas", _schemas),
    ("refinement corpus", _refinement_corpus),
    ("MicroRuntime scenarios", scenario_demo_stage),
    ("proofs (Z3)", prove_demo_stage),
    ("adversary (Z3)", adversary_demo_stage),
    ("vLLM scheduler lane", vllm_demo_stage),
    ("vLLM engine lane", vllm_engine_demo_stage),
)


def run(args: argparse.Namespace) -> int:
    console = stdout_console()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, stage in STAGES:
        console.print(f"[bold]{name}[/]: {stage(args.out)}")
    console.print(f"outputs in {args.out}/")
    return Exit.ok
