"""The claim lifecycle state diagram, as a table, Mermaid or Graphviz (`--as`).

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

import click

from kvclaims.cli._common import Exit, json_option, legacy_alias, print_json_lines, print_table, runs
from kvclaims.spec.vocabulary import ProtectionMode


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
    if args.json:
        print_json_lines({"from": f, "events": e, "to": t} for f, e, t in transition_rows(graph))
    elif args.as_ == "mermaid":
        sys.stdout.write(to_mermaid(graph))
    elif args.as_ == "dot":
        sys.stdout.write(to_dot(graph))
    else:
        print_table(title, ["from", "events", "to"], transition_rows(graph), keys=("from", "to"))
    return Exit.ok


RENDERINGS = ("table", "mermaid", "dot")


@click.command(
    "lifecycle",
    help=__doc__,
    short_help="print the claim lifecycle state diagram (table, Mermaid or Graphviz)",
)
@click.option("--mode", type=click.Choice([m.value for m in ProtectionMode]), help="one protection mode")
@click.option("--two-key", is_flag=True, help="with --mode: a hybrid two-key predicate")
@click.option("--profile", metavar="P", help="a claim profile instead of a mode (see above)")
@click.option("--as", "as_", type=click.Choice(RENDERINGS), default="table", help="rendering (default table)")
@legacy_alias("--format", "as_", type=click.Choice(RENDERINGS))
@json_option
def command(**options: object) -> int:
    return runs(run)(**options)
