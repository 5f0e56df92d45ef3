"""The `kvclaims` command line (also `python -m kvclaims`).

Each subcommand is one module of this package exposing `register(subparsers)`; the module's
`run(args) -> int` does the work and returns an exit code from `kvclaims.cli._common.Exit`.
Heavy imports happen inside `run`, so `kvclaims lower` never loads Z3 or matplotlib.
Bad input of any kind is an `InputError`: printed with file, line and field, exit code 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kvclaims import __version__
from kvclaims.cli._common import Exit, print_problems
from kvclaims.spec.errors import InputError

COMMANDS: tuple[str, ...] = (
    "lower",
    "matrix",
    "schema",
    "prove",
    "adversary",
    "lifecycle",
    "scenario",
    "fuzz",
    "check",
    "vllm",
    "serve",
    "watch",
    "demo",
)
"""Subcommand modules, in the order `kvclaims --help` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvclaims",
        description="Resident KV claims: lowering judgments, proofs, runtime traces and "
        "refinement checks for LLM serving runtimes.",
    )
    parser.add_argument("--version", action="version", version=f"kvclaims {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"kvclaims.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return Exit.invalid_input
    try:
        return int(args.run(args))
    except InputError as error:
        print_problems(error.problems)
        return Exit.invalid_input
    except KeyboardInterrupt:
        return 130


def entry_point() -> None:
    sys.exit(main())
