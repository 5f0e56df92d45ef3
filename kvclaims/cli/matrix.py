"""`kvclaims matrix DIR -o OUT`: the lowering matrix as Markdown, JSON and a heatmap PNG.

Writes `lowering-matrix.md`, `lowering-matrix.json` and `lowering-matrix.png` into OUT,
regenerated from the descriptors in DIR. `--check` compares the Markdown and JSON against OUT
instead of writing (exit 1 on drift).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kvclaims.cli._common import Exit, stderr_console

OUTPUTS = ("lowering-matrix.md", "lowering-matrix.json")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "matrix",
        help="regenerate the lowering matrix (Markdown, JSON, heatmap PNG) from descriptors",
        description=__doc__,
    )
    parser.add_argument("directory", type=Path, metavar="DIR", help="descriptor directory")
    parser.add_argument("-o", "--out", type=Path, required=True, metavar="OUT")
    parser.add_argument("--check", action="store_true", help="fail if OUT's md/json drifted")
    parser.add_argument("--no-png", action="store_true", help="skip the heatmap")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvclaims.spec.descriptor import load_descriptors
    from kvclaims.spec.matrix import build_matrix, matrix_json, matrix_markdown

    rows = build_matrix(load_descriptors([args.directory]))
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
    for name, text in texts.items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(args.out / name)
    if not args.no_png:
        from kvclaims.report.heatmap import render_heatmap

        png = args.out / "lowering-matrix.png"
        render_heatmap(rows, png)
        print(png)
    return Exit.ok


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None
