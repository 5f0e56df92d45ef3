"""`REPORT.md` for a `kvclaims report` or `kvclaims demo` run, and the pictures stage that feeds it.

The report answers the three questions a user arrives with, from the files the stages wrote,
each with a one-sentence verdict first: does my runtime surface conform
(`lowering-matrix.json`, heatmap), did this run conform (`trace-verdicts.json`, one entry per
trace), are the rules sound (`proofs/*.json`, the adversary's summary). Tables show only the
rows a reader must look at (controls, and anything not as expected); the rest are counted. The
words it uses are explained once, in plain language. It never computes a verdict itself.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kvclaims.report import glossary
from kvclaims.report.markdown import markdown_table
from kvclaims.report.verdicts import TraceCheck

PICTURES = {
    "heatmap": "lowering-matrix.png",
    "capacity": "pictures/capacity-sweep.png",
    "timeline": "pictures/claim-timeline.png",
    "diagram": "pictures/lifecycle-{profile}.png",
}
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class StageRecord:
    """One stage: `status` is `ok`, `skipped` (it said `not run: ...`) or `failed`."""

    name: str
    status: str
    seconds: float
    summary: str
    cpu_seconds: float = 0.0
    """CPU time the stage used: its process's threads and the child processes it waited for."""


def draw_pictures(out: Path, *, sweep: bool, timeline: tuple[Path, str] | None) -> str:
    """Draw into OUT/pictures the lifecycle diagrams (one per claim profile), the claim
    timeline of `timeline` (a trace and the name to show for it) when given, and, with `sweep`,
    the MicroRuntime capacity sweep; record in OUT/pictures.json what each was drawn from."""
    from kvclaims.report.diagram import render_lifecycle_diagrams
    from kvclaims.report.timeline import claim_timeline, render_timeline

    record: dict[str, object] = {}
    done = []
    diagrams = render_lifecycle_diagrams(out / "pictures")
    record["diagrams"] = [str(p.relative_to(out)) for p in diagrams]
    done.append(f"{len(diagrams)} lifecycle diagrams")
    if sweep:
        from kvclaims.report.capacity import render_capacity_sweep
        from kvclaims.report.capacity import sweep as run_sweep

        points = run_sweep()
        render_capacity_sweep(points, out / PICTURES["capacity"])
        record["capacity"] = {"points": len(points), "policies": sorted({p.policy for p in points})}
        done.append(f"capacity sweep ({len(points)} MicroRuntime runs)")
    if timeline is not None:
        source, shown = timeline
        drawn = claim_timeline(source)
        render_timeline(drawn, out / PICTURES["timeline"], title=f"Each claim's life in {shown}")
        record["timeline"] = {"trace": shown, "claims": list(drawn.tracks), "rejection": drawn.rejection}
        done.append(f"claim timeline of {shown} ({len(drawn.tracks)} claims)")
    (out / "pictures.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return ", ".join(done) + ": in pictures/"


def snapshot(out: Path) -> dict[Path, tuple[int, int]]:
    """(modification time, size) of every file under `out`, to tell later what a run wrote."""
    if not out.is_dir():
        return {}
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in out.rglob("*") if p.is_file()}


def write_manifest(out: Path, *, before: dict[Path, tuple[int, int]]) -> Path:
    """OUT/manifest.json: every file under OUT this run wrote (new, or changed since `before`,
    the `snapshot` taken when it started), with its size; an earlier run's files in a
    `--force`d folder are not listed."""
    target = out / MANIFEST
    now = snapshot(out)
    files = sorted(p for p, stat in now.items() if p != target and before.get(p) != stat)
    listing = [{"path": str(p.relative_to(out)), "bytes": p.stat().st_size} for p in files]
    target.write_text(json.dumps({"files": listing}, indent=2) + "\n", encoding="utf-8")
    return target


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def write_report(out: Path, records: list[StageRecord], total_seconds: float, *, title: str) -> Path:
    """Write OUT/REPORT.md from `records` and the files the stages left in OUT."""
    used: set[tuple[str, str]] = set()
    sections = [
        f"# {title}",
        _verdict_line(records, total_seconds),
        _conformance_of_surfaces(out, used),
        _conformance_of_run(out, used),
        _soundness(out, records),
        _pictures(out),
        _words(used),
        _stages(records),
    ]
    target = out / "REPORT.md"
    target.write_text("\n\n".join(s for s in sections if s) + "\n", encoding="utf-8")
    return target


def _verdict_line(records: list[StageRecord], total_seconds: float) -> str:
    failed = [r.name for r in records if r.status == "failed"]
    skipped = [r for r in records if r.status == "skipped"]
    head = f"**{'FAILED: ' + ', '.join(failed) if failed else 'Every stage that ran succeeded'}.**"
    lines = [f"{head} Total wall time {total_seconds:.1f} s over {len(records)} stages (table at the end)."]
    lines += [f"- **{r.name}** was skipped: {r.summary}" for r in skipped]
    lines += [
        f"- **{r.name}** FAILED: {r.summary} (full output in `logs/`)"
        for r in records
        if r.status == "failed"
    ]
    return "\n".join(lines)


def _stages(records: list[StageRecord]) -> str:
    rows = [[r.name, r.status, f"{r.seconds:.1f}", f"{r.cpu_seconds:.1f}", r.summary] for r in records]
    return "## Stages\n\n" + markdown_table(
        ["stage", "status", "seconds", "CPU seconds", "what it did"], rows
    )


def _conformance_of_surfaces(out: Path, used: set[tuple[str, str]]) -> str:
    path = out / "lowering-matrix.json"
    title = "## 1. Does my runtime surface conform?"
    if not path.is_file():
        return f"{title}\n\nNot answered: no descriptors were judged in this run."
    surfaces = json.loads(path.read_text(encoding="utf-8"))["surfaces"]
    modes = list(surfaces[0]["cells"]) if surfaces else []
    rows = []
    labels: Counter[str] = Counter()
    sound_modes: dict[str, list[str]] = {}
    for surface in surfaces:
        row = [surface["surface"]]
        for mode in modes:
            cell = surface["cells"].get(mode)
            if cell is None:
                row.append("-")
                continue
            labels[cell["label"]] += 1
            if cell["label"] in ("native_sound", "sound_with_adapter"):
                sound_modes.setdefault(surface["surface"], []).append(mode)
            row.append(cell["label"] + ("" if cell["depth"] == "none" else f" at depth {cell['depth']}"))
        rows.append(row)
    used.update(("label", label) for label in labels)
    used.update(("mode", mode) for mode in modes)
    used.add(("other", "depth"))
    verdict = (
        f"**{len(sound_modes)} of {plural(len(surfaces), 'surface')} can keep at least one kind of claim "
        "soundly**"
        + (
            " (" + "; ".join(f"{name}: {', '.join(found)}" for name, found in sound_modes.items()) + ")."
            if sound_modes
            else "."
        )
    )
    tally = ", ".join(f"{count} {label}" for label, count in labels.most_common())
    return (
        f"{title}\n\n{verdict} Each descriptor was judged for every protection mode; a cell is the "
        f"strongest label any adapter depth reaches, and the depth it needs. Over {len(surfaces)} "
        f"surfaces x {len(modes)} modes: {tally}. Every reason, row by row: `lowering-matrix.md`.\n\n"
        f"![lowering matrix heatmap]({PICTURES['heatmap']})\n\n" + markdown_table(["surface", *modes], rows)
    )


def _conformance_of_run(out: Path, used: set[tuple[str, str]]) -> str:
    path = out / "trace-verdicts.json"
    title = "## 2. Did this run conform?"
    if not path.is_file():
        return f"{title}\n\nNot answered: no trace was checked in this run."
    checks = [TraceCheck(**c) for c in json.loads(path.read_text(encoding="utf-8"))]
    wrong = [c for c in checks if not c.as_expected]
    controls = [c for c in checks if c.control]
    shown = [c for c in checks if c.control or not c.as_expected]
    used.update(("outcome", c.outcome) for c in checks)
    if controls:
        used.add(("other", "control"))
    if not checks:
        verdict = "Not answered: no trace files were found."
    elif not wrong:
        verdict = (
            f"**Yes: all {len(checks)} traces got the verdict they should** "
            f"({plural(len(checks) - len(controls), 'run')} accepted, "
            f"{plural(len(controls), 'control')} caught as their scenario expects)."
        )
    else:
        verdict = f"**No: {len(wrong)} of {len(checks)} traces did not get the verdict they should** (below)."
    by_lane: dict[str, Counter[str]] = {}
    for check in checks:
        by_lane.setdefault(check.lane, Counter())[check.outcome] += 1
    lanes = [
        [lane, str(sum(counts.values())), *(str(counts[o]) for o in glossary.OUTCOMES)]
        for lane, counts in by_lane.items()
    ]
    rows = [
        [
            c.trace,
            c.expected,
            c.outcome + (f" (rule {c.rule})" if c.rule else ""),
            "yes" if c.as_expected else "**NO**",
            c.reason,
        ]
        for c in shown
    ]
    listing = (
        f"\n\nThe controls and every trace not as expected ({len(shown)}; the other "
        f"{len(checks) - len(shown)} were accepted as they should be):\n\n"
        + markdown_table(["trace", "should be", "verdict", "as it should", "why"], rows)
        if rows
        else ""
    )
    return (
        f"{title}\n\n{verdict} Every trace was checked by refinement against the model.\n\n"
        + markdown_table(["where the traces come from", "traces", *glossary.OUTCOMES], lanes)
        + listing
    )


def _soundness(out: Path, records: list[StageRecord]) -> str:
    title = "## 3. Are the rules sound?"
    proofs = sorted((out / "proofs").glob("*.json")) if (out / "proofs").is_dir() else []
    adversary = next((r for r in records if r.name.startswith("adversary")), None)
    if not proofs and adversary is None:
        return f"{title}\n\nNot answered in this run (`kvclaims demo` runs the proofs and the adversary)."
    found = [json.loads(path.read_text(encoding="utf-8")) for path in proofs]
    failed = [p for p in found if p["verdict"] != "proved"]
    by_method = Counter(p["method"] for p in found)
    sound = not failed and (adversary is None or adversary.status == "ok")
    methods = f" ({', '.join(f'{n} by {m}' for m, n in sorted(by_method.items()))})" if found else ""
    searched = ""
    if adversary is not None:
        clean = adversary.status == "ok"
        searched = f", and the adversary's search {'found nothing that slips through' if clean else 'failed'}"
    verdict = (
        f"**{'Yes' if sound else 'No'}: {len(found) - len(failed)} of {len(found)} proof obligations were "
        f"proved by Z3 in this run**{methods}{searched}."
    )
    parts = [title, verdict + " Statements, methods and times: `proofs/REPORT.md`."]
    if failed:
        parts.append(
            markdown_table(
                ["obligation", "method", "verdict", "statement"],
                [[p["name"], p["method"], p["verdict"], p["statement"]] for p in failed],
            )
        )
    if adversary is not None:
        parts.append(f"**Adversary** ({adversary.status}, {adversary.seconds:.1f} s): {adversary.summary}")
    return "\n\n".join(parts)


def _pictures(out: Path) -> str:
    path = out / "pictures.json"
    if not path.is_file():
        return "## Pictures\n\nThe pictures were not drawn in this run."
    record = json.loads(path.read_text(encoding="utf-8"))
    parts = ["## Pictures"]
    if "capacity" in record:
        parts.append(
            f"**Capacity sweep** (measured on kvclaims' MicroRuntime, {record['capacity']['points']} runs): "
            "a 60-block claim, then a 70-block request, at every pool size; what each policy keeps and "
            f"what the request gets.\n\n![capacity sweep]({PICTURES['capacity']})"
        )
    if "timeline" in record:
        parts.append(
            f"**Each claim's life in `{record['timeline']['trace']}`**: the claim's state after every "
            "event (as the checker saw it) and the events that matter.\n\n"
            f"![claim timeline]({PICTURES['timeline']})"
        )
    diagrams = "\n\n".join(f"![{Path(p).stem}]({p})" for p in record.get("diagrams", []))
    parts.append(
        "**The claim lifecycle**, one small diagram per kind of claim, drawn from the model's own "
        f"transition table.\n\n{diagrams}"
    )
    return "\n\n".join(parts)


WORD_KINDS = (
    ("label", "a descriptor row labelled", glossary.LABELS),
    ("outcome", "a trace", glossary.OUTCOMES),
    ("mode", "mode", glossary.MODES),
    ("other", "", glossary.OTHER_WORDS),
)


def _words(used: set[tuple[str, str]]) -> str:
    """The plain meaning of every label, outcome, mode and term this report used, once."""
    lines = [
        f"- {prefix + ' ' if prefix else ''}**{word}**: {meaning}."
        for kind, prefix, table in WORD_KINDS
        for word, meaning in table.items()
        if (kind, word) in used
    ]
    if not lines:
        return ""
    return "## What the words mean\n\n" + "\n".join(lines) + "\n\n" + glossary.DOCS
