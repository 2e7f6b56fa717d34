"""POST /api/v1/external/approvals: an agent framework submits the calls it paused on."""

from __future__ import annotations

import pytest

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.audit.models import AuditEvent
from reviewdesk.events.models import DeskEvent
from reviewdesk.runs.models import Checkpoint, Run
from tests.reviewdesk.external.conftest import REFUND, args_sha256, call, submit_body

pytestmark = pytest.mark.django_db


def rows() -> tuple[int, int, int]:
    return Run.objects.count(), ApprovalRequest.objects.count(), Checkpoint.objects.count()


def test_a_submitted_call_becomes_a_pending_approval_on_an_external_run(submit, personas, task_queue):
    response = submit()
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["audience"] == "carol"
    assert body["run"]["kind"] == "external" and body["run"]["status"] == "input_required"
    assert body["run"]["external_id"] == "oa:thread-42"
    [approval] = body["approvals"]
    assert approval["tool_call_id"] == "call_1" and approval["status"] == "pending"
    assert approval["verdicts"] == ["approve", "reject", "edit"]
    assert approval["decision"] is None
    assert approval["url"].endswith(f"/approvals/{approval['id']}/")
    run = Run.objects.get(pk=body["run"]["id"])
    assert (run.kind, run.framework, run.agent, run.title, run.model) == (
        "external",
        "openai-agents",
        "support-bot",
        "Refund order 1234",
        None,
    )
    assert run.context["messages"][0]["content"] == "Please refund my order 1234."
    checkpoint = Checkpoint.objects.get(pk=body["checkpoint_id"])
    assert (checkpoint.run_id, checkpoint.schema_version, checkpoint.message_count) == (run.pk, 0, 0)
    assert checkpoint.snapshot == {"external_checkpoint": "state-1"}
    stored = ApprovalRequest.objects.get(pk=approval["id"])
    assert stored.checkpoint_id == checkpoint.pk
    assert stored.arguments == REFUND and stored.arguments_sha256 == args_sha256(REFUND)
    assert stored.reason == "The customer asked for a refund." and stored.preview.startswith("Refund 250")
    assert AuditEvent.objects.filter(action="approval.requested", subject_id=str(stored.pk)).count() == 1
    assert DeskEvent.objects.filter(type="approval.created", run=run).count() == 1
    assert task_queue.length() == 0  # no Celery task: the framework runs it


def test_the_same_call_again_meets_its_approval_with_200_and_makes_nothing(submit):
    first = submit().json()
    before = rows()
    again = submit()
    assert again.status_code == 200, again.json()
    assert again.json()["approvals"][0]["id"] == first["approvals"][0]["id"]
    assert again.json()["checkpoint_id"] == first["checkpoint_id"]
    assert rows() == before


def test_the_same_call_id_with_other_arguments_is_409_and_changes_nothing(submit):
    submit()
    before = rows()
    response = submit(submit_body(call(arguments={"order_id": "1234", "amount": 900})))
    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    assert rows() == before


def test_the_same_call_id_and_arguments_for_another_tool_is_409_not_the_first_tools_approval(
    submitted, submit, decide_api
):
    """A call id names one call: the same id and arguments under another tool is not the call
    a reviewer approved, and must not come back as its approval."""
    _, approval_id = submitted()
    assert decide_api(approval_id).status_code == 201
    response = submit(submit_body(call(tool="cancel_subscription")))
    assert response.status_code == 409, response.json()
    assert response.json()["code"] == "conflict"


def test_a_hash_the_desk_does_not_compute_is_422_arguments_sha256(submit):
    wrong = call(arguments_sha256=args_sha256({"order_id": "1234", "amount": 251}))
    response = submit(submit_body(wrong))
    assert response.status_code == 422
    assert response.json()["code"] == "arguments_sha256"
    assert rows() == (0, 0, 0)


def test_a_hash_of_the_same_arguments_in_another_key_order_is_the_same_call(submit):
    """RFC 8785 sorts keys: the framework's dict order does not matter."""
    reordered = {"amount": 250, "order_id": "1234"}
    response = submit(submit_body(call(arguments=reordered, arguments_sha256=args_sha256(REFUND))))
    assert response.status_code == 201, response.json()


def test_a_new_framework_checkpoint_is_a_new_desk_checkpoint_and_an_old_one_is_reused(submit):
    first = submit().json()
    second = submit(submit_body(call("call_2"), checkpoint="state-2")).json()
    third = submit(submit_body(call("call_3"), checkpoint="state-1")).json()
    assert second["checkpoint_id"] != first["checkpoint_id"]
    assert third["checkpoint_id"] == first["checkpoint_id"]
    run = Run.objects.get(pk=first["run"]["id"])
    assert sorted(run.checkpoints.values_list("number", flat=True)) == [1, 2]
    assert second["run"]["id"] == third["run"]["id"] == first["run"]["id"]


def test_another_external_id_is_another_run_and_so_is_another_accounts(submit, personas, api_as):
    from django.contrib.auth.models import Group

    first = submit().json()
    other_id = submit(submit_body(external_id="oa:thread-43")).json()
    dave = personas.carol.__class__.objects.create_user("dave")
    dave.groups.add(Group.objects.get(name="submitters"))
    other_account = submit(client=api_as(dave, "submit")).json()
    assert len({first["run"]["id"], other_id["run"]["id"], other_account["run"]["id"]}) == 3
    assert other_account["audience"] == "dave"


def test_edit_without_a_schema_is_dropped_from_the_calls_verdicts(submit):
    response = submit(submit_body(call(schema=None)))
    assert response.status_code == 201
    assert response.json()["approvals"][0]["verdicts"] == ["approve", "reject"]


@pytest.mark.parametrize(
    "verdicts",
    [["approve"], ["reject", "edit"], ["approve", "reject", "answer"], ["approve", "reject", "rerun"]],
)
def test_verdicts_must_hold_approve_and_reject_and_nothing_else(submit, verdicts):
    response = submit(submit_body(call(verdicts=verdicts)))
    assert response.status_code == 422
    assert "calls[0].verdicts" in response.json()["errors"]


def test_a_schema_that_is_no_json_schema_is_422(submit):
    response = submit(submit_body(call(schema={"type": "no-such-type"})))
    assert response.status_code == 422
    assert "calls[0].schema" in response.json()["errors"]


def test_caps_on_arguments_calls_and_context_are_422(submit):
    big = {"blob": "x" * (64 * 1024)}
    assert submit(submit_body(call(arguments=big))).status_code == 422
    many = [call(f"call_{i}") for i in range(51)]
    assert submit(submit_body(*many)).status_code == 422
    context = {"messages": [{"role": "user", "content": "y" * (256 * 1024)}], "truncated": True}
    response = submit(submit_body(context=context))
    assert response.status_code == 422 and "context" in response.json()["errors"]
    assert rows() == (0, 0, 0)


def test_fifty_calls_and_an_id_of_200_characters_are_within_the_caps(submit):
    response = submit(submit_body(*[call(f"call_{i}") for i in range(50)], external_id="x" * 200))
    assert response.status_code == 201, response.json()
    assert len(response.json()["approvals"]) == 50


def test_one_call_id_twice_in_a_submit_and_unknown_fields_are_422(submit):
    assert submit(submit_body(call(), call())).status_code == 422
    assert submit(submit_body(call(extra=1))).status_code == 422
    assert submit({**submit_body(), "surprise": True}).status_code == 422


def test_reviewers_are_checked_and_the_submitter_is_never_one(submit):
    response = submit(submit_body(reviewers=["carol"]))
    assert response.status_code == 422
    assert submit(submit_body(reviewers=["olivia"])).status_code == 422
    assert submit(submit_body(reviewers=["group:nobody"])).status_code == 422
    ok = submit(submit_body(call(reviewers=["bob"]), reviewers=["alice"]))
    assert ok.status_code == 201
    assert ApprovalRequest.objects.get(pk=ok.json()["approvals"][0]["id"]).assignees == ["bob"]


def test_a_token_without_submit_scope_or_an_account_that_is_no_submitter_is_403(submit, personas, api_as):
    assert submit(client=api_as(personas.carol, "review")).json()["code"] == "missing_scope"
    response = submit(client=api_as(personas.alice, "submit"))
    assert response.status_code == 403
    assert rows() == (0, 0, 0)


def test_the_idempotency_key_replays_the_first_answer(submit):
    first = submit(HTTP_IDEMPOTENCY_KEY="k1")
    again = submit(HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()


def test_new_calls_on_an_ended_run_are_409_but_the_old_ones_are_still_met(submit, personas, api_as):
    data = submit().json()
    api_as(personas.carol, "submit").post(
        f"/api/v1/runs/{data['run']['id']}/report",
        {"events": [{"type": "run.finished", "status": "succeeded", "output": "done"}]},
        format="json",
    )
    assert submit().status_code == 200
    response = submit(submit_body(call("call_9")))
    assert response.status_code == 409 and response.json()["code"] == "ended"


def test_a_run_sent_with_a_title_and_no_input_shows_the_title_as_its_task(submit, api_as, personas):
    """A Claude session or the MCP gateway sends a title and no task text: the desk's card and
    the API show the title where a desk run shows its task, not an empty quote."""
    body = submit_body()
    body["run"]["input"] = ""
    data = submit(body).json()
    approval = api_as(personas.alice, "review").get(f"/api/v1/approvals/{data['approvals'][0]['id']}").json()
    assert approval["task"] == "Refund order 1234"


def test_each_approval_names_the_checkpoint_it_was_raised_at(submit):
    """A call met again by a later submit keeps the checkpoints of its first: its decision signs
    them, so the client's ticket must name them, not the later submit's."""
    first = submit().json()
    later = submit(submit_body(call(), call("call_2"), checkpoint="state-2")).json()
    met, new = later["approvals"]
    assert (met["checkpoint_id"], met["external_checkpoint"]) == (first["checkpoint_id"], "state-1")
    assert (new["checkpoint_id"], new["external_checkpoint"]) == (later["checkpoint_id"], "state-2")
    assert later["checkpoint_id"] != first["checkpoint_id"]
