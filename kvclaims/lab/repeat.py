"""`kvclaims vllm repeat`: the engine-lane scenarios, N repetitions, each in a fresh process.

A repetition is one new Python process (`python -m kvclaims.lab.repeat --child DIR`)
that starts one engine and runs every selected scenario once on it, writing one trace per
scenario and `numbers.json`. Fresh processes mean nothing (compiled kernels aside) carries over
from one repetition to the next: no claim registry, no prefix cache, no connector state.

The parent then checks every trace with refinement (a harness concern: this module imports
`kvclaims.refinement`, the binding's runtime modules never do) and writes an aggregate, JSON and
Markdown: per scenario how often it got its expected verdict; the seed's gates (path A: restore
before a satisfied reuse; path B: same-claim failure -> claim outcome -> refusal naming the claim
before the finish; path C: only the target named, the other restored), each as passes / runs;
control passes (a control whose trace would count as a claim outcome: should be 0); and the
failure-to-outcome latency, from the failed load's report (worker, `time.monotonic_ns`) to the
refusal event, as percentiles, next to the binding's own share (scheduler receipt -> refusal).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvclaims.lab.engine_scenarios import ENGINE_SCENARIOS, PATH_GATES, judge

NUMBERS_FILE = "numbers.json"
AGGREGATE_JSON = "aggregate.json"
AGGREGATE_MD = "aggregate.md"
CHILD_TIMEOUT_SECONDS = 900


# -- the child: one repetition -----------------------------------------------------------------


def run_child(run_dir: Path, names: Sequence[str]) -> dict[str, Any]:
    """One repetition in this process: one engine, every scenario once; writes `numbers.json`."""
    from kvclaims.lab.engine_lane import EngineLane
    from kvclaims.lab.engine_scenarios import run_engine_scenario

    started = time.perf_counter()
    lane = EngineLane()
    record: dict[str, Any] = {"engine_start_seconds": lane.start_seconds, "scenarios": {}}
    try:
        for name in names:
            begin = time.perf_counter()
            result = run_engine_scenario(lane, name, run_dir / f"{name}.ndjson")
            record["scenarios"][name] = {"numbers": result.numbers, "seconds": time.perf_counter() - begin}
    finally:
        lane.close()
    record["process_seconds"] = time.perf_counter() - started
    (run_dir / NUMBERS_FILE).write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    return record


# -- the parent: N fresh processes, then the aggregate -------------------------------------------


def repeat(
    out: Path,
    runs: int,
    names: Sequence[str] | None = None,
    *,
    on_run: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run `runs` repetitions in fresh processes under `out/runs/NNN`, then aggregate."""
    selected = list(names or ENGINE_SCENARIOS)
    unknown = sorted(set(selected) - set(ENGINE_SCENARIOS))
    if unknown:
        raise KeyError(f"unknown engine-lane scenarios: {unknown}")
    environment = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    environment.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    for index in range(1, runs + 1):
        run_dir = out / "runs" / f"{index:03d}"
        run_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", __name__, "--child", str(run_dir), "--scenarios", ",".join(selected)]
        with (run_dir / "process.log").open("wb") as log:
            completed = subprocess.run(
                command, stdout=log, stderr=subprocess.STDOUT, env=environment, timeout=CHILD_TIMEOUT_SECONDS
            )
        (run_dir / "exit_code").write_text(f"{completed.returncode}\n", encoding="utf-8")
        if on_run is not None:
            on_run(index)
    return aggregate(out, selected)


def _gate(name: str, witnesses: set[str], numbers: dict[str, Any]) -> bool:
    """The seed's gate for paths A, B and C, on an accepted trace and its numbers."""
    if name == "path-a-restore":
        return "restore_before_reuse" in witnesses and numbers.get("reuse_reuse_satisfied") is True
    if name == "path-b-restore-failure":
        return (
            "restoration_failure_fail_closed" in witnesses
            and numbers.get("reuse_refused_blocking") == ["claim:A"]
            and numbers.get("reuse_stop_reason") == "kvclaims:refused:restoration_failed:claim:A"
        )
    if name == "path-c-multi-claim":
        return (
            "multi_claim_attribution" in witnesses
            and numbers.get("reuse-a_refused_blocking") == ["claim:A"]
            and numbers.get("reuse-b_restored") is True
            and numbers.get("reuse-b_reuse_satisfied") is True
            and numbers.get("reuse-b_refused_blocking") is None
        )
    raise KeyError(name)


def _percentiles(samples: list[int]) -> dict[str, Any]:
    if not samples:
        return {"samples": 0}
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return {
        "samples": len(ordered),
        "median_ns": statistics.median(ordered),
        "p95_ns": p95,
        "min_ns": ordered[0],
        "max_ns": ordered[-1],
    }


def aggregate(out: Path, names: Sequence[str] | None = None) -> dict[str, Any]:
    """Check every repetition's traces and summarise (see module docstring)."""
    from kvclaims.refinement import check_trace
    from kvclaims.refinement.evidence import evidence_items

    selected = list(names or ENGINE_SCENARIOS)
    run_dirs = sorted(p for p in (out / "runs").iterdir() if p.is_dir()) if (out / "runs").is_dir() else []
    per: dict[str, dict[str, Any]] = {
        name: {"runs": 0, "as_expected": 0, "outcomes": {}, "problems": []} for name in selected
    }
    gates = {
        name: {"gate": PATH_GATES[name], "runs": 0, "passes": 0} for name in PATH_GATES if name in selected
    }
    latency: dict[str, list[int]] = {"failure_to_outcome_ns": [], "scheduler_to_outcome_ns": []}
    path_b_latency: dict[str, list[int]] = {"failure_to_outcome_ns": [], "scheduler_to_outcome_ns": []}
    processes: list[dict[str, Any]] = []
    for run_dir in run_dirs:
        numbers_file = run_dir / NUMBERS_FILE
        record = json.loads(numbers_file.read_text(encoding="utf-8")) if numbers_file.is_file() else {}
        processes.append(
            {
                "run": run_dir.name,
                "exit_code": _exit_code(run_dir),
                "engine_start_seconds": record.get("engine_start_seconds"),
                "process_seconds": record.get("process_seconds"),
            }
        )
        for name in selected:
            trace = run_dir / f"{name}.ndjson"
            numbers = record.get("scenarios", {}).get(name, {}).get("numbers", {})
            entry = per[name]
            entry["runs"] += 1
            verdict = check_trace(trace)
            outcome = str(verdict.outcome)
            entry["outcomes"][outcome] = entry["outcomes"].get(outcome, 0) + 1
            evidence = []
            if outcome == "accepted":
                evidence = [
                    (item.obligation.value, list(item.anchor.claim_ids))
                    for item in evidence_items(verdict, trace, relative_to=out)
                ]
            problem = judge(
                ENGINE_SCENARIOS[name], outcome, str(verdict.rule) if verdict.rule else None, evidence
            )
            if problem is None:
                entry["as_expected"] += 1
            elif len(entry["problems"]) < 5:
                entry["problems"].append(f"{run_dir.name}: {problem} ({verdict.reason})")
            if name in gates:
                gates[name]["runs"] += 1
                witnesses = {w.kind.value for w in verdict.witnesses}
                gates[name]["passes"] += int(outcome == "accepted" and _gate(name, witnesses, numbers))
            for key, samples in latency.items():
                samples.extend(numbers.get(key, []))
                if name == "path-b-restore-failure":
                    path_b_latency[key].extend(numbers.get(key, []))
    for gate in gates.values():
        gate["pass_rate"] = gate["passes"] / gate["runs"] if gate["runs"] else None
    controls = [name for name in selected if ENGINE_SCENARIOS[name].control]
    return {
        "runs": len(run_dirs),
        "processes_completed": sum(1 for p in processes if p["exit_code"] == 0),
        "scenarios": per,
        "gates": gates,
        "controls": {
            "runs": sum(per[n]["runs"] for n in controls),
            "passes": sum(per[n]["runs"] - per[n]["as_expected"] for n in controls),
            "note": "a control passes when its trace would count as a claim outcome (must be 0)",
        },
        "latency_all_refusals": {key: _percentiles(samples) for key, samples in latency.items()},
        "latency_path_b": {key: _percentiles(samples) for key, samples in path_b_latency.items()},
        "processes": processes,
    }


def _exit_code(run_dir: Path) -> int | None:
    path = run_dir / "exit_code"
    return int(path.read_text().strip()) if path.is_file() else None


def write_aggregate(out: Path, summary: dict[str, Any]) -> tuple[Path, Path]:
    """`aggregate.json` and `aggregate.md` in `out`."""
    json_path, md_path = out / AGGREGATE_JSON, out / AGGREGATE_MD
    json_path.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(summary), encoding="utf-8")
    return json_path, md_path


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:.1f} us"


def render_markdown(summary: dict[str, Any]) -> str:
    lines = [
        "# Engine-lane repetitions (`kvclaims vllm repeat`)",
        "",
        f"{summary['runs']} repetitions, each a fresh process ({summary['processes_completed']} exited 0); "
        "every trace checked by refinement.",
        "",
        "| gate | passes / runs |",
        "|---|---|",
    ]
    for name, gate in summary["gates"].items():
        lines.append(f"| {name}: {gate['gate']} | {gate['passes']}/{gate['runs']} |")
    controls = summary["controls"]
    lines += [
        f"| negative controls counted as claim outcomes | {controls['passes']}/{controls['runs']} |",
        "",
        "| scenario | expected | as expected / runs | outcomes |",
        "|---|---|---|---|",
    ]
    for name, entry in summary["scenarios"].items():
        expect = ENGINE_SCENARIOS[name].expect
        wanted = expect.outcome + (f" ({expect.rule})" if expect.rule else "")
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(entry["outcomes"].items()))
        lines.append(f"| {name} | {wanted} | {entry['as_expected']}/{entry['runs']} | {outcomes} |")
    lines += [
        "",
        "Failure-to-outcome latency (monotonic clock): from the worker's report of the failed load",
        "into vLLM's invalid-KV-load path to the refusal event; and the binding's own share, from the",
        "scheduler's receipt of that report to the refusal event.",
        "",
        "| refusals | samples | median | p95 | min | max |",
        "|---|---|---|---|---|---|",
    ]
    for label, block in (("path B", summary["latency_path_b"]), ("all", summary["latency_all_refusals"])):
        for key, stats in block.items():
            if stats["samples"]:
                lines.append(
                    f"| {label}, {key.removesuffix('_ns').replace('_', ' ')} | {stats['samples']} | "
                    f"{_us(stats['median_ns'])} | {_us(stats['p95_ns'])} | {_us(stats['min_ns'])} | "
                    f"{_us(stats['max_ns'])} |"
                )
    problems = [p for entry in summary["scenarios"].values() for p in entry["problems"]]
    if problems:
        lines += ["", "## Not as expected", "", *(f"- {p}" for p in problems)]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """The child entry point (`python -m kvclaims.lab.repeat --child DIR`)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child", type=Path, required=True, metavar="DIR")
    parser.add_argument("--scenarios", default=",".join(ENGINE_SCENARIOS))
    args = parser.parse_args(argv)
    args.child.mkdir(parents=True, exist_ok=True)
    run_child(args.child, [n for n in args.scenarios.split(",") if n])
    return 0


if __name__ == "__main__":
    sys.exit(main())
