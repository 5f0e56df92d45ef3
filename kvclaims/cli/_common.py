"""What every command shares: the shared options (`-o/--out`, `--json`, `--force`, `--jobs`,
`--ray`, `--descriptors`), the exit codes' help, and (re-exported from `kvclaims.cli._output`,
which needs no click) exit codes, label colours and terminal-or-plain output."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
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
from kvclaims.spec.errors import InputError, Problem
from kvclaims.userdirs import data_directory

__all__ = [
    "DATA_DIRECTORY_RULE",
    "EXIT_CODES_HELP",
    "LABEL_STYLES",
    "MAX_RUN_FOLDER_SUFFIX",
    "Exit",
    "PathType",
    "descriptors_option",
    "force_option",
    "is_terminal",
    "jobs_option",
    "json_option",
    "legacy_alias",
    "new_run_folder",
    "note_skipped_descriptor",
    "out_option",
    "out_or_new_run_folder",
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
Conventions: -o/--out names what a command writes (a command that writes without it writes to
a new folder COMMAND-<UTC time> in $KVCLAIMS_OUT_DIR, else $XDG_DATA_HOME/kvclaims, else
~/.local/share/kvclaims, never the working directory, and names it at the end); --json prints
JSON lines, one object per line (one per record: a trace, a row, an obligation, a name of a
--list; one line for a command with one result); `-` reads stdin where a command reads input
(check, lower)."""
"""The top-level help's epilog (`\\b` keeps click from rewrapping it)."""


PathType = click.Path(path_type=Path)


DATA_DIRECTORY_RULE = "$KVCLAIMS_OUT_DIR, else $XDG_DATA_HOME/kvclaims, else ~/.local/share/kvclaims"
"""Where a command writes without -o (`data_directory`), as its help says it."""

MAX_RUN_FOLDER_SUFFIX = 1000
"""Runs of one command started in one second that get a folder of their own (`new_run_folder`)."""


def out_option(
    help: str,
    *,
    run_folder: str | None = None,
    run_file: str | None = None,
    required: bool = False,
    metavar: str = "DIR",
):
    """`-o/--out`: where a command writes (the one spelling for every command). `run_folder`
    names the command's default, a new folder `new_run_folder(run_folder)` (or the file
    `run_file` in it), which the command creates when it starts writing (the option's value is
    then None)."""
    default: str | bool = False
    if run_folder is not None:
        default = f"a new folder {run_folder}-<UTC time> in {DATA_DIRECTORY_RULE}"
        default = f"{run_file} in {default}" if run_file else default
    return click.option(
        "-o",
        "--out",
        type=PathType,
        required=required,
        metavar=metavar,
        show_default=default,
        help=help,
    )


def new_run_folder(command: str) -> Path:
    """Creates and returns a fresh folder for one run of `command`: `<data directory>/
    <command>-<UTC time>`, with `-2`, `-3`, ... when another run already took that name.
    Raises `InputError` naming the folder when it cannot be created."""
    root = data_directory()
    stem = f"{command}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        for number in range(1, MAX_RUN_FOLDER_SUFFIX + 1):
            folder = root / (stem if number == 1 else f"{stem}-{number}")
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            return folder
    except OSError as error:
        reason = f"cannot create the output folder: {error.strerror or error}"
        problem = Problem(str(root), f"{reason} (give -o, or set KVCLAIMS_OUT_DIR)", field="out")
        raise InputError([problem]) from None
    reason = f"{MAX_RUN_FOLDER_SUFFIX} runs started in this second already took this name (give -o)"
    raise InputError([Problem(str(root / stem), reason, field="out")])


def out_or_new_run_folder(out: Path | None, command: str) -> Path:
    """`-o`'s value when given, else a fresh `new_run_folder(command)`."""
    return out if out is not None else new_run_folder(command)


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
