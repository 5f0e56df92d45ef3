"""`kvclaims serve`: the vLLM server command it builds (running it is test_server's job)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvclaims.cli.serve import SERVER_MODULE, server_command, server_environment
from kvclaims.spec.errors import InputError
from kvclaims.vllm_binding.config import BindingConfig
from kvclaims.vllm_binding.http import MIDDLEWARE


def option(command: list[str], flag: str) -> str:
    assert command.count(flag) == 1, (flag, command)
    return command[command.index(flag) + 1]


def test_the_binding_the_middleware_and_safe_defaults() -> None:
    command, print_only = server_command("m", ["--trace", "t.ndjson", "--port", "8001"], cpu=True)
    assert command[1:5] == ["-m", SERVER_MODULE, "--model", "m"] and not print_only
    assert option(command, "--scheduler-cls") == "kvclaims.vllm_binding.ClaimScheduler"
    assert option(command, "--middleware") == MIDDLEWARE
    section = json.loads(option(command, "--additional-config"))["kvclaims"]
    assert BindingConfig.model_validate(section).trace_path == "t.ndjson"
    assert section["typed_metadata"] is True
    assert option(command, "--port") == "8001"
    assert option(command, "--host") == "127.0.0.1"
    assert option(command, "--shutdown-timeout") == "3"
    assert option(command, "--kv-cache-memory-bytes") == str(64 << 20)
    assert option(command, "--gpu-memory-utilization") == "0.3"
    assert "--kv-transfer-config" not in command and "--trace" not in command


def test_vllm_arguments_override_the_defaults_in_either_spelling() -> None:
    given = ["--host=0.0.0.0", "--gpu_memory_utilization", "0.9", "--shutdown-timeout", "0"]
    command, _ = server_command("m", given, cpu=True)
    assert "--host" not in command and option(command, "--gpu_memory_utilization") == "0.9"
    assert option(command, "--shutdown-timeout") == "0"
    assert "--kv-cache-memory-bytes" in command  # still defaulted
    gpu, _ = server_command("m", [], cpu=False)
    assert "--kv-cache-memory-bytes" not in gpu and "--gpu-memory-utilization" not in gpu


def test_offload_adds_the_claim_connector_and_configs_merge() -> None:
    command, _ = server_command(
        "m",
        [
            "--offload-cpu-bytes",
            "1000",
            "--binding-config",
            '{"max_claims": 8}',
            "--additional-config",
            '{"x": 1}',
        ],
        cpu=False,
    )
    transfer = json.loads(option(command, "--kv-transfer-config"))
    assert transfer["kv_connector"] == "ClaimOffloadingConnector"
    additional = json.loads(option(command, "--additional-config"))
    assert additional["x"] == 1 and additional["kvclaims"]["max_claims"] == 8
    assert additional["kvclaims"]["offload"]["cpu_bytes"] == 1000


@pytest.mark.parametrize(
    "arguments",
    [
        ["--scheduler-cls", "other.Scheduler"],
        ["--kv-transfer-config", "{}"],
        ["--binding-config", "[1]"],
        ["--binding-config", '{"max_claims": 0}'],
        ["--binding-config", '{"unknown": 1}'],
        ["--additional-config", '{"kvclaims": {}}'],
        ["--additional-config", "not json"],
    ],
)
def test_conflicts_and_malformed_binding_config_are_input_errors(arguments: list[str]) -> None:
    with pytest.raises(InputError):
        server_command("m", arguments, cpu=False)


def test_a_loopback_server_keeps_vllms_internal_endpoints_on_loopback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VLLM_HOST_IP", raising=False)
    command, _ = server_command("m", [], cpu=False)
    assert server_environment(command)["VLLM_HOST_IP"] == "127.0.0.1"
    public, _ = server_command("m", ["--host", "0.0.0.0"], cpu=False)
    assert "VLLM_HOST_IP" not in server_environment(public)
    monkeypatch.setenv("VLLM_HOST_IP", "10.0.0.7")
    assert server_environment(command)["VLLM_HOST_IP"] == "10.0.0.7"


def test_print_command_prints_and_exits_zero() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kvclaims", "serve", "m", "--print-command", "--max-model-len", "512"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert SERVER_MODULE in result.stdout and "--max-model-len 512" in result.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "kvclaims", "serve", "m", "--scheduler-cls", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--scheduler-cls" in bad.stderr


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ('{"max_deferral_steps": "x"}', "max_deferral_steps"),
        ('{"unknown": 1}', "unknown"),
        ('{"offload": {"cpu_bytes": "lots"}}', "offload"),
    ],
)
def test_a_malformed_binding_config_names_its_field(config: str, field: str) -> None:
    with pytest.raises(InputError) as error:
        server_command("m", ["--binding-config", config], cpu=False)
    problem = error.value.problems[0]
    assert problem.field is not None and problem.field.startswith(field)


def test_serve_help_lists_its_own_flags() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kvclaims", "serve", "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0
    for flag in ("--trace PATH", "--offload-cpu-bytes N", "--binding-config JSON", "--print-command"):
        assert flag in result.stdout.split("Options:", 1)[1], flag
