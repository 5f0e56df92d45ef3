"""`REPORT.md` for a demo run, and the pictures stage that feeds it.

The report answers the three questions a user arrives with, from the files the demo wrote:
does my runtime surface conform (`lowering-matrix.json`, heatmap), did this run conform
(`trace-verdicts.json`, one row per trace, the rule for every rejection), are the rules sound
(`proofs/*.json`, the adversary's summary). It also lists every stage with its wall time and
states what was skipped and why. It never computes a verdict itself.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kvclaims.report.verdicts import TraceCheck

PICTURES = {
    "heatmap": "lowering-matrix.png",
    "capacity": "pictures/capacity-sweep.png",
    "timeline": "pictures/claim-timeline.png",
    "diagram": "pictures/lifecycle-diagram.png",
}
TIMELINE_VLLM = "vllm-engine/path-c-multi-claim.ndjson"
TIMELINE_FALLBACK = "scenarios/offload-restore.ndjson"


@dataclass(frozen=True)
class StageRecord:
    """One demo stage: `status` is `ok`, `skipped` (it said `not run: ...`) or `failed`."""

    name: str
    status: str
    seconds: float
    summary: str


def draw_pictures(out: Path, since_ns: int = 0) -> str:
    """Draw the capacity sweep, the claim timeline and the lifecycle diagram into OUT/pictures
    (the heatmap is drawn by the lowering-matrix stage) and record in OUT/pictures.json what
    each was drawn from. The timeline uses the engine lane's two-claim trace when this run
    wrote one, else the MicroRuntime's offload-restore trace, and says so in its title."""
    from kvclaims.report.capacity import render_capacity_sweep, sweep
    from kvclaims.report.diagram import render_lifecycle_diagram
    from kvclaims.report.timeline import claim_timeline, render_timeline

    points = sweep()
    render_capacity_sweep(points, out / PICTURES["capacity"])
    render_lifecycle_diagram(out / PICTURES["diagram"])
    vllm_trace = out / TIMELINE_VLLM
    from_vllm = vllm_trace.is_file() and vllm_trace.stat().st_mtime_ns >= since_ns
    source = vllm_trace if from_vllm else out / TIMELINE_FALLBACK
    if not source.is_file():
        raise RuntimeError(
            f"no trace to draw the claim timeline from ({TIMELINE_VLLM} or {TIMELINE_FALLBACK})"
        )
    title = (
        "Per-claim lifecycle of one vLLM engine run (engine lane, path C: two claims)"
        if from_vllm
        else "Per-claim lifecycle of a MicroRuntime run - NOT vLLM (vLLM lanes did not run)"
    )
    timeline = claim_timeline(source)
    render_timeline(timeline, out / PICTURES["timeline"], title=title)
    record = {
        "capacity": {"points": len(points), "policies": sorted({p.policy for p in points})},
        "timeline": {
            "trace": str(source.relative_to(out)),
            "from_vllm": from_vllm,
            "claims": list(timeline.tracks),
            "rejection": timeline.rejection,
        },
    }
    (out / "pictures.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    kind = "a vLLM engine-lane trace" if from_vllm else "a MicroRuntime trace (vLLM did not run)"
    return (
        f"capacity sweep ({len(points)} MicroRuntime runs), claim timeline from {kind} "
        f"({len(timeline.tracks)} claims), lifecycle diagram: in pictures/"
    )


def write_report(out: Path, records: list[StageRecord], total_seconds: float) -> Path:
    """Write OUT/REPORT.md from `records` and the files the stages left in OUT."""
    sections = [
        "# kvclaims demo report",
        _verdict_line(records, total_seconds),
        _stages(records),
        _skipped(records),
        _conformance_of_surfaces(out),
        _conformance_of_run(out),
        _soundness(out, records),
        _pictures(out),
    ]
    target = out / "REPORT.md"
    target.write_text("\n\n".join(s for s in sections if s) + "\n", encoding="utf-8")
    return target


def _table(columns: list[str], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _verdict_line(records: list[StageRecord], total_seconds: float) -> str:
    failed = [r.name for r in records if r.status == "failed"]
    skipped = [r.name for r in records if r.status == "skipped"]
    head = f"**{'FAILED: ' + ', '.join(failed) if failed else 'Every stage that ran succeeded'}.**"
    extra = f" Skipped: {', '.join(skipped)} (see below)." if skipped else ""
    return f"{head}{extra} Total wall time {total_seconds:.1f} s over {len(records)} stages."


def _stages(records: list[StageRecord]) -> str:
    rows = [[r.name, r.status, f"{r.seconds:.1f}", r.summary] for r in records]
    return "## Stages\n\n" + _table(["stage", "status", "seconds", "what it did"], rows)


def _skipped(records: list[StageRecord]) -> str:
    skipped = [r for r in records if r.status == "skipped"]
    failed = [r for r in records if r.status == "failed"]
    if not skipped and not failed:
        return "## Skipped or failed\n\nNothing was skipped and nothing failed."
    lines = [f"- **{r.name}** was skipped: {r.summary}" for r in skipped]
    lines += [f"- **{r.name}** FAILED: {r.summary} (full output in `logs/`)" for r in failed]
    return "## Skipped or failed\n\n" + "\n".join(lines)


def _conformance_of_surfaces(out: Path) -> str:
    path = out / "lowering-matrix.json"
    title = "## 1. Does my runtime surface conform? (lowering matrix)"
    if not path.is_file():
        return f"{title}\n\nNo lowering matrix was written in this run."
    surfaces = json.loads(path.read_text(encoding="utf-8"))["surfaces"]
    modes = list(surfaces[0]["cells"]) if surfaces else []
    rows = []
    labels: Counter[str] = Counter()
    for surface in surfaces:
        row = [surface["surface"]]
        for mode in modes:
            cell = surface["cells"].get(mode)
            if cell is None:
                row.append("-")
                continue
            labels[cell["label"]] += 1
            depth = "" if cell["depth"] == "none" else f" ({cell['depth']})"
            row.append(f"{cell['label']}{depth}")
        rows.append(row)
    tally = ", ".join(f"{count} {label}" for label, count in labels.most_common())
    return (
        f"{title}\n\nEach shipped descriptor (`descriptors/*.yaml`) lowered for every protection mode; "
        "a cell is the strongest label any adapter depth reaches (the depth it needs in brackets). "
        f"Over {len(surfaces)} surfaces x {len(modes)} modes: {tally}. Full reasons: "
        "`lowering-matrix.md`.\n\n"
        f"![lowering matrix heatmap]({PICTURES['heatmap']})\n\n" + _table(["surface", *modes], rows)
    )


def _conformance_of_run(out: Path) -> str:
    path = out / "trace-verdicts.json"
    title = "## 2. Did this run conform? (every trace, checked by refinement)"
    if not path.is_file():
        return f"{title}\n\nNo trace was checked in this run."
    checks = [TraceCheck(**c) for c in json.loads(path.read_text(encoding="utf-8"))]
    wrong = [c for c in checks if not c.as_expected]
    by_lane: dict[str, Counter[str]] = {}
    for check in checks:
        by_lane.setdefault(check.lane, Counter())[check.outcome] += 1
    lanes = [
        [
            lane,
            str(sum(counts.values())),
            *(str(counts[o]) for o in ("accepted", "rejected", "inconclusive", "invalid")),
        ]
        for lane, counts in by_lane.items()
    ]
    rows = [
        [
            c.lane,
            c.trace,
            c.expected,
            c.outcome,
            c.rule or "",
            "yes" if c.as_expected else "**NO**",
            c.reason,
        ]
        for c in checks
    ]
    verdict = (
        f"All {len(checks)} traces got the verdict their scenario expects."
        if not wrong
        else f"**{len(wrong)} of {len(checks)} traces did NOT get the verdict their scenario expects.**"
    )
    return (
        f"{title}\n\nEvery trace the MicroRuntime scenarios and the vLLM lanes wrote in this run was "
        "checked by `kvclaims.refinement.check_trace`. A positive run must be accepted; a `control-*` "
        "run is a deliberately broken or non-claim run and must not be accepted (the engine lane's "
        "controls name their own expectation: rejected by a rule, or accepted with no claim "
        f"outcome evidenced). {verdict}\n\n"
        + _table(["lane", "traces", "accepted", "rejected", "inconclusive", "invalid"], lanes)
        + "\n\n"
        + _table(["lane", "trace", "expected", "verdict", "rule", "as expected", "why (rejections)"], rows)
    )


def _soundness(out: Path, records: list[StageRecord]) -> str:
    title = "## 3. Are the rules sound? (proofs and adversary)"
    proofs = sorted((out / "proofs").glob("*.json")) if (out / "proofs").is_dir() else []
    parts = [title]
    if proofs:
        rows = []
        for path in proofs:
            proof = json.loads(path.read_text(encoding="utf-8"))
            rows.append([proof["name"], proof["method"], proof["verdict"], proof["statement"]])
        proved = sum(1 for r in rows if r[2] == "proved")
        parts.append(
            f"{proved} of {len(rows)} proof obligations proved with Z3 in this run (details and times: "
            "`proofs/REPORT.md`).\n\n" + _table(["obligation", "method", "verdict", "statement"], rows)
        )
    else:
        parts.append("No proof obligations were run in this run.")
    adversary = next((r for r in records if r.name.startswith("adversary")), None)
    if adversary is not None:
        parts.append(f"**Adversary** ({adversary.status}, {adversary.seconds:.1f} s): {adversary.summary}")
    return "\n\n".join(parts)


def _pictures(out: Path) -> str:
    path = out / "pictures.json"
    if not path.is_file():
        return "## Pictures\n\nThe pictures were not drawn in this run."
    record = json.loads(path.read_text(encoding="utf-8"))
    timeline = record["timeline"]
    origin = (
        f"one vLLM engine-lane run (`{timeline['trace']}`)"
        if timeline["from_vllm"]
        else f"a **MicroRuntime** run (`{timeline['trace']}`), **not vLLM**: the vLLM lanes did not run"
    )
    return (
        "## Pictures\n\n"
        "**Capacity sweep** (measured on the MicroRuntime, "
        f"{record['capacity']['points']} runs): a 60-block resident claim, then a 70-block request, "
        "at every usable pool size; resident blocks still cached and the request's outcome per policy.\n\n"
        f"![capacity sweep]({PICTURES['capacity']})\n\n"
        f"**Per-claim lifecycle timeline** of {origin}: each claim's phase (read from the refinement "
        "checker after every event) and its offload / restore / failure / refusal events.\n\n"
        f"![claim timeline]({PICTURES['timeline']})\n\n"
        "**Lifecycle state diagram**, drawn with networkx from `lifecycle.TRANSITIONS` itself.\n\n"
        f"![lifecycle diagram]({PICTURES['diagram']})"
    )
