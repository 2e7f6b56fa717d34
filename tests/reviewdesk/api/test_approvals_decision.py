"""POST /api/v1/approvals/{id}/decision: who may decide, and what a bad decision leaves behind."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from reviewdesk.approvals.models import ApprovalRequest, Decision
from reviewdesk.audit.models import AuditEvent
from reviewdesk.runs.models import RunStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def decide(django_capture_on_commit_callbacks):
    """decide(client, approval, **body) → the response, with what it scheduled on commit run.

    These tests never commit, so without running the callbacks an empty queue after a
    refused decision would prove nothing.
    """

    def post(client, approval, **body):
        body.setdefault("checkpoint_id", str(approval.checkpoint_id))
        body.setdefault("verdict", "approve")
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(f"/api/v1/approvals/{approval.id}/decision", body, format="json")

    return post


class Unchanged:
    """Snapshot of what a refused decision must not change."""

    def __init__(self, approval: ApprovalRequest, task_queue) -> None:
        self.approval, self.task_queue = approval, task_queue
        self.status = approval.status
        self.run_status = approval.run.status
        self.audit = self.audit_rows()

    def assert_holds(self) -> None:
        self.approval.refresh_from_db()
        self.approval.run.refresh_from_db()
        assert self.approval.status == self.status
        assert self.approval.run.status == self.run_status
        assert self.audit_rows() == self.audit
        assert self.task_queue.length() == 0

    @staticmethod
    def audit_rows() -> int:
        # Creating the test client's token is audited too; it comes after the snapshot.
        return AuditEvent.objects.exclude(action="token.created").count()


def test_a_reviewer_approves_and_gets_the_signed_decision(
    interrupted_run, personas, api_as, task_queue, decide
):
    run, approval = interrupted_run()
    response = decide(api_as(personas.alice, "review"), approval, reason="looks right")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["verdict"] == "approve" and body["reviewer"] == "alice"
    assert body["key_id"].startswith("ed25519:")
    payload = body["payload"]
    assert payload["run_id"] == str(run.id)
    assert payload["checkpoint_id"] == str(approval.checkpoint_id)
    assert payload["tool"] == "send_email"
    assert payload["arguments_sha256"] == approval.arguments_sha256
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == "approved"
    assert run.status == RunStatus.QUEUED
    assert AuditEvent.objects.filter(action="decision.approve", actor=personas.alice).count() == 1
    assert task_queue.length() == 1  # resume, enqueued on commit


def test_a_rejection_records_the_reason(interrupted_run, personas, api_as, decide):
    _, approval = interrupted_run()
    response = decide(api_as(personas.bob, "review"), approval, verdict="reject", reason="wrong customer")
    assert response.status_code == 201
    approval.refresh_from_db()
    assert approval.status == "rejected"
    assert approval.decision.reason == "wrong customer"


def test_a_non_reviewer_gets_403_and_nothing_changes(interrupted_run, personas, api_as, task_queue, decide):
    _, approval = interrupted_run()
    unchanged = Unchanged(approval, task_queue)
    assert decide(api_as(personas.olivia, "review"), approval).status_code == 403
    unchanged.assert_holds()


def test_the_submitter_cannot_approve_their_own_run(interrupted_run, personas, api_as, task_queue, decide):
    # admin is a reviewer too; make admin the submitter to prove the rule is about the run, not the role
    from reviewdesk.runs.models import Run

    run, approval = interrupted_run()
    Run.objects.filter(pk=run.pk).update(submitted_by=personas.alice)
    unchanged = Unchanged(approval, task_queue)
    response = decide(api_as(personas.alice, "review"), approval)
    assert response.status_code == 403
    assert "submitted" in response.json()["detail"]
    unchanged.assert_holds()


def test_a_token_without_review_scope_gets_403(interrupted_run, personas, api_as, task_queue, decide):
    _, approval = interrupted_run()
    unchanged = Unchanged(approval, task_queue)
    assert decide(api_as(personas.alice, "submit"), approval).status_code == 403
    unchanged.assert_holds()


def test_a_reviewer_not_assigned_sees_404_like_a_missing_approval(
    interrupted_run, personas, api_as, task_queue, decide
):
    _, approval = interrupted_run(reviewers=["bob"])
    unchanged = Unchanged(approval, task_queue)
    client = api_as(personas.alice, "review")
    assert decide(client, approval).status_code == 404
    assert client.get(f"/api/v1/approvals/{approval.id}").status_code == 404
    assert str(approval.id) not in [a["id"] for a in client.get("/api/v1/approvals").json()["results"]]
    unchanged.assert_holds()
    assert decide(api_as(personas.bob, "review"), approval).status_code == 201


def test_a_second_decision_is_409(interrupted_run, personas, api_as, task_queue, decide):
    _, approval = interrupted_run()
    assert decide(api_as(personas.alice, "review"), approval).status_code == 201
    approval.refresh_from_db()
    task_queue.clear()
    unchanged = Unchanged(approval, task_queue)
    response = decide(api_as(personas.bob, "review"), approval, verdict="reject")
    assert response.status_code == 409
    assert response.json()["code"] == "decided"
    unchanged.assert_holds()
    assert Decision.objects.count() == 1


def test_an_expired_approval_is_410(interrupted_run, personas, api_as, task_queue, decide):
    _, approval = interrupted_run()
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    approval.refresh_from_db()
    unchanged = Unchanged(approval, task_queue)
    response = decide(api_as(personas.alice, "review"), approval)
    assert response.status_code == 410
    unchanged.assert_holds()
    assert Decision.objects.count() == 0


def test_a_stale_checkpoint_id_is_409(interrupted_run, personas, api_as, task_queue, decide):
    run, approval = interrupted_run()
    older = run.checkpoints.order_by("number").first()
    assert older.id != approval.checkpoint_id
    unchanged = Unchanged(approval, task_queue)
    response = decide(api_as(personas.alice, "review"), approval, checkpoint_id=str(older.id))
    assert response.status_code == 409
    assert response.json()["code"] == "stale"
    unchanged.assert_holds()


def test_an_edit_that_fails_the_tools_schema_is_422(interrupted_run, personas, api_as, task_queue, decide):
    _, approval = interrupted_run()
    unchanged = Unchanged(approval, task_queue)
    response = decide(api_as(personas.alice, "review"), approval, verdict="edit", arguments={"to": "x"})
    assert response.status_code == 422
    assert response.json()["errors"]
    unchanged.assert_holds()


@pytest.mark.parametrize(
    "body",
    [
        {"verdict": "maybe"},
        {"checkpoint_id": "not-a-uuid"},
        {"checkpoint_id": 123},  # DRF reads an integer as a UUID: this was a 409 stale
        {"verdict": "approve", "arguments": {"a": 1}},
        {"extra": 1},
        {"reason": 5},
    ],
    ids=[
        "unknown verdict",
        "bad checkpoint id",
        "checkpoint id a number",
        "arguments without edit",
        "unknown field",
        "reason a number",
    ],
)
def test_invalid_decision_bodies_are_422(interrupted_run, personas, api_as, task_queue, decide, body):
    _, approval = interrupted_run()
    unchanged = Unchanged(approval, task_queue)
    response = decide(api_as(personas.alice, "review"), approval, **body)
    assert response.status_code == 422, response.json()
    unchanged.assert_holds()


def test_malformed_json_is_400(
    interrupted_run, personas, api_as, task_queue, django_capture_on_commit_callbacks
):
    _, approval = interrupted_run()
    unchanged = Unchanged(approval, task_queue)
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as(personas.alice, "review").post(
            f"/api/v1/approvals/{approval.id}/decision", data=b"{nope", content_type="application/json"
        )
    assert response.status_code == 400
    unchanged.assert_holds()


def test_the_pending_list_shows_the_contract_fields(interrupted_run, personas, api_as):
    _, approval = interrupted_run()
    results = api_as(personas.alice, "review").get("/api/v1/approvals?status=pending").json()["results"]
    assert [a["id"] for a in results] == [str(approval.id)]
    item = results[0]
    for field in (
        "id",
        "run",
        "tool",
        "arguments",
        "arguments_sha256",
        "reason",
        "reviewer",
        "expires_at",
        "checkpoint_id",
        "status",
        "decision",
    ):
        assert field in item
    assert item["arguments"]["to"] == "ada@example.com"
    assert item["status"] == "pending" and item["decision"] is None


@pytest.mark.timeout(60)
def test_an_answer_to_a_question_whose_pattern_backtracks_without_end_is_a_prompt_422(
    interrupted_run, personas, api_as, decide
):
    """The model picks the question's JSON Schema, `pattern` included; a reviewer's answer is
    checked in the web process. `^(a+)+$` against 40 a's and a b backtracks for hours in `re`:
    the answer comes back 422 `invalid_answer` within the bound, and nothing is decided."""
    import time

    from agents.questions import PATTERN_CHECK_SECONDS

    script = [
        {
            "tool_calls": [
                {
                    "name": "ask_human",
                    "arguments": {
                        "question": "Only a's?",
                        "schema": {"type": "string", "pattern": "^(a+)+$"},
                    },
                }
            ]
        },
        {"content": "Thanks."},
    ]
    _run, question = interrupted_run(script)
    alice = api_as(personas.alice, "review")
    started = time.monotonic()

    refused = decide(alice, question, verdict="answer", answer="a" * 40 + "b")

    assert time.monotonic() - started < PATTERN_CHECK_SECONDS + 3
    assert refused.status_code == 422, refused.content
    assert refused.json()["code"] == "invalid_answer" and "took longer" in refused.json()["detail"]
    assert not Decision.objects.exists()
    answered = decide(alice, question, verdict="answer", answer="aaaa")
    assert answered.status_code == 201, answered.content
