"""The lowering matrix of the descriptors in DIR (default: the shipped ones), as Markdown, JSON
and a heatmap PNG.

Writes `lowering-matrix.md`, `lowering-matrix.json` and `lowering-matrix.png` into OUT,
regenerated from the descriptors in DIR. Exit as `kvclaims lower` on the same descriptors: 0
when every judged row is sound, 1 when one is not, 2 on invalid input; cited traces are
re-checked as there. `--check` compares the
Markdown and JSON against OUT instead of writing and answers only that: exit 1 on drift, else 0.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import click

from kvclaims.bundled import DESCRIPTORS
from kvclaims.cli._common import (
    Exit,
    PathType,
    json_option,
    out_option,
    print_written,
    runs,
    stderr_console,
)

OUTPUTS = ("lowering-matrix.md", "lowering-matrix.json")


def run(args: argparse.Namespace) -> int:
    from kvclaims.cli._recheck import load_rechecked
    from kvclaims.spec.matrix import build_matrix, matrix_json, matrix_markdown

    rows = build_matrix(load_rechecked([args.directory]))
    texts = {
        "lowering-matrix.md": matrix_markdown(rows),
        "lowering-matrix.json": json.dumps(matrix_json(rows), indent=2) + "\n",
    }
    if args.check:
        drifted = [n for n, t in texts.items() if _read(args.out / n) != t]
        for name in drifted:
            stderr_console().print(
                f"matrix drifted: {args.out / name} (run: kvclaims matrix {args.directory} -o {args.out})"
            )
        return Exit.not_sound if drifted else Exit.ok
    args.out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts.items():
        (args.out / name).write_text(text, encoding="utf-8")
        written.append(args.out / name)
    if not args.no_png:
        from kvclaims.report.heatmap import render_heatmap

        written.append(render_heatmap(rows, args.out / "lowering-matrix.png"))
    print_written(written, as_json=args.json)
    return Exit.ok if all(v.label.is_sound for row in rows for v in row.verdicts) else Exit.not_sound


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


@click.command(
    "matrix",
    help=__doc__,
    short_help="regenerate the lowering matrix (Markdown, JSON, heatmap PNG) from descriptors",
)
@click.argument("directory", type=PathType, metavar="[DIR]", default=DESCRIPTORS)
@out_option("folder to write (or, with --check, to compare with)", required=True)
@click.option("--check", is_flag=True, help="write nothing; exit 1 if OUT's md/json drifted")
@click.option("--no-png", is_flag=True, help="skip the heatmap")
@json_option
def command(**options: object) -> int:
    return runs(run)(**options)
