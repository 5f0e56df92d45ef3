"""Check traces by refinement (those a demo run wrote in its lane folders, a user's folder, the
bundled corpus) and judge each verdict against what its scenario is: a positive run must be
accepted, a `control-*` run must not be.

The engine lane's controls are the one refinement: each names its own expectation
(`vllm_binding.engine_scenarios.Expectation`: rejected with a rule, or accepted while exporting
no evidence for the claim it is about; the lane's own stage checks that evidence part). Here a
control is judged by the outcome and rule it names, and every other control must not be
accepted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from kvclaims.refinement import check_trace
from kvclaims.refinement.sources import AUTO
from kvclaims.spec.descriptor import Descriptor
from kvclaims.spec.vocabulary import AnchorKind

LANES = {
    "scenarios": "MicroRuntime scenarios",
    "vllm": "vLLM scheduler lane",
    "vllm-engine": "vLLM engine lane",
    "vllm-hybrid": "vLLM hybrid lane",
}
"""Demo output folder -> the lane that wrote its traces."""


@dataclass(frozen=True)
class TraceCheck:
    """One trace's refinement verdict and whether it is what its scenario expects."""

    lane: str
    scenario: str
    trace: str
    """Path relative to the demo output folder."""
    format: str
    """The format the trace was read in (a trace its descriptors cite two ways has two checks)."""
    control: bool
    expected: str
    outcome: str
    rule: str | None
    reason: str
    as_expected: bool

    def as_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class FoundTrace:
    """A trace to check: which lane wrote it, the scenario it is a run of, where it is, the
    name the report shows for it, and how it is read (its format, `auto` to detect it, and the
    claim registry a KV-event capture is joined with)."""

    lane: str
    scenario: str
    path: Path
    shown: str
    format: str = AUTO
    registry: Path | None = None


@dataclass(frozen=True)
class CheckJob:
    """How a descriptor's trace anchor says its trace is re-checked."""

    format: str
    registry: Path | None


def anchored_checks(descriptors: list[Descriptor]) -> dict[Path, list[CheckJob]]:
    """Each local trace the descriptors cite -> the distinct ways their anchors say it is
    re-checked: the anchor's `format` (absent: `auto`) and `registry` (paths with links resolved,
    so that one file is one key however it is reached). The one place
    that turns anchors into check jobs; a trace cited two ways is checked both ways."""
    jobs: dict[Path, list[CheckJob]] = {}
    for descriptor in descriptors:
        for anchor in descriptor.anchors():
            if anchor.kind is not AnchorKind.trace or not anchor.local or anchor.resolved is None:
                continue
            registry = anchor.registry_file.resolve() if anchor.registry_file else None
            job = CheckJob(str(anchor.format) if anchor.format else AUTO, registry)
            known = jobs.setdefault(anchor.resolved.resolve(), [])
            if job not in known:
                known.append(job)
    return jobs


def _scenario_of(out: Path, path: Path, folder: str) -> str:
    """A one-run scenario is `<name>.ndjson`; a several-run one is a folder `<name>/`."""
    relative = path.relative_to(out / folder)
    return relative.parts[0] if len(relative.parts) > 1 else path.stem


def _engine_expectation(scenario: str) -> tuple[str, str | None] | None:
    """(outcome, rule) an engine-lane scenario names, or None when it names none (vLLM absent
    or an unknown scenario)."""
    try:
        from kvclaims.lab.engine_scenarios import ENGINE_SCENARIOS
    except ImportError:
        return None
    known = ENGINE_SCENARIOS.get(scenario)
    return (known.expect.outcome, known.expect.rule) if known else None


def judge(lane: str, scenario: str, outcome: str, rule: str | None) -> tuple[str, bool]:
    """(what was expected, in words; whether `outcome`/`rule` meets it)."""
    control = scenario.startswith("control-")
    named = _engine_expectation(scenario) if lane == "vllm-engine" else None
    if named is not None:
        want, want_rule = named
        words = want + (f" by rule {want_rule}" if want_rule else "")
        if control and want == "accepted":
            words += " (no claim outcome evidenced)"
        return words, outcome == want and (want_rule is None or rule == want_rule)
    if control:
        return "not accepted", outcome != "accepted"
    return "accepted", outcome == "accepted"


def lane_traces(out: Path, since_ns: int = 0) -> list[FoundTrace]:
    """Every `*.ndjson` under the lane folders of `out` written at or after `since_ns` (so a
    rerun into the same folder never judges an older run's traces), in lane then path order."""
    found = []
    for folder in LANES:
        root = out / folder
        if root.is_dir():
            found += [
                FoundTrace(folder, _scenario_of(out, p, folder), p, str(p.relative_to(out)))
                for p in sorted(root.rglob("*.ndjson"))
                if p.stat().st_mtime_ns >= since_ns
            ]
    return found


def folder_traces(
    lane: str, root: Path, files: list[Path], anchored: dict[Path, list[CheckJob]] | None = None
) -> list[FoundTrace]:
    """`files` found under `root` (a user's folder, the bundled corpus), each a run of its own:
    shown relative to `root`'s parent, its scenario is its file name. A file that `anchored`
    (`anchored_checks`) names is checked each way its anchors say; any other, format detected
    and without a registry."""
    found = []
    for path in files:
        jobs = (anchored or {}).get(path.resolve(), [CheckJob(AUTO, None)])
        scenario, shown = path.name.split(".")[0], str(path.relative_to(root.parent))
        found += [FoundTrace(lane, scenario, path, shown, job.format, job.registry) for job in jobs]
    return found


def check_traces(found: list[FoundTrace]) -> list[TraceCheck]:
    """Check each trace and judge its verdict against what its scenario expects."""
    checks = []
    for entry in found:
        verdict = check_trace(entry.path, format=entry.format, registry=entry.registry)
        outcome = str(verdict.outcome)
        rule = str(verdict.rule) if verdict.rule else None
        expected, ok = judge(entry.lane, entry.scenario, outcome, rule)
        checks.append(
            TraceCheck(
                lane=LANES.get(entry.lane, entry.lane),
                scenario=entry.scenario,
                trace=entry.shown,
                format=verdict.format,
                control=entry.scenario.startswith("control-"),
                expected=expected,
                outcome=outcome,
                rule=rule,
                reason=verdict.reason if outcome != "accepted" else "",
                as_expected=ok,
            )
        )
    return checks
