"""Judge which protection modes a runtime descriptor lowers, and at which adapter depth.

FILE is a descriptor (YAML), a directory of them, or `-` for one descriptor on stdin; without
FILE, the descriptors shipped with kvclaims. Rows are
each descriptor's `lowerings` (or every mode at every depth), narrowed by `--mode` / `--depth`
(both repeatable). `--json` prints one JSON object per row (JSON lines). Exit 0 when every
judged row is sound, 1 when one is not, 2 on invalid input. Every local trace a descriptor
cites is re-checked first (digest, refinement verdict, what its evidence export witnesses);
an anchor counts only for what its trace shows.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import click

from kvclaims.bundled import DESCRIPTORS
from kvclaims.cli._common import (
    Exit,
    json_option,
    print_json_lines,
    print_table,
    runs,
)
from kvclaims.spec.errors import InputError
from kvclaims.spec.tables import OBLIGATION_CODES
from kvclaims.spec.vocabulary import AdapterDepth, ProtectionMode


def run(args: argparse.Namespace) -> int:
    with _stdin_as_file(args.files) as files:
        return _judge(args, files)


@contextmanager
def _stdin_as_file(files: tuple[str, ...]) -> Iterator[list[str]]:
    """`-` becomes a temporary `stdin.yaml` (the descriptor loader reads files, and names them)."""
    if not files:
        yield [str(DESCRIPTORS)]
        return
    if "-" not in files:
        yield list(files)
        return
    with tempfile.TemporaryDirectory(prefix="kvclaims-stdin-") as folder:
        spooled = Path(folder) / "stdin.yaml"
        with spooled.open("wb") as sink:
            shutil.copyfileobj(sys.stdin.buffer, sink)  # the loader enforces its size limit
        try:
            yield [str(spooled) if f == "-" else f for f in files]
        except InputError as error:
            raise InputError(
                [replace(p, file="<stdin>") if p.file == str(spooled) else p for p in error.problems]
            ) from None


def _judge(args: argparse.Namespace, files: list[str]) -> int:
    from kvclaims.cli._recheck import load_rechecked
    from kvclaims.spec.lowering import lower_row

    modes = {ProtectionMode(m) for m in args.mode} if args.mode else None
    depths = {AdapterDepth(d) for d in args.depth} if args.depth else None
    verdicts = [
        lower_row(descriptor, row)
        for _, descriptor in load_rechecked(files)
        for row in descriptor.rows()
        if (modes is None or row.mode in modes) and (depths is None or row.depth in depths)
    ]
    if args.json:
        print_json_lines(
            v.summary()
            | ({"findings": [f.model_dump(mode="json") for f in v.findings]} if args.explain else {})
            for v in verdicts
        )
    else:
        print_table(
            "lowering verdicts",
            ["surface", "mode", "depth", "label", "subtype", "missing", "decided by"],
            [
                [
                    v.surface,
                    v.mode,
                    v.depth,
                    v.label,
                    v.subtype or "",
                    " ".join([OBLIGATION_CODES[o] for o in v.missing] + list(v.missing_atoms)),
                    v.decided_by,
                ]
                for v in verdicts
            ],
            keys=("surface", "mode", "depth", "label"),
        )
        if args.explain:
            _print_explanations(verdicts)
    return Exit.ok if all(v.label.is_sound for v in verdicts) else Exit.not_sound


def _print_explanations(verdicts: list) -> None:
    lines = []
    for v in verdicts:
        lines.append(f"{v.surface} / {v.mode} @ {v.depth}: {v.label} ({v.decided_by})")
        lines.extend(f"  - {reason}" for reason in v.reasons)
        if v.first_refused is not None:
            refused = v.first_refused
            lines.append(f"  first refused: {refused.label} by {refused.rule}: {refused.reason}")
    sys.stdout.write("\n".join(lines) + "\n")


@click.command(
    "lower", help=__doc__, short_help="judge which modes a runtime descriptor lowers, at which adapter depth"
)
@click.argument("files", nargs=-1, metavar="[FILE]...")
@click.option(
    "--mode", multiple=True, type=click.Choice([m.value for m in ProtectionMode]), help="repeatable"
)
@click.option("--depth", multiple=True, type=click.Choice([d.value for d in AdapterDepth]), help="repeatable")
@json_option
@click.option(
    "--explain", is_flag=True, help="add per-obligation findings (under each row, or in each JSON line)"
)
def command(**options: object) -> int:
    return runs(run)(**options)
