"""`kvclaims lifecycle [--mode MODE [--two-key] | --profile P] [--format table|mermaid|dot]`.

Prints the state diagram derived from the lifecycle machine's transition table (the one the
MicroRuntime emits against and refinement replays). Without `--mode`, every profile at once,
each event labelled with the guard it needs (`[preserving]`, `[offloadable]`, `[two_key]`, ...);
with `--mode` (and `--two-key` for a hybrid predicate) or `--profile`, only what such a claim
can do. Profiles: observational, observational-two-key, preserving, preserving-two-key,
preserving-offloadable, preserving-offloadable-two-key. Exit 0; 2 on bad options.
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
    parser.add_argument("--profile", metavar="P", help="a claim profile instead of a mode (see above)")
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
    from kvclaims.statemachine.lifecycle import ALL_PROFILES, ClaimProfile

    profiles = {profile_name(p).replace(", ", "-"): p for p in ALL_PROFILES}
    if (args.two_key and args.mode is None) or (args.profile and args.mode):
        sys.stderr.write("error: --two-key needs --mode, and --profile replaces --mode\n")
        return Exit.invalid_input
    if args.profile is not None and args.profile not in profiles:
        sys.stderr.write(f"error: unknown profile {args.profile!r}; known: {', '.join(profiles)}\n")
        return Exit.invalid_input
    if args.mode is None and args.profile is None:
        graph, title = union_graph(), "claim lifecycle, every profile (guards in brackets)"
    else:
        profile = (
            profiles[args.profile]
            if args.profile is not None
            else ClaimProfile.of(ProtectionMode(args.mode), two_key=args.two_key)
        )
        graph = lifecycle_graph(profile)
        graph.remove_nodes_from([p for p in list(graph.nodes) if p not in reachable_phases(profile)])
        title = f"claim lifecycle, {f'mode {args.mode}, ' if args.mode else ''}{profile_name(profile)}"
    if args.format == "mermaid":
        sys.stdout.write(to_mermaid(graph))
    elif args.format == "dot":
        sys.stdout.write(to_dot(graph))
    else:
        print_table(title, ["from", "events", "to"], transition_rows(graph))
    return Exit.ok
