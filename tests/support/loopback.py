"""Run a command inside a loopback-only network namespace (for Ray, which listens on every
interface whatever address it is given; the project's network rule allows it only there)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from functools import cache


@cache
def why_no_loopback_ray() -> str | None:
    """Why Ray cannot run in a loopback-only namespace here, or None when it can."""
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed (the ray extra: pip install 'kvclaims[ray]')"
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        return "a network namespace needs root, unshare and ip"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        return f"unshare -n failed: {probe.stderr.decode(errors='replace').strip()}"
    return None


def run_in_loopback(argv: list[str], *, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """`argv` in a new network namespace whose only interface is `lo` (brought up first)."""
    script = 'ip link set lo up && exec "$@"'
    return subprocess.run(
        ["unshare", "-n", "sh", "-c", script, "sh", *argv],
        capture_output=True,
        timeout=timeout,
        check=False,
    )
