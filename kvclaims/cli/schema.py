"""The JSON Schemas of descriptors and trace v1, and the format references rendered from them.

Without options, prints every schema as one JSON object keyed by file name. `-o DIR` writes the
files; `-o DIR --check` writes nothing and exits 1 if the files in DIR differ from what the
models generate (`--check DIR` is the older spelling). With `--docs DOCS`, writing also renders
DOCS/trace-format.md, DOCS/descriptor-format.md and DOCS/rule-event-table.md from the schemas
it wrote, and checking also
fails when the documents in DOCS differ from what DIR's schemas render.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import click

from kvclaims.cli._common import (
    Exit,
    PathType,
    json_option,
    out_option,
    print_json,
    print_written,
    runs,
    stderr_console,
)


def run(args: argparse.Namespace) -> int:
    from kvclaims.spec.schema import drifted_schemas, generate_schemas, write_schemas
    from kvclaims.spec.schema_docs import drifted_docs, write_docs
    from kvclaims.statemachine.system.table import render_docs as rule_event_docs

    if args.check == "":  # `-o DIR --check`: the flag form
        if args.out is None:
            stderr_console().print("error: --check needs -o DIR (the schemas to compare with)")
            return Exit.invalid_input
        args.check, args.out = args.out, None
    if args.docs is not None and args.out is None and args.check is None:
        stderr_console().print("error: --docs needs --out DIR or --check DIR (the schemas to render from)")
        return Exit.invalid_input
    if args.out is not None:
        written = write_schemas(args.out)
        if args.docs is not None:
            written += write_docs(args.out, args.docs, rule_event_docs)
        print_written(written, as_json=args.json)
        return Exit.ok
    if args.check is not None:
        drifted = [Path(args.check) / name for name in drifted_schemas(Path(args.check))]
        if args.docs is not None and not drifted:
            drifted += [
                args.docs / name for name in drifted_docs(Path(args.check), args.docs, rule_event_docs)
            ]
        fix = f"kvclaims schema -o {args.check}" + (f" --docs {args.docs}" if args.docs else "")
        for path in drifted:
            stderr_console().print(f"drifted: {path} (run: {fix})")
        return Exit.not_sound if drifted else Exit.ok
    print_json(generate_schemas())
    return Exit.ok


@click.command(
    "schema",
    help=__doc__,
    short_help="write or check the JSON Schemas of descriptors and trace v1 (and the docs from them)",
)
@out_option("write the schema files here (or, with --check, compare with them)")
@click.option(
    "--check",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[DIR]",
    help="write nothing; exit 1 if the schemas in -o DIR (or in DIR) drifted",
)
@click.option(
    "--docs",
    type=PathType,
    metavar="DOCS",
    help="also render (or, with --check, check) the format references in DOCS",
)
@json_option
def command(**options: object) -> int:
    return runs(run)(**options)
