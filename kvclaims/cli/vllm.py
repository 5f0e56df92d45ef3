"""Resident claims on vLLM 0.32: the vLLM binding's scenario lanes, sweep, fuzzing, repeats.

\b
The scheduler lane drives vLLM's real Scheduler / KVCacheManager / BlockPool with fabricated
model outputs (CPU, no model); the engine lane runs `vllm.LLM` end to end on a tiny
random-weight Llama with the binding's scheduler, offload connector, CPU-tier policy and CPU
offload worker. Every scenario writes one kvclaims trace v1, prints what it measured, and is
checked by refinement. `--list` works without vLLM.

Without -o, a command writes to a new folder in the user's data directory (`vllm-<command>-<UTC
time>`) and names it at the end (`--json`: in its object).

Exit codes: 0 when every trace got its expected verdict (positives accepted; controls rejected,
or for engine-lane controls accepted without restoration evidence for their claim), every fuzz
example passed and `descriptor --check` found no drift; 1 when not; 2 for bad input or a missing
or unsupported vLLM (`make setup-vllm` installs it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import click

from kvclaims.cli._common import (
    Exit,
    PathType,
    json_option,
    new_run_folder,
    out_option,
    out_or_new_run_folder,
    print_json,
    print_names,
    print_table,
    print_written,
    runs,
    stderr_console,
    stdout_console,
)

LANES = ("scheduler", "engine")
RUN_FOLDERS = {command: f"vllm-{command}" for command in ("scenario", "sweep", "fuzz", "repeat")}
"""The name of the folder each command writes to without -o (`new_run_folder`)."""


def _vllm_problem() -> str | None:
    from kvclaims.vllm_binding.plugin import installed_vllm_version, unsupported_reason

    return unsupported_reason(installed_vllm_version())


def _refuse_without_vllm() -> int | None:
    problem = _vllm_problem()
    if problem is None:
        return None
    from kvclaims.cli._common import print_problems
    from kvclaims.spec.errors import Problem

    print_problems([Problem("kvclaims vllm", problem)])
    return Exit.invalid_input


def _run_scenario(args: argparse.Namespace) -> int:
    from kvclaims.lab.engine_scenarios import engine_scenario_names
    from kvclaims.lab.scheduler_scenarios import SCENARIOS, scenario_names
    from kvclaims.spec.errors import InputError, Problem

    if args.list:
        names = engine_scenario_names() if args.lane == "engine" else scenario_names(args.lane)
        print_names(names, as_json=args.json)
        return Exit.ok
    if args.name is None:
        raise InputError([Problem("kvclaims vllm scenario", "give a scenario NAME, or --list")])
    if args.lane == "engine":
        return _run_engine_scenario(args)
    if args.name not in SCENARIOS:
        raise InputError([Problem("kvclaims vllm scenario", f"unknown scenario {args.name!r} (see --list)")])
    refused = _refuse_without_vllm()
    if refused is not None:
        return refused
    from kvclaims.lab.scheduler_scenarios import run_scenario
    from kvclaims.refinement import check_trace

    trace = _trace_to_write(args)
    result = run_scenario(args.name, trace)
    verdict = check_trace(trace)
    expected = "rejected" if SCENARIOS[args.name].control else "accepted"
    ok = str(verdict.outcome) == expected
    if args.json:
        print_json(
            {
                "scenario": result.name,
                "lane": args.lane,
                "control": SCENARIOS[args.name].control,
                "trace": str(trace),
                "verdict": str(verdict.outcome),
                "verdict_reason": verdict.reason,
                "numbers": result.numbers,
            }
        )
    else:
        print_table(
            f"vllm scenario {result.name} ({args.lane} lane): {SCENARIOS[args.name].summary}",
            ["measure", "value"],
            [
                (key, value if isinstance(value, str) else json.dumps(value))
                for key, value in result.numbers.items()
            ],
        )
        console = stdout_console()
        console.print(f"trace written: {trace}")
        console.print(f"refinement: {verdict.outcome} ({verdict.reason}); expected {expected}")
    return Exit.ok if ok else Exit.not_sound


def _trace_to_write(args: argparse.Namespace) -> Path:
    """`-o`, else NAME.ndjson in a new folder of the data directory."""
    return args.out or new_run_folder(RUN_FOLDERS["scenario"]) / f"{args.name}.ndjson"


def _vllm_logs_to_stderr() -> None:
    """vLLM logs to stdout by default; this command's stdout is its result (JSON or a table)."""
    import logging
    import os

    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # if vLLM configures later
    for handler in logging.getLogger("vllm").handlers:  # if it already did
        if type(handler) is logging.StreamHandler:
            handler.setStream(sys.stderr)


def _run_engine_scenario(args: argparse.Namespace) -> int:
    from kvclaims.lab.engine_scenarios import ENGINE_SCENARIOS
    from kvclaims.spec.errors import InputError, Problem

    scenario = ENGINE_SCENARIOS.get(args.name)
    if scenario is None:
        raise InputError(
            [Problem("kvclaims vllm scenario", f"unknown engine-lane scenario {args.name!r} (see --list)")]
        )
    refused = _refuse_without_vllm()
    if refused is not None:
        return refused
    from kvclaims.lab.engine_lane import EngineLane
    from kvclaims.lab.engine_scenarios import judge, run_engine_scenario
    from kvclaims.refinement import check_trace
    from kvclaims.refinement.evidence import evidence_items

    trace = _trace_to_write(args)
    _vllm_logs_to_stderr()
    if args.engine_core == "multiprocess":
        from kvclaims.lab.production_engines import MultiprocessLane

        lane: EngineLane = MultiprocessLane()  # starts one engine per scenario, in `begin`
    else:
        with stdout_console().status("starting vLLM (tiny model, CPU)"):
            lane = EngineLane()
            _vllm_logs_to_stderr()
    try:
        result = run_engine_scenario(lane, args.name, trace)
    finally:
        lane.close()
    verdict = check_trace(trace)
    outcome, rule = str(verdict.outcome), str(verdict.rule) if verdict.rule else None
    evidence = (
        [
            (i.obligation.value, list(i.anchor.claim_ids))
            for i in evidence_items(verdict, trace, relative_to=trace.parent)
        ]
        if outcome == "accepted"
        else []
    )
    problem = judge(scenario, outcome, rule, evidence)
    expected = scenario.expect.outcome + (f" ({scenario.expect.rule})" if scenario.expect.rule else "")
    if args.json:
        print_json(
            {
                "scenario": args.name,
                "lane": "engine",
                "engine_core": args.engine_core,
                "control": scenario.control,
                "trace": str(trace),
                "verdict": outcome,
                "verdict_reason": verdict.reason,
                "expected": expected,
                "as_expected": problem is None,
                "problem": problem,
                "evidenced": sorted({o for o, _ in evidence}),
                "numbers": result.numbers,
            }
        )
    else:
        print_table(
            f"vllm scenario {args.name} (engine lane): {scenario.summary}",
            ["measure", "value"],
            [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in result.numbers.items()],
        )
        console = stdout_console()
        console.print(f"trace written: {trace}")
        console.print(f"refinement: {outcome} ({verdict.reason}); expected {expected}")
        if problem is not None:
            console.print(f"[bold red]not as expected:[/] {problem}")
    return Exit.ok if problem is None else Exit.not_sound


def _run_tiny_model(args: argparse.Namespace) -> int:
    from kvclaims.cli._common import print_problems
    from kvclaims.lab.tiny_model import build_tiny_model
    from kvclaims.spec.errors import Problem

    try:
        path = build_tiny_model(args.directory, hybrid=args.hybrid)
    except ImportError as error:
        reason = f"needs torch and transformers, installed with vLLM (make setup-vllm): {error}"
        print_problems([Problem("kvclaims vllm tiny-model", reason)])
        return Exit.invalid_input
    print_written([path], as_json=args.json)
    return Exit.ok


def _run_repeat(args: argparse.Namespace) -> int:
    from kvclaims.spec.errors import InputError, Problem

    if args.runs < 1:
        raise InputError([Problem("kvclaims vllm repeat", "--runs must be at least 1")])
    refused = _refuse_without_vllm()
    if refused is not None:
        return refused
    from rich.progress import Progress

    from kvclaims.lab.repeat import repeat, write_aggregate

    names = [n for n in args.scenarios.split(",") if n] if args.scenarios else None
    out = out_or_new_run_folder(args.out, RUN_FOLDERS["repeat"])
    with Progress(transient=True, disable=not stdout_console().is_terminal) as progress:
        task = progress.add_task("repetitions (fresh processes)", total=args.runs)
        try:
            summary = repeat(out, args.runs, names, on_run=lambda i: progress.update(task, completed=i))
        except KeyError as error:
            raise InputError([Problem("kvclaims vllm repeat", str(error))]) from None
    json_path, md_path = write_aggregate(out, summary)
    if args.json:
        print_json(summary | {"out": str(out)})
    else:
        stdout_console().print(md_path.read_text(encoding="utf-8"))
        stdout_console().print(f"aggregate: {json_path} and {md_path}")
    every_gate = all(g["passes"] == g["runs"] for g in summary["gates"].values())
    ok = (
        every_gate
        and summary["controls"]["passes"] == 0
        and summary["processes_completed"] == summary["runs"]
    )
    ok = ok and all(e["as_expected"] == e["runs"] for e in summary["scenarios"].values())
    return Exit.ok if ok else Exit.not_sound


def _run_descriptor(args: argparse.Namespace) -> int:
    from kvclaims.spec.errors import InputError, Problem

    if not args.source.is_dir():
        raise InputError([Problem(str(args.source), "no such directory")])
    from kvclaims.lab.vllm_descriptor import generate

    text = generate(args.source, args.out)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
        if current != text:
            stderr_console().print(f"[bold red]{args.out} differs from what {args.source} generates[/]")
            return Exit.not_sound
        stderr_console().print(f"{args.out} is what {args.source} generates")
        return Exit.ok
    args.out.write_text(text, encoding="utf-8")
    print_written([args.out], as_json=args.json)
    return Exit.ok


def _run_pressure(args: argparse.Namespace) -> int:
    refused = _refuse_without_vllm()
    if refused is not None:
        return refused
    from kvclaims.lab.pressure_controls import run_controls, write_artifact

    result = run_controls(args.runtime)
    write_artifact(result, args.out)
    for name, control in result["controls"].items():
        print(f"{name}: {control['passes']}/{control['runs']} trials as soft priority predicts")
    print_written([args.out], as_json=args.json)
    return Exit.ok


def _run_sweep(args: argparse.Namespace) -> int:
    refused = _refuse_without_vllm()
    if refused is not None:
        return refused
    from kvclaims.lab.scheduler_scenarios import capacity_sweep
    from kvclaims.refinement import check_trace

    out = out_or_new_run_folder(args.out, RUN_FOLDERS["sweep"])
    rows = capacity_sweep(out)
    verdicts = {path.name: str(check_trace(path).outcome) for path in sorted(out.glob("sweep-*.ndjson"))}
    ok = all(outcome == "accepted" for outcome in verdicts.values())
    if args.json:
        print_json({"rows": rows, "verdicts": verdicts, "traces": str(out)})
    else:
        columns = list(rows[0])
        print_table(
            "capacity sweep: 60-block resident + 70-block active prefill (vLLM scheduler lane)",
            columns,
            [[json.dumps(row[c]) for c in columns] for row in rows],
        )
        stdout_console().print(
            f"{len(verdicts)} traces in {out}/: "
            + ", ".join(f"{n} {o}" for o, n in _counts(verdicts.values()).items())
        )
    return Exit.ok if ok else Exit.not_sound


def _run_fuzz(args: argparse.Namespace) -> int:
    refused = _refuse_without_vllm()
    if refused is not None:
        return refused
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test
    from rich.progress import Progress

    from kvclaims.lab import scheduler_fuzzing

    out = out_or_new_run_folder(args.out, RUN_FOLDERS["fuzz"])
    out.mkdir(parents=True, exist_ok=True)
    scheduler_fuzzing.SchedulerFuzz.trace_dir = out
    profile = settings(
        scheduler_fuzzing.CI_SETTINGS,
        max_examples=args.examples,
        stateful_step_count=args.steps,
        derandomize=args.derandomize,
        print_blob=True,
    )
    failure: BaseException | None = None
    with Progress(transient=True, disable=not stdout_console().is_terminal) as progress:
        task = progress.add_task("fuzzing vLLM's scheduler", total=args.examples)
        scheduler_fuzzing.SchedulerFuzz.on_example = lambda: progress.update(
            task, completed=scheduler_fuzzing.STATS.examples
        )
        try:
            run_state_machine_as_test(scheduler_fuzzing.SchedulerFuzz, settings=profile)
        except Exception as error:  # falsified invariants, rejected traces, crashes (or a group)
            failure = error
        finally:
            scheduler_fuzzing.SchedulerFuzz.on_example = None
    summary = scheduler_fuzzing.STATS.summary()
    if args.json:
        print_json({**summary, "failure": None if failure is None else _describe(failure), "out": str(out)})
    else:
        events = summary.pop("events")
        print_table(
            "vllm fuzz (long profile)", ["measure", "value"], [(k, json.dumps(v)) for k, v in summary.items()]
        )
        print_table("events in the traces", ["event", "count"], [(k, str(v)) for k, v in events.items()])
        if failure is not None:
            stdout_console().print(f"[bold red]falsified:[/] {_describe(failure)}")
        stdout_console().print(f"traces in {out}/")
    return Exit.ok if failure is None else Exit.not_sound


def _describe(failure: BaseException) -> str:
    """One line per failure Hypothesis found (it groups distinct ones)."""
    if isinstance(failure, BaseExceptionGroup):
        return " | ".join(_describe(inner) for inner in failure.exceptions)
    return f"{type(failure).__name__}: {failure}"


def _counts(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def demo_stage(out: Path) -> str:
    """`kvclaims demo` stage: every scheduler-lane scenario on vLLM's real scheduler into
    OUT/vllm, each trace checked by refinement; raises if a verdict disagrees with the
    scenario's kind. Reports that it did not run when vLLM is not installed."""
    problem = _vllm_problem()
    if problem is not None:
        return f"not run: {problem}"
    from kvclaims.lab.scheduler_scenarios import SCENARIOS, run_scenario
    from kvclaims.refinement import check_trace

    target = out / "vllm"
    summary: dict[str, Any] = {}
    for name, scenario in SCENARIOS.items():
        result = run_scenario(name, target / f"{name}.ndjson")
        outcome = str(check_trace(result.trace_path).outcome)
        if outcome != ("rejected" if scenario.control else "accepted"):
            raise RuntimeError(f"vllm scenario {name}: refinement says {outcome}")
        summary[name] = {"verdict": outcome, **result.numbers}
    (target / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    hard, native, live = summary["hard-60-70-80"], summary["native-60-70-80"], summary["live-pressure-40-46"]
    agents = summary["continuum-agent-jobs"]
    stock, claimed = agents["stock_continuum_like_pins"], agents["claims"]
    controls = sum(1 for s in SCENARIOS.values() if s.control)
    return (
        f"{len(summary)} scenarios on vLLM's scheduler ({len(summary) - controls} accepted, "
        f"{controls} controls rejected); stock: {native['resident_blocks_evicted']} resident blocks "
        "evicted, 0 harm; hard claim: "
        f"{hard['protected_resident_blocks']} + {hard['active_live_blocks_required']} = "
        f"{hard['resident_plus_active_blocks']} > {hard['usable_blocks']}, refused, shortfall "
        f"{hard['capacity_shortfall_blocks']}; live: {live['resident_plus_active_blocks']} > "
        f"{live['usable_blocks']}, shortfall {live['capacity_shortfall_blocks']}; Continuum TTL pins: "
        f"stock-like {stock['peak_pinned_blocks']}/{agents['usable_blocks']} blocks pinned, "
        f"{stock['jobs_completed']}/{agents['jobs']} jobs done; as claims {claimed['peak_pinned_blocks']} "
        f"pinned, {claimed['rejected']} pins rejected, {claimed['jobs_completed']}/{agents['jobs']} done"
    )


def hybrid_demo_stage(out: Path) -> str:
    """`kvclaims demo` stage: seed 002 on one `vllm.LLM` with the tiny hybrid model (CPU) into
    OUT/vllm-hybrid: a cold run, a two-key claim, resumes compared with the cold run, and one
    caught corruption (a restore that keeps the stored payload but realizes another value),
    plus the silent-resume control; raises if a resume differs from the cold run, the
    corruption is served, or a verdict is not the expected one."""
    problem = _vllm_problem()
    if problem is not None:
        return f"not run: {problem}"
    import time

    from kvclaims.lab.hybrid_lane import HybridLane, run_resume, run_silent_control
    from kvclaims.refinement import check_trace

    target = out / "vllm-hybrid"
    started = time.perf_counter()
    lane = HybridLane()
    try:
        resume = run_resume(lane, target / "hybrid-resume.ndjson", repeats=2, faults=("restore_transposed",))
        control = run_silent_control(lane, target / "control-silent-resume.ndjson")
    finally:
        lane.close()
    seconds = time.perf_counter() - started
    caught = resume.caught["restore_transposed"]
    verdicts = {path.stem: check_trace(path) for path in (resume.trace_path, control.trace_path)}
    wrong = _hybrid_problems(resume, caught, {name: str(v.outcome) for name, v in verdicts.items()})
    if wrong:
        raise RuntimeError("vllm hybrid lane: " + "; ".join(wrong))
    state_tokens = resume.resumes[0].cached_tokens
    return (
        f"tiny Qwen3-Next (alignment mode): {len(resume.resumes)} resumes from a {state_tokens}-token "
        f"state equal the cold run (max |d logit| {resume.max_abs_diff}); a restore that kept "
        f"the payload was caught ({caught.stop_reason}); silent-resume control served a "
        f"{control.served.max_abs_diff(control.cold):.4f}-off first step and was rejected by "
        f"{verdicts['control-silent-resume'].rule}; {lane.start_seconds:.1f} s start, {seconds:.1f} s in all"
    )


def _hybrid_problems(resume: Any, caught: Any, outcomes: dict[str, str]) -> list[str]:
    """What in the hybrid lane's demo run is not as seed 002 requires."""
    problems = []
    if resume.max_abs_diff != 0.0 or any(r.token_ids != resume.cold.token_ids for r in resume.resumes):
        problems.append(f"a resume differs from the cold run (max |d logit| {resume.max_abs_diff})")
    if caught.finish_reason != "abort":
        problems.append(f"the corrupted resume was served ({caught.finish_reason})")
    if outcomes["hybrid-resume"] != "accepted":
        problems.append(f"the resume trace is {outcomes['hybrid-resume']}, not accepted")
    if outcomes["control-silent-resume"] != "rejected":
        problems.append(f"the control is {outcomes['control-silent-resume']}, not rejected")
    return problems


def engine_demo_stage(out: Path) -> str:
    """`kvclaims demo` stage: every engine-lane scenario once on one `vllm.LLM` (tiny model,
    CPU) into OUT/vllm-engine, each trace checked by refinement; raises if a verdict is not the
    scenario's expected one. Reports that it did not run when vLLM is not installed."""
    problem = _vllm_problem()
    if problem is not None:
        return f"not run: {problem}"
    import time

    from kvclaims.lab.engine_lane import EngineLane
    from kvclaims.lab.engine_scenarios import ENGINE_SCENARIOS, judge, run_engine_scenario
    from kvclaims.refinement import check_trace
    from kvclaims.refinement.evidence import evidence_items

    target = out / "vllm-engine"
    lane = EngineLane()
    started = time.perf_counter()
    summary: dict[str, Any] = {}
    try:
        for name, scenario in ENGINE_SCENARIOS.items():
            result = run_engine_scenario(lane, name, target / f"{name}.ndjson")
            verdict = check_trace(result.trace_path)
            outcome = str(verdict.outcome)
            evidence = (
                [
                    (i.obligation.value, list(i.anchor.claim_ids))
                    for i in evidence_items(verdict, result.trace_path, relative_to=target)
                ]
                if outcome == "accepted"
                else []
            )
            wrong = judge(scenario, outcome, str(verdict.rule) if verdict.rule else None, evidence)
            if wrong is not None:
                raise RuntimeError(f"vllm engine-lane scenario {name}: {wrong} ({verdict.reason})")
            summary[name] = {
                "verdict": outcome,
                "rule": str(verdict.rule) if verdict.rule else None,
                **result.numbers,
            }
    finally:
        lane.close()
    seconds = time.perf_counter() - started
    (target / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    path_b = summary["path-b-restore-failure"]
    latency = path_b["failure_to_outcome_ns"][0] / 1000 if path_b["failure_to_outcome_ns"] else float("nan")
    controls = sum(1 for s in ENGINE_SCENARIOS.values() if s.control)
    blocking = ", ".join(map(str, path_b["reuse_refused_blocking"] or [])) or "no claim"
    return (
        f"{len(summary)} scenarios on vllm.LLM in {lane.start_seconds:.1f} s start + {seconds:.1f} s "
        f"({len(summary) - controls} accepted, {controls} controls as expected); path A restored "
        f"{summary['path-a-restore']['reuse_num_cached_tokens']} tokens from the CPU tier; path B refused "
        f"naming {blocking} {latency:.0f} us after the failed load was reported"
    )


@click.group("vllm", help=__doc__, short_help="run resident-claim scenarios, sweeps and fuzzing on vLLM 0.32")
def command() -> None:
    pass


lane_option = click.option(
    "--lane", type=click.Choice(LANES), default="scheduler", show_default=True, help="which vLLM lane"
)


@command.command("scenario")
@click.argument("name", required=False, metavar="[NAME]")
@click.option("--list", is_flag=True, help="print scenario names, one per line (works without vLLM)")
@lane_option
@click.option(
    "--engine-core",
    type=click.Choice(("in-process", "multiprocess")),
    default="in-process",
    show_default=True,
    help="engine lane: vLLM's engine core in this process, or in its own (the server's default)",
)
@out_option("trace to write", run_folder=RUN_FOLDERS["scenario"], run_file="NAME.ndjson", metavar="TRACE")
@json_option
def _scenario_command(**options: object) -> int:
    """Run one scenario on vLLM (or --list them): write its trace, print what it measured, check
    the trace by refinement. Names starting with `control-` are negative controls."""
    return runs(_run_scenario)(**options)


@command.command("sweep")
@lane_option
@out_option("folder for the sweep's traces", run_folder=RUN_FOLDERS["sweep"])
@json_option
def _sweep_command(**options: object) -> int:
    """The 60/70 capacity sweep over 80..150 usable blocks: stock vLLM against the binding."""
    return runs(_run_sweep)(**options)


@command.command("fuzz")
@click.option("--examples", type=int, default=2000, show_default=True, metavar="N", help="examples to run")
@click.option("--steps", type=int, default=60, show_default=True, metavar="M", help="rules per example")
@click.option("--derandomize", is_flag=True, help="the same examples on every run")
@out_option("folder for the fuzzed examples' traces", run_folder=RUN_FOLDERS["fuzz"])
@json_option
def _fuzz_command(**options: object) -> int:
    """Fuzz vLLM's scheduler with the binding (the long profile of the Hypothesis machine)."""
    return runs(_run_fuzz)(**options)


@command.command("tiny-model")
@click.argument("directory", type=PathType, metavar="DIR")
@click.option(
    "--hybrid", is_flag=True, help="the tiny hybrid Qwen3-Next (gated delta net + attention; run it in bf16)"
)
@json_option
def _tiny_model_command(**options: object) -> int:
    """Build the engine lane's tiny random-weight Llama (or, with --hybrid, Qwen3-Next) in DIR
    (needs torch and transformers)."""
    return runs(_run_tiny_model)(**options)


@command.command("repeat")
@click.option("--runs", type=int, default=30, show_default=True, metavar="N", help="repetitions")
@out_option("folder for the repetitions and their aggregate", run_folder=RUN_FOLDERS["repeat"])
@click.option("--scenarios", metavar="A,B,...", help="engine-lane scenarios (default: all)")
@json_option
def _repeat_command(**options: object) -> int:
    """Run the engine-lane scenarios N times, each repetition in a fresh process; prints the
    gates, the controls and the latencies over all runs."""
    return runs(_run_repeat)(**options)


@command.command("pressure")
@click.option(
    "--runtime",
    type=click.Choice(["stock", "binding"]),
    required=True,
    help="stock vLLM with scheduling_policy=priority, or the binding's soft_priority claims",
)
@out_option("artifact JSON to write", required=True, metavar="FILE")
@json_option
def _pressure_command(**options: object) -> int:
    """Run seed 000's three priority pressure controls (original, swapped, equal) on vLLM's
    scheduler and write the artifact descriptors anchor their observations on."""
    return runs(_run_pressure)(**options)


@command.command("descriptor")
@click.option(
    "--from", "source", type=PathType, required=True, metavar="DIR", help="accepted engine-lane traces"
)
@out_option("descriptor file to write (or, with --check, compare with)", required=True, metavar="FILE")
@click.option("--check", is_flag=True, help="write nothing; exit 1 if FILE differs from what DIR generates")
@json_option
def _descriptor_command(**options: object) -> int:
    """Generate the binding's descriptor from refinement-accepted engine-lane traces."""
    return runs(_run_descriptor)(**options)
