"""What every command shares: exit codes, label colours, terminal-or-plain output."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from enum import IntEnum
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvclaims.spec.errors import Problem


class Exit(IntEnum):
    """Exit codes scripts can rely on. `check` adds 3 for an inconclusive trace."""

    ok = 0
    not_sound = 1
    invalid_input = 2


LABEL_STYLES = {
    "native_sound": "bold green",
    "sound_with_adapter": "cyan",
    "approximate": "yellow",
    "unknown": "dim",
    "rejected": "red",
    "invalid": "magenta",
}


def stdout_console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_problems(problems: Iterable[Problem]) -> None:
    """Bad input, one located problem per line, on stderr."""
    console = stderr_console()
    for problem in problems:
        console.print(f"[bold red]error:[/] {escape(problem.render())}")


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False) + "\n")


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """A rich table on a terminal; tab-separated lines with a header when piped."""
    console = stdout_console()
    rows = list(rows)
    if not console.is_terminal:
        sys.stdout.write("\t".join(columns) + "\n")
        for row in rows:
            sys.stdout.write("\t".join(row) + "\n")
        return
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_styled(cell) for cell in row))
    console.print(table)


def _styled(cell: str) -> str:
    style = LABEL_STYLES.get(cell)
    return f"[{style}]{cell}[/]" if style else escape(cell)
