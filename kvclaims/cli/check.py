"""`kvclaims check TRACE... [--format F] [--registry FILE] [--json] [--evidence-out FILE]`:
does each recorded trace refine the resident-claim model?

TRACE is a trace file or a directory (searched recursively for *.jsonl, *.ndjson, *.msgpack,
*.kvevents). `--format auto` (the default) recognises kvclaims trace v1 and the foreign
vocabularies: blockpool, offload-hook, pydev-connector, vllm-kv-events (which needs
`--registry`, an external claim registry). A rejection prints its counterexample with the
surrounding events; several traces print one summary table.

`--evidence-out FILE` writes the anchored evidence items (YAML, or JSON for *.json) that the
traces supply, ready to cite in a runtime descriptor; it writes nothing unless every trace is
accepted.

Exit codes (the worst over all traces): 0 accepted, 1 rejected, 2 invalid input, 3 inconclusive.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kvclaims.cli._common import print_json, print_table, stderr_console, stdout_console

TRACE_SUFFIXES = (".jsonl", ".ndjson", ".msgpack", ".kvevents")
PROGRESS_MIN_BYTES = 8 * 1024 * 1024
"""Files at least this large get a progress bar (on a terminal only)."""

EXIT_CODES = {"accepted": 0, "rejected": 1, "invalid": 2, "inconclusive": 3}
"""The exit code of each outcome; a run exits with the code of its worst outcome."""

CONTEXT_LINES = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    from kvclaims.refinement.sources import AUTO, FORMATS

    parser = subparsers.add_parser(
        "check",
        help="check recorded traces against the model (refinement), with counterexamples",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("traces", nargs="+", metavar="TRACE", type=Path, help="trace files or directories")
    parser.add_argument(
        "--format", default=AUTO, choices=[AUTO, *FORMATS], help="trace format (default: auto)"
    )
    parser.add_argument("--registry", type=Path, metavar="FILE", help="claim registry for vllm-kv-events")
    parser.add_argument("--json", action="store_true", help="one JSON verdict per trace")
    parser.add_argument(
        "--evidence-out", type=Path, metavar="FILE", help="write evidence items (accepted only)"
    )
    parser.set_defaults(run=run)


def trace_files(targets: list[Path]) -> list[Path]:
    """Expand directories into their trace files (sorted); files are kept as given."""
    found: list[Path] = []
    for target in targets:
        if target.is_dir():
            found.extend(sorted(p for p in target.rglob("*") if p.is_file() and p.suffix in TRACE_SUFFIXES))
        else:
            found.append(target)
    return found


def run(args: argparse.Namespace) -> int:
    from kvclaims.refinement.api import check_trace
    from kvclaims.refinement.verdict import Outcome

    files = trace_files(args.traces)
    if not files:
        stderr_console().print("[bold red]error:[/] no trace files found")
        return EXIT_CODES["invalid"]
    verdicts = []
    for path in files:
        with _progress(path) as progress:
            verdicts.append(check_trace(path, format=args.format, registry=args.registry, progress=progress))
    if args.json:
        print_json([v.to_json() for v in verdicts] if len(verdicts) > 1 else verdicts[0].to_json())
    elif len(verdicts) == 1:
        _print_one(verdicts[0])
    else:
        _print_summary(verdicts)
    worst = Outcome.worst([v.outcome for v in verdicts])
    if args.evidence_out is not None:
        if worst is not Outcome.accepted:
            stderr_console().print(
                "[bold red]no evidence written:[/] only accepted traces are evidence "
                f"(worst outcome: {worst})"
            )
        else:
            written = _write_evidence(args.evidence_out, files, verdicts)
            stderr_console().print(f"{written} evidence items written to {args.evidence_out}")
    return EXIT_CODES[worst.value]


class _progress:
    """A rich progress bar for a large file on a terminal; otherwise nothing."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._bar: Any = None

    def __enter__(self) -> Any:
        console = stderr_console()
        try:
            size = self._path.stat().st_size
        except OSError:
            return None
        if not console.is_terminal or size < PROGRESS_MIN_BYTES:
            return None
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._bar = Progress(
            "[bold]checking[/] " + self._path.name,
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self._bar.start()
        task = self._bar.add_task("check", total=size)
        return lambda done: self._bar.update(task, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def _print_one(verdict: Any) -> None:
    from rich.markup import escape

    console = stdout_console()
    style = {"accepted": "bold green", "rejected": "bold red", "invalid": "magenta", "inconclusive": "yellow"}
    console.print(
        f"[{style[verdict.outcome.value]}]{verdict.outcome.value}[/] {escape(verdict.path)} "
        f"({verdict.format}, {verdict.events} events, {verdict.steps} model steps)"
    )
    console.print(f"  {escape(verdict.reason)}")
    c = verdict.counterexample
    if c is not None:
        console.print(f"  rule: [bold]{c.rule}[/]   subject: {escape(c.subject)}   event #{c.event_index}")
        console.print(f"  state before: {escape(c.state_before)}")
        console.print(
            f"  the model allowed instead: {escape(', '.join(c.allowed) or '(nothing: a data check failed)')}"
        )
        context = _surrounding(Path(verdict.path), c.line)
        if context:
            console.print("  surrounding events:")
            for number, text in context:
                marker = "[bold red]>[/]" if number == c.line else " "
                console.print(f"  {marker} {number:>6} | {escape(text)}")
        if c.minimal_prefix:
            console.print("  minimal prefix (rejected on its own, same rule):")
            for event in c.minimal_prefix:
                console.print(f"    {event.line:>6} | {escape(event.summary)}")
    for note in verdict.notes:
        console.print(f"  note: {escape(note)}")
    if verdict.witnesses:
        console.print("  exercised: " + ", ".join(w.kind.value for w in verdict.witnesses))


def _surrounding(path: Path, line: int, limit: int = 160) -> list[tuple[int, str]]:
    """Lines `line - CONTEXT_LINES .. line + CONTEXT_LINES` of a text trace, shortened."""
    if line <= 0:
        return []
    found = []
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if number > line + CONTEXT_LINES:
                    break
                if number >= line - CONTEXT_LINES:
                    text = raw[: limit * 4].decode("utf-8", errors="replace").rstrip("\n")
                    found.append((number, text if len(text) <= limit else text[: limit - 1] + "…"))
    except OSError:
        return []
    if not all(text.lstrip().startswith("{") for _, text in found):
        return []  # a binary capture: the minimal prefix shows the steps instead
    return found


def _print_summary(verdicts: list[Any]) -> None:
    print_table(
        "refinement verdicts",
        ["trace", "format", "outcome", "rule / class", "events", "reason"],
        [
            [
                v.path,
                v.format,
                v.outcome.value,
                (v.rule.value if v.rule else (v.error_class.value if v.error_class else "")),
                str(v.events),
                v.reason,
            ]
            for v in verdicts
        ],
    )


def _write_evidence(out: Path, files: list[Path], verdicts: list[Any]) -> int:
    from kvclaims.refinement.evidence import evidence_items

    items = [
        item.model_dump(mode="json", exclude_defaults=True)
        for path, verdict in zip(files, verdicts, strict=True)
        for item in evidence_items(verdict, path, relative_to=out.parent)
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".json":
        out.write_text(json.dumps({"evidence": items}, indent=2) + "\n", encoding="utf-8")
    else:
        import yaml

        out.write_text(yaml.safe_dump({"evidence": items}, sort_keys=False), encoding="utf-8")
    return len(items)
