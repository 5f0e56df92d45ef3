"""What every command shares: the shared options (`-o/--out`, `--json`, `--force`, `--jobs`,
`--ray`, `--descriptors`), the exit codes' help, and (re-exported from `kvclaims.cli._output`,
which needs no click) exit codes, label colours and terminal-or-plain output."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kvclaims.cli._output import (
    LABEL_STYLES,
    Exit,
    is_terminal,
    note_skipped_descriptor,
    print_json,
    print_json_lines,
    print_names,
    print_problems,
    print_table,
    print_written,
    stderr_console,
    stdout_console,
    terminal_table,
)

__all__ = [
    "EXIT_CODES_HELP",
    "LABEL_STYLES",
    "Exit",
    "PathType",
    "descriptors_option",
    "force_option",
    "is_terminal",
    "jobs_option",
    "json_option",
    "legacy_alias",
    "note_skipped_descriptor",
    "out_option",
    "print_json",
    "print_json_lines",
    "print_names",
    "print_problems",
    "print_table",
    "print_written",
    "ray_option",
    "runs",
    "stderr_console",
    "stdout_console",
    "terminal_table",
]

EXIT_CODES_HELP = """\b
Exit codes (every command):
  0  success: every verdict is sound / accepted, nothing drifted
  1  a verdict is not sound, a trace was rejected, a stage failed, a file drifted
  2  invalid input or options (always with file, line and field; never a traceback)
  3  inconclusive (`check`: the checker could not decide, e.g. an unknown event type)

\b
Conventions: -o/--out names what a command writes; --json prints JSON lines, one object per
line (one per record: a trace, a row, an obligation, a name of a --list; one line for a command
with one result); `-` reads stdin where a command reads input (check, lower)."""
"""The top-level help's epilog (`\\b` keeps click from rewrapping it)."""


PathType = click.Path(path_type=Path)


def out_option(help: str, *, default: Path | None = None, required: bool = False, metavar: str = "DIR"):
    """`-o/--out`: where a command writes (the one spelling for every command)."""
    return click.option(
        "-o", "--out", type=PathType, default=default, required=required, metavar=metavar, help=help
    )


def jobs_option(help: str):
    """`-j/--jobs N`: worker processes (the one spelling for every command; default: one per
    core this process may use, which the command works out)."""
    return click.option("-j", "--jobs", type=click.IntRange(min=1), metavar="N", help=help)


def ray_option(help: str):
    """`--ray [ADDRESS]`: run the command's independent units as Ray tasks on the cluster at
    ADDRESS (alone: a local cluster of --jobs CPUs, `kvclaims.refinement.fanout.LOCAL`)."""
    from kvclaims.refinement.fanout import LOCAL

    return click.option(
        "--ray",
        is_flag=False,
        flag_value=LOCAL,
        default=None,
        metavar="[ADDRESS]",
        help=help
        + " (alone: a local cluster of --jobs CPUs; needs the ray extra; Ray listens on every interface)",
    )


def descriptors_option(help: str):
    """`--descriptors DIR`: runtime descriptors to read, by default the ones shipped with kvclaims."""
    from kvclaims.bundled import DESCRIPTORS

    return click.option(
        "--descriptors",
        type=PathType,
        default=DESCRIPTORS,
        show_default="the shipped descriptors",
        metavar="DIR",
        help=help,
    )


json_option = click.option("--json", is_flag=True, help="print JSON lines instead of tables")
force_option = click.option("--force", is_flag=True, help="write into a non-empty --out folder")


def legacy_alias(old: str, new: str, **kwargs: Any):
    """A hidden old spelling of an option renamed for consistency; `runs` folds it into `new`."""
    return click.option(old, f"legacy_{new}", hidden=True, default=None, **kwargs)


def runs(run: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    """A click callback that hands its options to `run(args)` as one namespace (the legacy
    spellings folded into their new names)."""

    def callback(**options: Any) -> int:
        for key in [k for k in options if k.startswith("legacy_")]:
            value = options.pop(key)
            if value is not None:
                options[key.removeprefix("legacy_")] = value
        return run(argparse.Namespace(**options))

    return callback
