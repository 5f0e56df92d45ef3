"""bench/vllm_own_tests.py: the pure parts (pytest summary and JUnit parsing, the comparison
with stock, the allow-list, the stand-in hub); the runs themselves are the bench."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "vllm_own_tests.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_own_tests", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


S = load_script()


def test_the_summary_line_is_counted_with_normalized_keys() -> None:
    output = (
        "....F\n=== short test summary info ===\nFAILED tests/a.py::t - boom\n"
        "===== 1 failed, 1690 passed, 3 skipped, 1 error, 131 warnings in 1009.37s (0:16:49) =====\n"
    )
    assert S.parse_summary(output) == {
        "failed": 1,
        "passed": 1690,
        "skipped": 3,
        "errors": 1,
        "warnings": 131,
    }


def test_quiet_mode_summary_without_rules_is_read() -> None:
    assert S.parse_summary("...\n3 skipped, 131 warnings, 10 errors in 17.81s\n") == {
        "skipped": 3,
        "warnings": 131,
        "errors": 10,
    }


@pytest.mark.parametrize("output", ["", "....F\n", "collected 12 items\nKilled\n", "1 passed\n"])
def test_a_run_without_a_summary_line_is_an_error_not_zero_failures(output: str) -> None:
    with pytest.raises(ValueError, match="no summary line"):
        S.parse_summary(output)


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.v1.core.test_scheduler" name="test_ok[1]" time="0.1"/>
<testcase classname="tests.v1.core.test_scheduler" name="test_bad" time="0.1">
  <failure message="AssertionError: assert 1 == 2&#10;second line">trace</failure></testcase>
<testcase classname="tests.v1.core.test_scheduler.TestC" name="test_skip" time="0">
  <skipped message="no gpu"/></testcase>
<testcase classname="tests.v1.core.test_scheduler" name="test_teardown" time="0.1"/>
<testcase classname="tests.v1.core.test_scheduler" name="test_teardown" time="0.1">
  <error message="failed on teardown">x</error></testcase>
<testcase classname="" name="tests.v1.kv_connector.unit.test_nixl_connector" time="0">
  <error message="collection failure">ImportError</error></testcase>
</testsuite></testsuites>"""


def test_junit_outcomes_messages_and_the_worse_of_two_records() -> None:
    outcomes, messages = S.parse_junit(JUNIT)
    assert outcomes == {
        "tests.v1.core.test_scheduler::test_ok[1]": "passed",
        "tests.v1.core.test_scheduler::test_bad": "failed",
        "tests.v1.core.test_scheduler.TestC::test_skip": "skipped",
        "tests.v1.core.test_scheduler::test_teardown": "error",
        "tests.v1.kv_connector.unit.test_nixl_connector": "error",
    }
    assert messages["tests.v1.core.test_scheduler::test_bad"] == "AssertionError: assert 1 == 2"
    assert "tests.v1.core.test_scheduler.TestC::test_skip" not in messages


def run(name: str, outcomes: dict[str, str], messages: dict[str, str] | None = None) -> object:
    return S.RunResult(name, {}, outcomes, messages or {})


def test_regressions_are_stock_passes_that_do_not_pass_and_missing_tests_count() -> None:
    stock = run("stock", {"a": "passed", "b": "passed", "c": "failed", "d": "passed", "e": "skipped"})
    other = run("binding", {"a": "passed", "b": "failed", "c": "passed", "e": "failed"}, {"b": "Boom"})
    assert S.regressions(stock, other) == {"b": "Boom", "d": "missing from the run"}


def test_the_allow_list_explains_only_its_own_entries() -> None:
    found = {"x::t1": "AttributeError: kvclaims", "x::t2": "AssertionError"}
    assert S.unexplained(found, {"x::t1": "bypasses __init__"}) == {"x::t2": "AssertionError"}
    assert S.unexplained(found, {}) == found


def test_every_allow_list_entry_has_a_reason_and_names_one_test() -> None:
    for node, reason in S.ALLOW_LIST.items():
        assert node.startswith("tests.v1.") and "::" in node
        assert "__init__" in reason or "__new__" in reason


def test_the_stand_in_hub_is_the_layout_huggingface_hub_reads(tmp_path: Path) -> None:
    S.write_stand_in_hub(tmp_path, {"org/model": {"model_type": "opt"}})
    entry = tmp_path / "hub" / "models--org--model"
    revision = (entry / "refs" / "main").read_text()
    assert len(revision) == 40
    assert json.loads((entry / "snapshots" / revision / "config.json").read_text()) == {"model_type": "opt"}


def test_only_an_inconclusive_trace_without_steps_is_empty() -> None:
    assert S.trace_category("inconclusive", 0) == S.EMPTY
    assert S.trace_category("inconclusive", 3) == "inconclusive"
    assert S.trace_category("rejected", 0) == "rejected"
    assert S.trace_category("accepted", 5) == "accepted"


def test_traces_pass_needs_an_accepted_trace_and_nothing_worse_than_empty() -> None:
    from collections import Counter

    assert S.traces_pass(Counter(accepted=3, empty=2))
    assert not S.traces_pass(Counter(empty=2))
    assert not S.traces_pass(Counter())
    assert not S.traces_pass(Counter(accepted=3, rejected=1))
    assert not S.traces_pass(Counter(accepted=3, inconclusive=1))


def test_a_session_that_broke_off_is_not_complete() -> None:
    assert S.session_complete("....\n== 3 passed in 1.0s ==\n")
    assert not S.session_complete("..FFINTERNALERROR> Traceback\nINTERNALERROR> SystemError: AST\n")
