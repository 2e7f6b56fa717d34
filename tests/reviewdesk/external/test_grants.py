"""Standing grants on external runs: a covered call comes back from its submit approved, with a
decision signed in the grantor's name; grants never cross between the desk's own agents and a
framework's."""

from __future__ import annotations

import pytest

from reviewdesk.approvals.models import ApprovalRequest, Grant, GrantUse
from tests.reviewdesk.external.conftest import call, submit_body
from tests.reviewdesk.external.test_decide import verified_payload

pytestmark = pytest.mark.django_db


def test_a_call_an_agent_grant_covers_comes_back_approved_and_signed(submitted, submit, decide_api):
    _, approval_id = submitted()
    granted = decide_api(approval_id, grant={"match": "exact", "scope": "agent", "max_uses": 2})
    assert granted.status_code == 201, granted.json()
    grant = Grant.objects.get()
    assert grant.agent == "openai-agents:support-bot"
    # Another thread of the same agent makes the same call: nobody is asked.
    response = submit(submit_body(call("call_7"), external_id="oa:thread-99"))
    assert response.status_code == 201, response.json()
    body = response.json()
    [approval] = body["approvals"]
    assert approval["status"] == "approved"
    decision = approval["decision"]
    assert decision["reviewer"] == "alice" and str(grant.pk) in decision["reason"]
    payload = verified_payload(decision)
    assert payload["external_id"] == "oa:thread-99" and payload["tool_call_id"] == "call_7"
    assert payload["audience"] == "carol"
    assert body["run"]["status"] == "running"
    assert GrantUse.objects.filter(grant=grant).count() == 1


def test_a_grant_for_other_arguments_another_tool_or_used_up_asks_a_human(submitted, submit, decide_api):
    _, approval_id = submitted()
    decide_api(approval_id, grant={"match": "exact", "scope": "agent", "max_uses": 1})
    other_arguments = submit(submit_body(call("call_2", arguments={"order_id": "9", "amount": 1}))).json()
    assert other_arguments["approvals"][0]["status"] == "pending"
    first = submit(submit_body(call("call_3"))).json()
    assert first["approvals"][0]["status"] == "approved"
    used_up = submit(submit_body(call("call_4"))).json()
    assert used_up["approvals"][0]["status"] == "pending"


def test_a_grant_with_constraints_over_the_schema_allows_what_they_admit(submitted, submit, decide_api):
    _, approval_id = submitted()
    response = decide_api(approval_id, grant={"match": {"amount": {"lte": 300}}, "scope": "run"})
    assert response.status_code == 201, response.json()
    small = submit(submit_body(call("call_2", arguments={"order_id": "5", "amount": 20}))).json()
    assert small["approvals"][0]["status"] == "approved"
    large = submit(submit_body(call("call_3", arguments={"order_id": "5", "amount": 400}))).json()
    assert large["approvals"][0]["status"] == "pending"


def test_no_grant_everywhere_on_an_external_call(submitted, api_as, personas, decide_api):
    _, approval_id = submitted()
    response = decide_api(approval_id, client=api_as(personas.admin, "review"), grant={"scope": "global"})
    assert response.status_code == 422
    assert ApprovalRequest.objects.get(pk=approval_id).status == "pending"


def test_a_desk_agents_grant_never_allows_a_frameworks_call_nor_the_reverse(
    interrupted_run, personas, submit, submitted, decide_api
):
    from reviewdesk.approvals.deciding.record import approval_decide
    from tests.conftest import SEND_EMAIL_SCRIPT

    email = {"to": "ada@example.com", "subject": "Your refund", "body": "It is on its way."}
    # A grant made on the desk's own demo agent, for every agent (an admin's).
    _, desk_approval = interrupted_run()
    approval_decide(
        approval_id=desk_approval.id,
        reviewer=personas.admin,
        verdict="approve",
        checkpoint_id=str(desk_approval.checkpoint_id),
        grant={"match": "exact", "scope": "global"},
    )
    framework_call = call("call_1", arguments=email, tool="send_email", schema=None)
    data = submit(
        submit_body(framework_call, external_id="x:1", run={**submit_body()["run"], "agent": "demo"})
    )
    assert data.json()["approvals"][0]["status"] == "pending"
    # A grant made on a framework's "demo" agent does not allow the desk's demo agent's call.
    decide_api(data.json()["approvals"][0]["id"], grant={"match": "exact", "scope": "agent"})
    Grant.objects.filter(approval__run__kind="internal").update(revoked_at="2026-01-01T00:00:00Z")
    _, approval = interrupted_run(script=SEND_EMAIL_SCRIPT)
    assert approval.status == "pending"  # asked a human: the framework's grant is not the desk's
    assert Grant.objects.get(revoked_at__isnull=True).agent == "openai-agents:demo"


def test_an_agent_grant_never_allows_another_accounts_agent_of_the_same_name(
    submitted, submit, decide_api, api_as
):
    """A framework's agent name is whatever its account sends: another account's "support-bot"
    is another agent, and a grant alice made on carol's never answers its calls."""
    from reviewdesk.accounts.roles import SUBMITTERS
    from tests.conftest import make_user

    _, approval_id = submitted()
    granted = decide_api(approval_id, grant={"match": "exact", "scope": "agent", "max_uses": 5})
    assert granted.status_code == 201, granted.json()
    mallory = api_as(make_user("mallory", SUBMITTERS), "submit")
    response = submit(submit_body(call("call_7"), external_id="oa:thread-99"), client=mallory)
    assert response.status_code == 201, response.json()
    assert response.json()["approvals"][0]["status"] == "pending"
    assert GrantUse.objects.count() == 0


def test_a_constrained_grant_never_allows_arguments_outside_the_schema_it_was_made_under(
    submitted, submit, decide_api
):
    """The reviewer constrained the amount of a call whose schema admits order_id and amount only;
    a later call of the same run that adds an argument (and sends no schema) is another call."""
    _, approval_id = submitted()
    response = decide_api(approval_id, grant={"match": {"amount": {"lte": 300}}, "scope": "run"})
    assert response.status_code == 201, response.json()
    widened = {"order_id": "5", "amount": 20, "refund_to": "IBAN-of-someone-else"}
    data = submit(submit_body(call("call_2", arguments=widened, schema=None, verdicts=["approve", "reject"])))
    assert data.status_code == 201, data.json()
    assert data.json()["approvals"][0]["status"] == "pending"
