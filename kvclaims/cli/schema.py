"""`kvclaims schema [--out DIR | --check DIR]`: the JSON Schemas of descriptors and trace v1.

Without options, prints every schema as one JSON object keyed by file name. `--out` writes the
files; `--check` exits 1 if the files in DIR differ from what the models generate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvclaims.cli._common import Exit, print_json, stderr_console


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="write or check the JSON Schemas of descriptors and trace v1",
        description=__doc__,
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--out", type=Path, metavar="DIR", help="write the schema files here")
    target.add_argument("--check", type=Path, metavar="DIR", help="fail if DIR has drifted")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvclaims.spec.schema import drifted_schemas, generate_schemas, write_schemas

    if args.out is not None:
        for path in write_schemas(args.out):
            sys.stdout.write(f"{path}\n")
        return Exit.ok
    if args.check is not None:
        drifted = drifted_schemas(args.check)
        for name in drifted:
            stderr_console().print(
                f"schema drifted: {args.check / name} (run: kvclaims schema --out {args.check})"
            )
        return Exit.not_sound if drifted else Exit.ok
    print_json(generate_schemas())
    return Exit.ok
