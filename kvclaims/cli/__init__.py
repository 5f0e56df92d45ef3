"""The `kvclaims` command line (also `python -m kvclaims`).

The commands are built on click (`kvclaims.cli.app`, which lists them in `COMMANDS`).
`kvclaims check`'s plain command lines (a trace list with the options a check of files usually
has: `kvclaims.cli.check.plain_args`) run without it: a check then imports what checking needs
and nothing else, with the same output and exit code as through click (tests compare the two).
Bad input of any kind is an `InputError`: printed with file, line and field, exit code 2, never
a traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from kvclaims.cli._output import ABORTED_EXIT, Exit, print_problems, quiet_broken_pipe
from kvclaims.spec.errors import InputError


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line (default: this process's); returns its exit code (never raises for
    bad input)."""
    from kvclaims.cli import check

    args = check.plain_args(sys.argv[1:] if argv is None else list(argv))
    if args is None or os.name == "nt" or "_KVCLAIMS_COMPLETE" in os.environ:
        # anything else, click's Windows argument expansion and shell completion: click's
        from kvclaims.cli.app import run_click

        return run_click(argv)
    try:
        return check.run(args)
    except InputError as error:
        print_problems(error.problems)
        return Exit.invalid_input
    except BrokenPipeError:
        return quiet_broken_pipe()
    except (EOFError, KeyboardInterrupt):  # as click ends an interrupted command
        print(file=sys.stderr, flush=True)
        return ABORTED_EXIT


def __getattr__(name: str) -> Any:
    """`cli` (the click group) and `COMMANDS`, from `kvclaims.cli.app` when first asked for:
    importing this package loads no click."""
    if name in ("cli", "COMMANDS"):
        from kvclaims.cli import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def entry_point() -> None:
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = quiet_broken_pipe()
    sys.exit(code)
