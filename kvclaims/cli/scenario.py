"""Run a MicroRuntime scenario: write its trace, print what it measured.

`kvclaims scenario --list` prints every scenario name, one per line; names starting with
`control-` are negative controls (a deliberately broken runtime whose trace must be rejected).
`kvclaims scenario --file SPEC.yaml` runs a scenario you wrote (see
`kvclaims.lab.scenario_file` for the format).

Prints the numbers measured from the run (a table; `--json` for one JSON line) and each
trace's verdict from the lifecycle replay. `-o OUT` writes the trace: a file for a one-run
scenario, a directory of `<run>.ndjson` files for a scenario with several runs. `--usable-blocks`
replaces the pool of a one-pool scenario.

Exit 0 when every trace was accepted (for a control: rejected), 1 when not, 2 on bad input
(unknown scenario, a zero or negative pool, a footprint larger than the pool, duplicate ids).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import click

from kvclaims.cli._common import (
    Exit,
    PathType,
    json_option,
    out_option,
    print_json,
    print_names,
    print_table,
    runs,
    stdout_console,
)


def run(args: argparse.Namespace) -> int:
    from kvclaims.lab.micro_scenarios import SCENARIOS, run_scenario
    from kvclaims.spec.errors import InputError, Problem

    if args.list:
        print_names(SCENARIOS, as_json=args.json)
        return Exit.ok
    if (args.name is None) == (args.file is None):
        raise InputError([Problem("kvclaims scenario", "give a scenario NAME or --file SPEC (not both)")])
    if args.file is not None:
        from kvclaims.lab.scenario_file import run_scenario_file

        result = run_scenario_file(args.file)
    else:
        result = run_scenario(args.name, usable_blocks=args.usable_blocks)
    written = _write(result, args.out) if args.out is not None else []
    checks = result.trace_checks()
    expected = "rejected" if result.control else "accepted"
    ok = all(verdict.startswith(expected) for verdict in checks.values())
    if args.json:
        print_json(
            {
                "scenario": result.name,
                "title": result.title,
                "control": result.control,
                "summary": result.summary,
                "trace_checks": checks,
                "traces": [str(path) for path in written],
            }
        )
    else:
        _print_result(result, checks, written)
    return Exit.ok if ok else Exit.not_sound


def _write(result: Any, out: Path) -> list[Path]:
    from kvclaims.microruntime.tracing import write_trace

    if len(result.runs) == 1:
        run = result.runs[0]
        return [write_trace(out, run.header, run.events)]
    out.mkdir(parents=True, exist_ok=True)
    return [write_trace(out / f"{run.label}.ndjson", run.header, run.events) for run in result.runs]


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict) and not _is_leaf_map(value):
        rows: list[tuple[str, str]] = []
        for key, item in value.items():
            rows += _flatten(item, f"{prefix}.{key}" if prefix else str(key))
        return rows
    return [(prefix, value if isinstance(value, str) else json.dumps(value))]


def _is_leaf_map(value: dict[str, Any]) -> bool:
    """Small maps of numbers (per-object counts) read best on one line."""
    return (
        all(isinstance(v, int | float) and not isinstance(v, bool) for v in value.values())
        and len(value) <= 4
    )


def _print_result(result: Any, checks: dict[str, str], written: list[Path]) -> None:
    summary = dict(result.summary)
    table_rows = summary.pop("rows", None)
    arbiter = summary.pop("arbiter", None)
    rows = _flatten(summary)
    print_table(f"scenario {result.name}: {result.title}", ["measure", "value"], rows)
    if table_rows:
        columns = list(table_rows[0])
        print_table(
            f"{result.name}: one row per run",
            columns,
            [[_cell(row.get(column)) for column in columns] for row in table_rows],
        )
    if arbiter:
        print_table(
            f"{result.name}: arbiter decisions",
            ["request", "blocking claims", "proof", "actions"],
            [
                [
                    entry["request_id"],
                    ", ".join(entry["blocking_claim_ids"]),
                    f"{entry['protected_resident_blocks']} + {entry['active_live_blocks_required']} = "
                    f"{entry['resident_plus_active_blocks']} vs {entry['usable_blocks']} "
                    f"(shortfall {entry['capacity_shortfall_blocks']})",
                    "; ".join(f"{a['action']}: {a['result']}" for a in entry["actions"]),
                ]
                for entry in arbiter
            ],
        )
    print_table(f"{result.name}: trace checks (lifecycle replay)", ["run", "verdict"], list(checks.items()))
    console = stdout_console()
    for path in written:
        console.print(f"trace written: {path}")


def _cell(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


DEMO_SCENARIOS = (
    "native-60-70-80",
    "hard-claim-60-70-80",
    "capacity-sweep",
    "chunked-prefill",
    "materialization-q1",
    "write-no-admit",
    "demote-before-loss",
    "expire-before-loss",
    "materialization-failure",
    "live-scheduler-pressure",
    "offload-restore",
    "hybrid-two-key-resume",
    "continuum-ttl-pinning",
    "control-silent-harm",
    "control-null-block-shortfall",
    "control-fallback-recompute",
)


def demo_stage(out: Path) -> str:
    """`kvclaims demo` stage: run the key scenarios into OUT/scenarios and report headlines.

    Raises if a trace check disagrees with the scenario's kind (a positive trace rejected, or a
    control accepted), so the demo fails loudly instead of printing numbers it cannot vouch for.
    """
    from kvclaims.lab.micro_scenarios import run_scenario

    target = out / "scenarios"
    results = {}
    for name in DEMO_SCENARIOS:
        result = run_scenario(name)
        _write(result, target / (f"{name}.ndjson" if len(result.runs) == 1 else name))
        checks = result.trace_checks()
        expected = "rejected" if result.control else "accepted"
        wrong = {run: verdict for run, verdict in checks.items() if not verdict.startswith(expected)}
        if wrong:
            raise RuntimeError(f"scenario {name}: trace checks disagree with its kind: {wrong}")
        results[name] = {"summary": result.summary, "trace_checks": checks}
    (target / "summary.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return _headline({name: r["summary"] for name, r in results.items()}, len(results))


def _headline(s: dict[str, Any], count: int) -> str:
    hard = s["hard-claim-60-70-80"]["capacity_proof"]
    sweep = [r for r in s["capacity-sweep"]["rows"] if r["policy"] == "hard_protected"]
    q1 = {r["policy"]: r for r in s["materialization-q1"]["rows"]}
    q2 = {r["policy"]: r for r in s["write-no-admit"]["rows"]}
    live = s["live-scheduler-pressure"]["capacity_proof"]
    stock = s["continuum-ttl-pinning"]["stock_ttl_pin"]
    claims = s["continuum-ttl-pinning"]["contract_claims"]
    naive = q1["naive_fair_share"]["cached_tokens"]
    complete = q1["complete_prefix_fair_share"]["cached_tokens"]
    return "; ".join(
        [
            f"{count} scenarios (traces in scenarios/)",
            f"native 60/70/80 evicts {s['native-60-70-80']['resident_blocks_evicted']} residents",
            f"hard claim refused {hard['protected_resident_blocks']}+{hard['active_live_blocks_required']}"
            f"={hard['resident_plus_active_blocks']}>{hard['usable_blocks']}, "
            f"shortfall {hard['capacity_shortfall_blocks']}",
            "sweep shortfalls "
            + "/".join(str(r["capacity_shortfall_blocks"] or 0) for r in sweep)
            + " over "
            + "/".join(str(r["usable_blocks"]) for r in sweep),
            "chunks live " + "/".join(map(str, s["chunked-prefill"]["full_attention_live_after_each_chunk"])),
            f"Q1 naive {naive['A']}/{naive['B']}/{naive['C']} tokens value "
            f"{q1['naive_fair_share']['thresholded_value']}, complete {complete['A']}/{complete['B']}/"
            f"{complete['C']} value {q1['complete_prefix_fair_share']['thresholded_value']}",
            f"no-admit bulky repeat {q2['native_lru']['bulky_repeat_cached_tokens']}->"
            f"{q2['write_no_admit']['bulky_repeat_cached_tokens']} tokens",
            f"demote/expire harm {s['demote-before-loss']['claim_harm_events']}/"
            f"{s['expire-before-loss']['claim_harm_events']}, post-release losses "
            f"{s['demote-before-loss']['post_release_block_losses']}/{s['expire-before-loss']['post_expiry_block_losses']}",
            f"live {live['protected_resident_blocks']}+{live['active_live_blocks_required']}="
            f"{live['resident_plus_active_blocks']} vs {live['usable_blocks']}, shortfall "
            f"{live['capacity_shortfall_blocks']}",
            f"Continuum pins: stock peak {stock['peak_pinned_fraction']:.0%} of pool, "
            f"{stock['steps_nothing_ran_while_requests_waited']} stalled steps unattributed; claims peak "
            f"{claims['peak_pinned_fraction']:.0%}, {claims['claims_rejected']} rejected explicitly",
            "hybrid corruption -> restoration_failed for "
            + ", ".join(map(str, s["hybrid-two-key-resume"]["turn_3"]["restoration_failed"])),
            "3 controls rejected",
        ]
    )


@click.command(
    "scenario",
    help=__doc__,
    short_help="run a MicroRuntime scenario: write its trace, print what it measured",
)
@click.argument("name", required=False, metavar="[NAME]")
@click.option("--list", is_flag=True, help="print scenario names, one per line")
@click.option("--file", type=PathType, metavar="SPEC", help="run a scenario file instead of a name")
@out_option("write the trace here (a folder for a scenario with several runs)", metavar="OUT")
@json_option
@click.option("--usable-blocks", type=int, metavar="N", help="replace the scenario's pool")
def command(**options: object) -> int:
    return runs(run)(**options)
