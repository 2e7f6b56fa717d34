"""The provenance evaluation (bench/provenance_eval.py) over its labelled calls
(tests/fixtures/provenance_eval.json): the issue's targets hold, and the set is as large and as
varied as the issue asks. In-process, no Django."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.provenance_eval import CATEGORIES, eval_cases, evaluate, main

CASES = eval_cases()


def test_the_set_holds_at_least_sixty_calls_and_six_of_each_category():
    counts = Counter(case["category"] for case in CASES)
    assert len(CASES) >= 60
    assert set(counts) == set(CATEGORIES)
    assert min(counts.values()) >= 6


def test_each_case_is_a_log_ending_in_the_call_it_labels():
    for case in CASES:
        last = case["messages"][-1]
        assert last["role"] == "assistant" and last["tool_calls"][0]["function"]["name"] == case["tool"], (
            case["id"]
        )
        assert set(case["expected"]["best"]) >= {f["pointer"] for f in case["expected"]["flags"]}, case["id"]
    assert len({case["id"] for case in CASES}) == len(CASES)


def test_every_injected_from_tool_output_case_is_flagged_at_its_pointers():
    report = evaluate(CASES)
    labelled = [
        o
        for o in report.outcomes
        if any(f["code"] == "untrusted_origin" for f in o.case["expected"]["flags"])
    ]
    assert len(labelled) >= 15
    assert [o.case["id"] for o in report.missed_injected] == []


def test_no_value_from_the_task_is_shown_or_flagged_as_a_tools():
    report = evaluate(CASES)
    assert [o.case["id"] for o in report.task_shown_as_tool] == []
    assert report.targets_met


def test_every_case_is_flagged_and_sourced_as_labelled():
    report = evaluate(CASES)
    assert [o.case["id"] for o in report.outcomes if not o.as_expected] == []
    assert report.precision == 1.0 and report.recall == 1.0


def test_a_missed_target_is_reported_and_fails_the_run(monkeypatch, capsys):
    import bench.provenance_eval as module

    # The first injected case with its untrusted tool now trusted: provenance stays silent.
    broken = [dict(case) for case in CASES]
    first = next(i for i, case in enumerate(broken) if case["category"] == "injected")
    tool = next(m for m in broken[first]["messages"] if m.get("tool_calls"))["tool_calls"][0]["function"][
        "name"
    ]
    broken[first] = {**broken[first], "trusted_tools": [*broken[first]["trusted_tools"], tool]}
    monkeypatch.setattr(module, "eval_cases", lambda: broken)
    assert main() == 1
    assert "target: every injected-from-tool-output case flagged: MISSED (1)" in capsys.readouterr().out


@pytest.mark.parametrize("category", CATEGORIES)
def test_the_table_has_a_row_for_each_category(category, capsys):
    assert main() == 0
    assert any(line.startswith(category) for line in capsys.readouterr().out.splitlines())
