"""MicroRuntime old-vs-new: identical traces and the speed-up, measured in one run.

    .venv/bin/python bench/microruntime_ab.py --base OTHER_CHECKOUT [--operations 100000] [--rounds 3]

OTHER_CHECKOUT is another checkout of kvclaims (e.g. `git worktree add ../kvclaims-base main`). Both
trees run in child processes (PYTHONPATH set to each): first each prints a SHA-256 of every
trace it produces (every lab scenario; the bench workload and seeded small-pool workloads under
every policy, with and without a wall clock; seeded batches of the Hypothesis state machine
`MicroRuntimeMachine`, one digest per example); any difference is reported and the exit status
is 1. Then the memory-sink bench workload runs alternately in the two trees, `--rounds` times
each, and the best and median seconds and their ratio are printed. Nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

FUZZ_SEEDS = range(12)
MACHINE_SEEDS = range(6)
MACHINE_POLICIES = ("full_arbiter", "continuum_ttl_pin")  # the policies the machine's tests run
MACHINE_EXAMPLES = 25


def _digest(events: list[dict]) -> str:
    text = json.dumps(events, sort_keys=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def digests() -> dict[str, str]:
    """Digest of every trace this tree produces, keyed by what produced it."""
    from kvclaims.lab.micro_scenarios import SCENARIOS, run_scenario
    from kvclaims.microruntime.policies import POLICIES
    from kvclaims.microruntime.runtime import MicroRuntime
    from kvclaims.microruntime.tracing import TraceBuffer
    from kvclaims.microruntime.workload import WorkloadShape, apply, generate

    out: dict[str, str] = {}
    for name in SCENARIOS:
        for index, run in enumerate(run_scenario(name).runs):
            out[f"scenario/{name}/{index}/{run.label}"] = _digest([run.header, *run.events])
    shapes = [("bench", WorkloadShape(operations=20_000), False)]
    shapes += [
        (
            f"fuzz{seed}",
            WorkloadShape(operations=3_000, usable_blocks=96 + 64 * seed, objects=40, seed=seed),
            seed % 2 == 1,  # every other seed on a wall clock (claim events then carry t_ns)
        )
        for seed in FUZZ_SEEDS
    ]
    for label, shape, wall_clock in shapes:
        ops = generate(shape)
        for policy_name, policy in POLICIES.items():
            buffer = TraceBuffer()
            runtime = MicroRuntime(
                shape.usable_blocks, policy=policy, sink=buffer.append, wall_clock=wall_clock
            )
            try:
                apply(runtime, ops)
                runtime.close()
                result = _digest(buffer.events)
            except Exception as error:  # a failure must be the same failure in both trees
                result = f"{type(error).__name__}: {error} after {_digest(buffer.events)}"
            out[f"workload/{label}/{policy_name}"] = result
    return out | machine_digests()


def machine_digests() -> dict[str, str]:
    """Digest of the trace of every example of seeded `MicroRuntimeMachine` batches (wall
    clock, faults, restores, two-key checkpoints, TTL pins: what the workloads never do)."""
    from hypothesis import seed as hypothesis_seed
    from hypothesis.stateful import run_state_machine_as_test

    from kvclaims.lab.fuzz_settings import batches
    from kvclaims.lab.micro_fuzzing import MicroRuntimeMachine, _no_local_constants, fresh_machine
    from kvclaims.microruntime.policies import POLICIES

    class Recorded(MicroRuntimeMachine):
        traces: list[str]

        def teardown(self) -> None:
            type(self).traces.append(_digest(self.buffer.events))
            super().teardown()

    out: dict[str, str] = {}
    for policy_name in MACHINE_POLICIES:
        for seed in MACHINE_SEEDS:
            machine = hypothesis_seed(seed)(fresh_machine(Recorded, policy=POLICIES[policy_name], traces=[]))
            label = f"machine/{policy_name}/{seed}"
            try:
                with _no_local_constants():  # the same draws in both trees (see its docstring)
                    run_state_machine_as_test(
                        machine, settings=batches(MACHINE_EXAMPLES, stateful_step_count=50)
                    )
            except Exception as error:  # a failure must be the same failure in both trees
                out[f"{label}/failure"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
            for example, digest in enumerate(machine.traces):
                out[f"{label}/{example}"] = digest
    return out


def timed(operations: int) -> str:
    from kvclaims.microruntime.policies import POLICIES
    from kvclaims.microruntime.runtime import MicroRuntime
    from kvclaims.microruntime.tracing import TraceBuffer
    from kvclaims.microruntime.workload import WorkloadShape, apply, generate

    shape = WorkloadShape(operations=operations)
    ops = generate(shape)
    buffer = TraceBuffer()
    runtime = MicroRuntime(shape.usable_blocks, policy=POLICIES["full_arbiter"], sink=buffer.append)
    start, cpu_start = time.perf_counter(), time.process_time()
    apply(runtime, ops)
    runtime.close()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return json.dumps({"seconds": elapsed, "cpu_seconds": cpu, "events": runtime.events_emitted})


def _child(tree: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", type=Path)
    parser.add_argument("--operations", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=("digests", "timed"), help=argparse.SUPPRESS)
    parser.add_argument("--timing-only", action="store_true", help="skip the trace comparison")
    args = parser.parse_args(argv)
    if args.child == "digests":
        print(json.dumps(digests()))
        return 0
    if args.child == "timed":
        print(timed(args.operations))
        return 0
    if args.base is None:
        parser.error("--base is required")
    trees = {"base": args.base.resolve(), "new": HERE}
    found = {
        name: {} if args.timing_only else json.loads(_child(tree, "--child", "digests"))
        for name, tree in trees.items()
    }
    differing = sorted(
        k for k in found["base"].keys() | found["new"].keys() if found["base"].get(k) != found["new"].get(k)
    )
    print(f"traces compared: {len(found['new'])}, differing: {len(differing)}")
    for key in differing:
        print(f"  differs: {key}")
    # CPU seconds of the child: on a shared machine wall time mostly measures the neighbours.
    seconds: dict[str, list[float]] = {name: [] for name in trees}
    events = 0
    for _ in range(args.rounds):
        for name, tree in trees.items():
            result = json.loads(_child(tree, "--child", "timed", "--operations", str(args.operations)))
            seconds[name].append(result["cpu_seconds"])
            events = result["events"]
    for name, values in seconds.items():
        print(
            f"{name:>4}: {events} events, best {min(values):.2f}s CPU: {events / min(values):,.0f} events/s, "
            f"median {statistics.median(values):.2f}s CPU"
        )
    best = min(seconds["base"]) / min(seconds["new"])
    median = statistics.median(seconds["base"]) / statistics.median(seconds["new"])
    print(f"speed-up base/new (CPU time): best {best:.2f}x, median {median:.2f}x")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
