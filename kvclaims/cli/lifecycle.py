"""`kvclaims lifecycle [--mode MODE [--two-key]] [--format table|mermaid|dot]`: the claim lifecycle.

Prints the state diagram derived from the lifecycle machine's transition table (the one the
MicroRuntime emits against and refinement replays). Without `--mode`, every profile at once,
each event labelled with the guard it needs (`[preserving]`, `[offloadable]`, `[two_key]`, ...);
with `--mode`, only what a claim of that mode (and predicate kind) can do. Exit 0; 2 on bad
options.
"""

from __future__ import annotations

import argparse
import sys

from kvclaims.cli._common import Exit, print_table
from kvclaims.spec.vocabulary import ProtectionMode


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "lifecycle",
        help="print the claim lifecycle state diagram (table, Mermaid or Graphviz)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--mode", choices=[m.value for m in ProtectionMode], help="one protection mode")
    parser.add_argument("--two-key", action="store_true", help="with --mode: a hybrid two-key predicate")
    parser.add_argument("--format", choices=("table", "mermaid", "dot"), default="table")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvclaims.statemachine.graph import (
        lifecycle_graph,
        profile_name,
        reachable_phases,
        to_dot,
        to_mermaid,
        transition_rows,
        union_graph,
    )
    from kvclaims.statemachine.lifecycle import ClaimProfile

    if args.two_key and args.mode is None:
        sys.stderr.write("error: --two-key needs --mode\n")
        return Exit.invalid_input
    if args.mode is None:
        graph, title = union_graph(), "claim lifecycle, every profile (guards in brackets)"
    else:
        profile = ClaimProfile.of(ProtectionMode(args.mode), two_key=args.two_key)
        graph = lifecycle_graph(profile)
        graph.remove_nodes_from([p for p in list(graph.nodes) if p not in reachable_phases(profile)])
        title = f"claim lifecycle, mode {args.mode} ({profile_name(profile)})"
    if args.format == "mermaid":
        sys.stdout.write(to_mermaid(graph))
    elif args.format == "dot":
        sys.stdout.write(to_dot(graph))
    else:
        print_table(title, ["from", "events", "to"], transition_rows(graph))
    return Exit.ok
