"""Questions: ask_human waits for a reviewer's answer, validated, signed, and the tool's result."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from agents.canonical import sha256_hex
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, Decision
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import ErrorKind, Message, RunStatus
from tests.reviewdesk.approvals.conftest import asking

pytestmark = pytest.mark.django_db


COLOUR = {"question": "Which colour?", "options": ["red", "blue"]}
SIZE = {
    "question": "How many?",
    "schema": {
        "type": "object",
        "properties": {"size": {"type": "integer", "minimum": 1}},
        "required": ["size"],
    },
}


def answer(api_as, reviewer, approval, **body):
    body.setdefault("checkpoint_id", str(approval.checkpoint_id))
    body.setdefault("verdict", "answer")
    return api_as(reviewer, "review").post(f"/api/v1/approvals/{approval.id}/decision", body, format="json")


def tool_results(run):
    return [
        m.body["content"]
        for m in Message.objects.filter(run=run).order_by("position")
        if m.body["role"] == "tool"
    ]


def test_ask_human_interrupts_the_run_with_a_question(interrupted_run):
    _run, question = interrupted_run(asking(**COLOUR))

    assert question.kind == ApprovalKind.QUESTION and question.tool == "ask_human"
    assert question.arguments == COLOUR


def test_an_answer_is_signed_and_becomes_the_tool_result_the_model_reads(interrupted_run, personas, api_as):
    run, question = interrupted_run(asking(**COLOUR))

    response = answer(api_as, personas.alice, question, answer="blue")

    assert response.status_code == 201, response.json()
    decision = Decision.objects.get(request=question)
    assert decision.answer == "blue" and decision.payload["answer_sha256"] == sha256_hex("blue")
    assert decision.payload["version"] == 3 and response.json()["answer"] == "blue"
    run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert tool_results(run) == [json.dumps("blue")]


def test_an_answer_outside_the_options_is_422_with_the_reason(interrupted_run, personas, api_as):
    _run, question = interrupted_run(asking(**COLOUR))

    response = answer(api_as, personas.alice, question, answer="green")

    assert response.status_code == 422
    assert response.json()["code"] == "invalid_answer" and "red, blue" in response.json()["detail"]
    question.refresh_from_db()
    assert question.status == "pending" and not Decision.objects.exists()


def test_a_schema_question_takes_only_an_answer_the_schema_accepts(interrupted_run, personas, api_as):
    run, question = interrupted_run(asking(**SIZE))

    refused = answer(api_as, personas.alice, question, answer={"size": 0})
    accepted = answer(api_as, personas.alice, question, answer={"size": 3})

    assert refused.status_code == 422 and "size" in refused.json()["detail"]
    assert accepted.status_code == 201
    run_execute(run_id=run.id)
    assert tool_results(run) == [json.dumps({"size": 3})]


def test_a_question_is_not_approved_and_an_approval_is_not_answered(interrupted_run, personas, api_as):
    _, question = interrupted_run(asking(**COLOUR))
    _, approval = interrupted_run()

    approve = answer(api_as, personas.alice, question, verdict="approve")
    stray = answer(api_as, personas.alice, approval, verdict="approve", answer="blue")
    missing = answer(api_as, personas.alice, question)

    assert approve.status_code == 422 and approve.json()["code"] == "verdict"
    assert stray.status_code == 422 and "answer" in stray.json()["errors"]
    assert missing.status_code == 422 and "answer" in missing.json()["errors"]


def test_the_model_asking_with_an_invalid_schema_gets_an_error_not_a_question(interrupted_run):
    script = [
        {"tool_calls": [{"name": "ask_human", "arguments": {"question": "?", "schema": {"type": "bogus"}}}]},
        {"tool_calls": [{"name": "ask_human", "arguments": COLOUR}]},
    ]
    run, question = interrupted_run(script)

    assert "not a valid JSON Schema" in tool_results(run)[0]
    assert question.arguments == COLOUR


def test_the_model_asking_with_a_schema_whose_ref_points_outside_gets_an_error(interrupted_run):
    script = [
        {
            "tool_calls": [
                {"name": "ask_human", "arguments": {"question": "?", "schema": {"$ref": "urn:nowhere"}}}
            ]
        },
        {"tool_calls": [{"name": "ask_human", "arguments": COLOUR}]},
    ]
    run, question = interrupted_run(script)

    assert "cannot resolve 'urn:nowhere'" in tool_results(run)[0]
    assert question.arguments == COLOUR


def test_an_answer_to_a_schema_that_cannot_be_resolved_is_422_not_500(interrupted_run, personas, api_as):
    _run, question = interrupted_run(asking(**SIZE))
    # A request raised before refs were checked at ask time.
    ApprovalRequest.objects.filter(pk=question.pk).update(
        arguments={"question": "How many?", "schema": {"$ref": "urn:nowhere"}}
    )

    response = answer(api_as, personas.alice, question, answer="a")

    assert response.status_code == 422 and response.json()["code"] == "invalid_answer"
    assert not Decision.objects.exists()


@pytest.mark.parametrize(
    "schema",
    [{"$ref": "#"}, {"anyOf": [{"type": "integer"}, {"$ref": "#"}]}],
    ids=["refers to itself", "refers to itself on one branch"],
)
def test_an_answer_to_a_schema_that_refers_to_itself_without_end_is_422_not_500(
    interrupted_run, personas, api_as, schema
):
    """A valid schema whose $ref stays inside it, so the model may ask with it; validating any
    answer against it recursed until RecursionError, a 500 for every reviewer who answered."""
    _run, question = interrupted_run(asking(question="Anything?", schema=schema))

    response = answer(api_as, personas.alice, question, answer="a")

    assert response.status_code == 422, response.content
    assert response.json()["code"] == "invalid_answer" and "itself" in response.json()["detail"]
    assert not Decision.objects.exists()


def test_an_answer_changed_in_the_database_is_refused_by_the_gate(interrupted_run, personas, api_as):
    run, question = interrupted_run(asking(**COLOUR))
    assert answer(api_as, personas.alice, question, answer="blue").status_code == 201
    Decision.objects.filter(request=question).update(answer="red")

    run_execute(run_id=run.id)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.error_kind == ErrorKind.APPROVAL
    assert "does not match what the reviewer signed" in run.error
    assert tool_results(run) == []


def test_a_reviewer_answers_from_the_desk_page_with_an_option_button(interrupted_run, personas):
    _run, question = interrupted_run(asking(**COLOUR))
    client = Client()
    client.force_login(personas.alice)

    page = client.get(f"/approvals/{question.id}/").content.decode()
    response = client.post(
        f"/approvals/{question.id}/",
        {"checkpoint_id": str(question.checkpoint_id), "verdict": "answer", "answer": "red"},
    )

    assert 'name="answer" value="blue"' in page and "Which colour?" in page
    assert response.status_code == 302
    assert Decision.objects.get(request=question).answer == "red"
    answered = client.get(f"/approvals/{question.id}/").content.decode()
    assert 'id="answer">&quot;red&quot;' in answered and 'id="answer-form"' not in answered


def test_the_desk_builds_a_form_from_a_simple_schema_and_reads_it_back(interrupted_run, personas):
    _run, question = interrupted_run(asking(**SIZE))
    client = Client()
    client.force_login(personas.alice)

    page = client.get(f"/approvals/{question.id}/").content.decode()
    client.post(
        f"/approvals/{question.id}/",
        {"checkpoint_id": str(question.checkpoint_id), "verdict": "answer", "answer.size": "4"},
    )

    assert 'type="number" name="answer.size"' in page
    assert Decision.objects.get(request=question).answer == {"size": 4}


@pytest.mark.parametrize(
    ("arguments", "form"),
    [
        ({"question": "Why?"}, {"answer": "because\x00"}),
        (
            {"question": "Who?", "schema": {"type": "object", "properties": {"name": {"type": "string"}}}},
            {"answer.name": "ada\x00"},
        ),
    ],
    ids=["a text answer", "a schema's field"],
)
def test_an_answer_holding_a_nul_from_the_desk_page_is_refused_not_a_500(
    interrupted_run, personas, arguments, form
):
    """PostgreSQL's jsonb cannot hold U+0000: the answer was stored as typed, and the page a 500."""
    _run, question = interrupted_run(asking(**arguments))
    client = Client()
    client.force_login(personas.alice)
    response = client.post(
        f"/approvals/{question.id}/",
        {"checkpoint_id": str(question.checkpoint_id), "verdict": "answer", **form},
        follow=True,
    )
    assert response.status_code == 200
    assert "Null characters are not allowed." in response.content.decode()
    assert not Decision.objects.filter(request=question).exists()


ANY_JSON = {"question": "What shape?", "schema": {"type": "array"}}  # the page's JSON textarea


def nested_list(levels: int) -> str:
    """A JSON array `levels` containers deep, counting itself."""
    return "[" * levels + "]" * levels


def answer_from_the_desk_page(client, question, text: str):
    return client.post(
        f"/approvals/{question.id}/",
        {"checkpoint_id": str(question.checkpoint_id), "verdict": "answer", "answer": text},
        follow=True,
    )


def test_an_answer_from_the_desk_page_at_the_depth_limit_is_taken(interrupted_run, personas, settings):
    """DESK_JSON_MAX_DEPTH levels (64), counting the answer itself: the last accepted depth."""
    assert settings.DESK_JSON_MAX_DEPTH == 64
    _run, question = interrupted_run(asking(**ANY_JSON))
    client = Client()
    client.force_login(personas.alice)

    response = answer_from_the_desk_page(client, question, nested_list(64))

    assert response.status_code == 200
    assert json.dumps(Decision.objects.get(request=question).answer) == nested_list(64)


def test_an_answer_from_the_desk_page_one_level_past_the_limit_is_refused(interrupted_run, personas):
    """65 levels, the first refused depth: the page says why, and nothing is decided."""
    _run, question = interrupted_run(asking(**ANY_JSON))
    client = Client()
    client.force_login(personas.alice)

    response = answer_from_the_desk_page(client, question, nested_list(65))

    assert response.status_code == 200
    assert "the answer nests deeper than 64 levels" in response.content.decode()
    assert not Decision.objects.filter(request=question).exists()
    question.refresh_from_db()
    assert question.status == "pending"
