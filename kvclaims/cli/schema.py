"""`kvclaims schema [--out DIR | --check DIR] [--docs DOCS]`: the JSON Schemas of descriptors and
trace v1, and the format references rendered from them.

Without options, prints every schema as one JSON object keyed by file name. `--out` writes the
files; `--check` exits 1 if the files in DIR differ from what the models generate. With `--docs`,
`--out` also renders docs/trace-format.md and docs/descriptor-format.md from the schemas it
wrote, and `--check` also fails when the documents in DOCS differ from what DIR's schemas render.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvclaims.cli._common import Exit, print_json, stderr_console


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="write or check the JSON Schemas of descriptors and trace v1 (and the docs from them)",
        description=__doc__,
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--out", type=Path, metavar="DIR", help="write the schema files here")
    target.add_argument("--check", type=Path, metavar="DIR", help="fail if DIR has drifted")
    parser.add_argument(
        "--docs",
        type=Path,
        metavar="DOCS",
        help="with --out: render the format references into DOCS; with --check: check them",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvclaims.spec.schema import drifted_schemas, generate_schemas, write_schemas
    from kvclaims.spec.schema_docs import drifted_docs, write_docs

    if args.docs is not None and args.out is None and args.check is None:
        stderr_console().print("error: --docs needs --out DIR or --check DIR (the schemas to render from)")
        return Exit.invalid_input
    if args.out is not None:
        written = write_schemas(args.out)
        if args.docs is not None:
            written += write_docs(args.out, args.docs)
        for path in written:
            sys.stdout.write(f"{path}\n")
        return Exit.ok
    if args.check is not None:
        drifted = [args.check / name for name in drifted_schemas(args.check)]
        if args.docs is not None and not drifted:
            drifted += [args.docs / name for name in drifted_docs(args.check, args.docs)]
        fix = f"kvclaims schema --out {args.check}" + (f" --docs {args.docs}" if args.docs else "")
        for path in drifted:
            stderr_console().print(f"drifted: {path} (run: {fix})")
        return Exit.not_sound if drifted else Exit.ok
    print_json(generate_schemas())
    return Exit.ok
