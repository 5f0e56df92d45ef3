"""What every command prints with, without click: exit codes, label colours, terminal-or-plain
output (tables, JSON lines), located problems. `kvclaims check`'s plain command line runs on
this module alone (`kvclaims.cli.check`); rich is imported only where output is rendered."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvclaims.spec.errors import Problem

if TYPE_CHECKING:  # rich is imported where output is rendered: `check`'s verdict path stays light
    from rich.console import Console
    from rich.table import Table


SIGPIPE_EXIT = 128 + 13
"""What a shell reports for a process ended by SIGPIPE: `kvclaims ... | head` ends like `cat`."""

ABORTED_EXIT = 130
"""Interrupted (Ctrl-C): what a shell reports for SIGINT."""


class Exit(IntEnum):
    """Exit codes scripts can rely on. `check` adds 3 for an inconclusive trace."""

    ok = 0
    not_sound = 1
    invalid_input = 2
    inconclusive = 3


LABEL_STYLES = {
    "native_sound": "bold green",
    "sound_with_adapter": "cyan",
    "approximate": "yellow",
    "unknown": "dim",
    "rejected": "red",
    "invalid": "magenta",
}


def quiet_broken_pipe() -> int:
    """The reader went away (`| head`): stop writing, and let Python's exit-time flush of
    stdout go to /dev/null instead of printing a BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return SIGPIPE_EXIT


def is_terminal(stream: Any) -> bool:
    """Whether rich treats `stream` as a terminal, decided without importing rich (so a piped
    `check` never loads it): rich's rule, TTY_COMPATIBLE=0/1 first, then a set FORCE_COLOR
    (non-empty: a terminal), then the stream's isatty."""
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        return compatible == "1"
    force = os.environ.get("FORCE_COLOR")
    if force is not None:
        return force != ""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def stdout_console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_problems(problems: Iterable[Problem]) -> None:
    """Bad input, one located problem per line, on stderr."""
    from rich.markup import escape

    console = stderr_console()
    for problem in problems:
        console.print(f"[bold red]error:[/] {escape(problem.render())}")


def note_skipped_descriptor(path: Path) -> None:
    """`load_descriptors`' `on_skip` for the commands: one note on stderr naming the file."""
    from rich.markup import escape

    from kvclaims.spec.descriptor import NOT_A_DESCRIPTOR

    stderr_console().print(f"note: {escape(str(path))}: {NOT_A_DESCRIPTOR}")


def print_json(value: dict[str, Any]) -> None:
    """One JSON object on one line (a record of a JSON-lines stream)."""
    sys.stdout.write(json.dumps(value, sort_keys=False) + "\n")


def print_json_lines(values: Iterable[dict[str, Any]]) -> None:
    for value in values:
        print_json(value)


def print_written(paths: Iterable[Path], *, as_json: bool) -> None:
    """The files a command wrote: one path per line, or one JSON line `{"written": [...]}`."""
    paths = [str(p) for p in paths]
    if as_json:
        print_json({"written": paths})
    else:
        sys.stdout.write("".join(f"{p}\n" for p in paths))


def print_names(names: Iterable[str], *, as_json: bool) -> None:
    """A `--list`: one name per line, or one JSON line `{"name": ...}` per name."""
    if as_json:
        print_json_lines({"name": name} for name in names)
    else:
        sys.stdout.write("".join(f"{name}\n" for name in names))


def print_table(
    title: str, columns: Sequence[str], rows: Iterable[Sequence[str]], *, keys: Sequence[str] = ()
) -> None:
    """A rich table on a terminal, fitted to its width: `keys` columns (default: the first) are
    never wrapped or cut, the others wrap (folding long words); tab-separated lines with a
    header when piped."""
    console = stdout_console()
    rows = list(rows)
    if not console.is_terminal:
        sys.stdout.write("\t".join(columns) + "\n")
        for row in rows:
            sys.stdout.write("\t".join(row) + "\n")
        return
    console.print(terminal_table(title, columns, rows, keys=keys))


def terminal_table(
    title: str, columns: Sequence[str], rows: Iterable[Sequence[str]], *, keys: Sequence[str] = ()
) -> Table:
    from rich.table import Table

    key_columns = set(keys or columns[:1])
    table = Table(title=title, title_justify="left")
    for column in columns:
        if column in key_columns:
            table.add_column(column, no_wrap=True, overflow="fold")
        else:
            table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(_styled(cell) for cell in row))
    return table


def _styled(cell: str) -> str:
    from rich.markup import escape

    style = LABEL_STYLES.get(cell)
    return f"[{style}]{cell}[/]" if style else escape(cell)
