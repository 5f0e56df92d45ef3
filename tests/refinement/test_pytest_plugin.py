"""`assert_refines` as a function and as the fixture of the kvclaims pytest plugin (loaded
through the `pytest11` entry point): it passes only accepted traces, and a failing test's
report carries the rendered counterexample."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvclaims.refinement.assertions import FAILURE_HEADLINE, assert_refines
from kvclaims.refinement.testing import TraceBuilder
from kvclaims.refinement.verdict import Outcome

pytest_plugins = ["pytester"]


def conforming() -> TraceBuilder:
    trace = TraceBuilder(usable_blocks=80).accept("C").store_prefix("C", 4).materialize("C", 4)
    return trace.admit("r").reuse("r", "C", 4).finish("r")


def harm_after_demotion() -> TraceBuilder:
    """Loss after demotion is not harm: the model rejects the harm event (rule lifecycle)."""
    trace = TraceBuilder(usable_blocks=80).accept("C").store_prefix("C", 4).materialize("C", 4)
    trace.claim_event("demoted", "C").remove_block("C", 0)
    return trace.claim_event("harmed", "C", leading_blocks=0, required_blocks=4)


def test_an_accepted_trace_passes_and_returns_its_verdict(tmp_path: Path) -> None:
    path = tmp_path / "run.ndjson"
    path.write_bytes(conforming().ndjson())
    assert assert_refines(path).outcome is Outcome.accepted
    assert assert_refines(str(path)).steps > 0
    assert assert_refines(conforming().ndjson()).outcome is Outcome.accepted


def test_a_rejection_fails_with_the_rendered_counterexample(tmp_path: Path) -> None:
    trace = harm_after_demotion()
    path = tmp_path / "bad.ndjson"
    path.write_bytes(trace.ndjson())
    offending = len(trace.events) + 1  # the header is line 1
    for given in (path, trace.ndjson()):
        with pytest.raises(AssertionError) as failed:
            assert_refines(given)
        message = str(failed.value)
        assert message.startswith(FAILURE_HEADLINE)
        assert f"line {offending}: [lifecycle]" in message
        assert f"rule: lifecycle   about: claim C   event {len(trace.events)} (line {offending})" in message
        assert "claim C before it: demoted" in message
        assert "the model allowed instead: release" in message
        assert f"  > {offending:>6} | " in message and '"event":"resident_claim_harmed"' in message
        prefix = message.split(
            "the lines that show the violation (rejected on their own, by the same rule):\n", 1
        )[1]
        assert "resident_claim_demoted claim_id=C" in prefix
        assert f"  > {offending:>6} | resident_claim_harmed" in prefix


def test_invalid_and_inconclusive_traces_fail_closed(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"(?s)invalid .*\[parse\] truncated last line"):
        assert_refines(b'{"kvclaims_trace": 1}\n{"seq": 1, "event"')
    with pytest.raises(FileNotFoundError, match=f"trace file not found: {tmp_path / 'missing.ndjson'}"):
        assert_refines(tmp_path / "missing.ndjson")
    unknown = conforming().add("something_new").ndjson()
    with pytest.raises(AssertionError, match=r"(?s)inconclusive .*\[unknown_event\]"):
        assert_refines(unknown)
    assert assert_refines(unknown, allow_inconclusive=True).outcome is Outcome.inconclusive
    with pytest.raises(AssertionError, match="rejected"):
        assert_refines(harm_after_demotion().ndjson(), allow_inconclusive=True)


def test_a_bad_format_name_is_an_error_not_a_verdict() -> None:
    with pytest.raises(ValueError, match="unknown trace format"):
        assert_refines(conforming().ndjson(), format="no-such-format")


def test_the_plugin_fixtures_pass_and_fail_a_users_test_suite(pytester: pytest.Pytester) -> None:
    (pytester.path / "good.ndjson").write_bytes(conforming().ndjson())
    (pytester.path / "bad.ndjson").write_bytes(harm_after_demotion().ndjson())
    pytester.makepyfile(
        test_runtime="""
        from pathlib import Path

        HERE = Path(__file__).parent

        def test_recorded_run_conforms(assert_refines):
            assert assert_refines(HERE / "good.ndjson").outcome == "accepted"

        def test_hand_written_trace_conforms(assert_refines, kvclaims_trace_builder):
            trace = kvclaims_trace_builder(usable_blocks=16).accept("A", blocks=2)
            assert_refines(trace.store_prefix("A", 2).materialize("A", 2).ndjson())

        def test_broken_run(assert_refines):
            assert_refines(HERE / "bad.ndjson")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_broken_run*",
            f"E * {FAILURE_HEADLINE}:",
            "E * rejected *bad.ndjson (kvclaims-v1, *",
            "E *rule: lifecycle   about: claim C*",
            "E *claim C before it: demoted*",
            "E *the model allowed instead: release*",
            "E *surrounding events:",
            'E *>     10 | {"seq":8,"event":"resident_claim_harmed"*',
            "E *the lines that show the violation (rejected on their own, by the same rule):",
            "E *resident_claim_harmed claim_id=C*",
            "*1 failed, 2 passed*",
        ]
    )


def test_the_fixture_reads_relative_paths_from_the_test_file_and_names_a_missing_one(
    pytester: pytest.Pytester,
) -> None:
    """Run from another directory: `runs/good.ndjson` is found next to the test file, and a
    missing trace fails as a missing file with its resolved path, not as a verdict."""
    tests = pytester.mkdir("suite")
    (tests / "runs").mkdir()
    (tests / "runs" / "good.ndjson").write_bytes(conforming().ndjson())
    (tests / "test_relative.py").write_text(
        "def test_relative(assert_refines):\n"
        "    assert assert_refines('runs/good.ndjson').outcome == 'accepted'\n"
        "\n"
        "def test_missing(assert_refines):\n"
        "    assert_refines('runs/absent.ndjson')\n"
    )
    elsewhere = pytester.mkdir("elsewhere")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(elsewhere)
        result = pytester.runpytest(str(tests), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [f"E *FileNotFoundError: trace file not found: {tests / 'runs' / 'absent.ndjson'}"]
    )
    assert FAILURE_HEADLINE not in result.stdout.str()
