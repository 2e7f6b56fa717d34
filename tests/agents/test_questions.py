"""Questions in the runtime (no Django): the gate hands the model only a signed answer."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta

import pytest

from agents import questions
from agents.decisions import decision_payload, sign_payload
from agents.gate import DecisionRefused
from agents.questions import answer_problem
from tests.agents.test_gate import CALL, CHECKPOINT, NOW, RUN, Desk, resigned

QUESTION = {"question": "Which colour?", "options": ["red", "blue"]}


def answered(desk: Desk, answer, *, verdict: str = "answer", version: int | None = None):
    decision = desk.decision(verdict=verdict)
    payload = decision_payload(
        decision_id=decision.decision_id,
        request_id="request-1",
        run_id=RUN,
        attempt=1,
        checkpoint_id=CHECKPOINT,
        tool_call_id=CALL,
        tool="ask_human",
        arguments=QUESTION,
        verdict=verdict,
        reviewer="alice",
        issued_at=NOW - timedelta(minutes=1),
        not_after=NOW + timedelta(hours=1),
        key_id=desk.key_id,
        answer=answer,
    )
    if version is not None:
        payload = {**payload, "version": version}
        payload.pop("answer_sha256")
    return replace(decision, payload=payload, signature=sign_payload(desk.key, payload), answer=answer)


@pytest.fixture
def desk():
    from agents.registry import get_agent

    return Desk(tool=get_agent("demo").tool("ask_human"), arguments=dict(QUESTION))


def test_the_signed_answer_is_the_result_consumed_and_recorded_once(desk):
    decision = answered(desk, "blue")

    assert desk.execute(decision) == "blue"
    assert desk.execute(decision) == "blue"  # a repeat reads the ledger, never asks again
    assert desk.ledger.consumed == {decision.decision_id}
    assert desk.ledger.rows[desk.key_for_ledger].result == "blue"


@pytest.mark.parametrize(
    "spoil, refusal",
    [
        (lambda d, desk: replace(d, answer="red"), "does not match what the reviewer signed"),
        (lambda d, desk: None, "needs a signed answer"),
        (lambda d, desk: answered(desk, None, verdict="approve"), "does not approve this call"),
        (lambda d, desk: answered(desk, "blue", version=2), "does not match what the reviewer signed"),
        (lambda d, desk: resigned(desk, d, tool_call_id="call_9_9"), "tool_call_id differs"),
    ],
    ids=["answer changed", "no decision", "an approval", "a version-2 payload", "another call"],
)
def test_the_gate_refuses_anything_but_the_signed_answer(desk, spoil, refusal):
    with pytest.raises(DecisionRefused, match=refusal):
        desk.execute(spoil(answered(desk, "blue"), desk))
    assert desk.ledger.consumed == set() and desk.key_for_ledger not in desk.ledger.rows


def test_an_answer_is_checked_against_options_schema_or_as_text():
    schema = {"question": "?", "schema": {"type": "integer", "minimum": 1}}

    assert answer_problem(QUESTION, "blue") is None
    assert "one of the options" in answer_problem(QUESTION, "green")
    assert answer_problem(schema, 3) is None
    assert "minimum" in answer_problem(schema, 0) or "less than" in answer_problem(schema, 0)
    assert answer_problem({"question": "?"}, "free text") is None
    assert "non-empty" in answer_problem({"question": "?"}, "  ")


def test_the_model_cannot_ask_with_both_options_and_a_schema_or_a_broken_schema(desk):
    both = {**QUESTION, "schema": {"type": "string"}}
    broken = {"question": "?", "schema": {"type": "bogus"}}

    assert desk.tool.validation_errors(both) == ["(root): give options or a schema, not both"]
    assert "not a valid JSON Schema" in desk.tool.validation_errors(broken)[0]


def test_a_schema_ref_must_resolve_inside_the_schema(desk):
    local = {"$defs": {"n": {"type": "integer"}}, "properties": {"size": {"$ref": "#/$defs/n"}}}
    nowhere = {"question": "?", "schema": {"$ref": "urn:nowhere"}}
    remote = {"question": "?", "schema": {"properties": {"a": {"$ref": "https://example.com/s.json"}}}}
    dangling = {"question": "?", "schema": {"properties": {"a": {"$ref": "#/$defs/missing"}}}}

    assert desk.tool.validation_errors({"question": "?", "schema": local}) == []
    assert "cannot resolve 'urn:nowhere'" in desk.tool.validation_errors(nowhere)[0]
    assert "cannot resolve" in desk.tool.validation_errors(remote)[0]
    assert "cannot resolve" in desk.tool.validation_errors(dangling)[0]
    assert "cannot be checked" in answer_problem(nowhere, "a")  # never an exception
    assert "size" in answer_problem({"question": "?", "schema": local}, {"size": "x"})


EVIL = {"question": "Only a's?", "schema": {"type": "string", "pattern": "^(a+)+$"}}


@pytest.mark.timeout(60)  # on the web process, re.search("^(a+)+$", "a" * 40 + "b") runs for hours
def test_a_pattern_that_backtracks_without_end_is_refused_within_a_bound():
    """The pattern is the model's choice and Python's `re` backtracks: checked in the web
    process, one answer held a web worker for as long as the match ran. It runs in a child
    process killed after PATTERN_CHECK_SECONDS, and the answer is refused, not hung."""
    started = time.monotonic()

    problem = answer_problem(EVIL, "a" * 40 + "b")

    elapsed = time.monotonic() - started
    assert problem is not None and "took longer than" in problem, problem
    assert elapsed < questions.PATTERN_CHECK_SECONDS + 2, elapsed


@pytest.mark.timeout(60)
def test_a_pattern_hidden_in_pattern_properties_is_bounded_too():
    schema = {"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}}}
    started = time.monotonic()

    problem = answer_problem({"question": "?", "schema": schema}, {"a" * 40 + "b": 1})

    assert problem is not None and "took longer than" in problem, problem
    assert time.monotonic() - started < questions.PATTERN_CHECK_SECONDS + 2


def test_a_pattern_still_decides_an_answer_it_can_match():
    code = {"question": "Which code?", "schema": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"}}
    keyed = {
        "question": "?",
        "schema": {"type": "object", "patternProperties": {"^n_": {"type": "integer"}}},
    }

    assert answer_problem(code, "ABC-42") is None
    assert "does not match" in answer_problem(code, "abc")
    assert answer_problem(EVIL, "a" * 40) is None  # the evil pattern matches quickly where it can
    assert answer_problem(keyed, {"n_a": 1, "other": "x"}) is None
    assert "n_a" in answer_problem(keyed, {"n_a": "one"})
    assert "cannot be checked" in answer_problem(
        {"question": "?", "schema": {"$ref": "#", "pattern": "a"}}, "a"
    )


def test_a_pattern_longer_than_the_limit_is_refused_when_asked_and_when_answered(desk):
    long = "a" * (questions.PATTERN_MAX + 1)
    asked = {"question": "?", "schema": {"type": "string", "pattern": long}}
    deep = {
        "question": "?",
        "schema": {"properties": {"x": {"type": "object", "patternProperties": {long: {}}}}},
    }
    fits = {"question": "?", "schema": {"type": "string", "pattern": "a" * questions.PATTERN_MAX}}

    assert "pattern" in desk.tool.validation_errors(asked)[0]
    assert f"at most {questions.PATTERN_MAX}" in desk.tool.validation_errors(deep)[0]
    assert desk.tool.validation_errors(fits) == []
    # A question asked before the limit: its answer is refused, the pattern never run.
    assert "longer than" in answer_problem(asked, "a")
