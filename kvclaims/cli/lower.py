"""`kvclaims lower FILE... [--mode M] [--depth D] [--json]`: judge descriptor rows.

Rows are the descriptor's `lowerings` (or every mode at every depth), narrowed by `--mode` /
`--depth`. Exit 0 when every judged row is sound, 1 when one is not, 2 on invalid input.
"""

from __future__ import annotations

import argparse
import sys

from kvclaims.cli._common import Exit, print_json, print_table
from kvclaims.spec.tables import OBLIGATION_CODES
from kvclaims.spec.vocabulary import AdapterDepth, ProtectionMode


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "lower",
        help="judge which modes a runtime descriptor lowers, at which adapter depth",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="descriptor files or directories")
    parser.add_argument(
        "--mode", action="append", choices=[m.value for m in ProtectionMode], help="repeatable"
    )
    parser.add_argument(
        "--depth", action="append", choices=[d.value for d in AdapterDepth], help="repeatable"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="add per-obligation findings (under each row, or as a findings list with --json)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvclaims.spec.descriptor import load_descriptors
    from kvclaims.spec.lowering import lower_row

    modes = {ProtectionMode(m) for m in args.mode} if args.mode else None
    depths = {AdapterDepth(d) for d in args.depth} if args.depth else None
    verdicts = [
        lower_row(descriptor, row)
        for _, descriptor in load_descriptors(args.files)
        for row in descriptor.rows()
        if (modes is None or row.mode in modes) and (depths is None or row.depth in depths)
    ]
    if args.json:
        print_json(
            [
                v.summary()
                | ({"findings": [f.model_dump(mode="json") for f in v.findings]} if args.explain else {})
                for v in verdicts
            ]
        )
    else:
        print_table(
            "lowering verdicts",
            ["surface", "mode", "depth", "label", "subtype", "missing", "decided by"],
            [
                [
                    v.surface,
                    v.mode,
                    v.depth,
                    v.label,
                    v.subtype or "",
                    " ".join([OBLIGATION_CODES[o] for o in v.missing] + list(v.missing_atoms)),
                    v.decided_by,
                ]
                for v in verdicts
            ],
        )
        if args.explain:
            _print_explanations(verdicts)
    return Exit.ok if all(v.label.is_sound for v in verdicts) else Exit.not_sound


def _print_explanations(verdicts: list) -> None:
    lines = []
    for v in verdicts:
        lines.append(f"{v.surface} / {v.mode} @ {v.depth}: {v.label} ({v.decided_by})")
        lines.extend(f"  - {reason}" for reason in v.reasons)
        if v.first_refused is not None:
            refused = v.first_refused
            lines.append(f"  first refused: {refused.label} by {refused.rule}: {refused.reason}")
    sys.stdout.write("\n".join(lines) + "\n")
