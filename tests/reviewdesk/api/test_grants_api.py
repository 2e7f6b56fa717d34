"""The `grant` object on POST /api/v1/approvals/{id}/decision, GET /api/v1/grants and
POST /api/v1/grants/{id}/revoke: who may grant and revoke, and what bad input leaves behind."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.registry import get_agent
from agents.routing import Quorum
from reviewdesk.approvals.models import ApprovalStatus, Decision, Grant
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.services import run_submit
from tests.reviewdesk.approvals.test_grants import email_script, run_until_it_stops

pytestmark = pytest.mark.django_db


def decide(client, approval, **body):
    body.setdefault("checkpoint_id", str(approval.checkpoint_id))
    body.setdefault("verdict", "approve")
    return client.post(f"/api/v1/approvals/{approval.id}/decision", body, format="json")


def pending(personas, script=None):
    return run_until_it_stops(personas, script).approvals.get(status=ApprovalStatus.PENDING)


def assert_nothing_decided(approval):
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert not Decision.objects.filter(request=approval).exists()
    assert not Grant.objects.exists()


def test_an_approve_with_a_grant_answers_the_signed_grant(personas, api_as):
    approval = pending(personas)
    grant = {"match": {"to": {"endswith": "@example.com"}}, "scope": "agent", "max_uses": 5}
    response = decide(api_as(personas.alice, "review"), approval, grant=grant)
    assert response.status_code == 201, response.json()
    body = response.json()["grant"]
    assert body["scope"] == "agent" and body["max_uses"] == 5 and body["uses"] == 0
    assert body["match"] == {"to": {"endswith": "@example.com"}} and body["status"] == "live"
    assert body["granted_by"] == "alice" and body["key_id"].startswith("ed25519:")
    assert body["payload"]["constraints"] == grant["match"]


def test_defaults_give_an_exact_grant_for_a_day_and_ten_uses(personas, api_as, settings):
    approval = pending(personas)
    response = decide(api_as(personas.alice, "review"), approval, grant={"scope": "run"})
    assert response.status_code == 201, response.json()
    grant = Grant.objects.get()
    assert grant.max_uses == settings.DESK_GRANT_DEFAULT_USES and grant.constraints is None
    expected = timezone.now() + timedelta(seconds=settings.DESK_GRANT_DEFAULT_SECONDS)
    assert abs((grant.expires_at - expected).total_seconds()) < 60


@pytest.mark.parametrize(
    "grant, field",
    [
        ({"scope": "run", "match": {"to": {"matches": ".*"}}}, "grant.to"),
        ({"scope": "run", "match": {"cc": {"eq": "x"}}}, "grant.cc"),
        ({"scope": "run", "match": {"to": {"lte": "x"}}}, "grant.to"),
        ({"scope": "run", "match": {}}, "grant.match"),
        ({"scope": "everywhere"}, "grant.scope"),
        ({"scope": "run", "max_uses": 0}, "grant.max_uses"),
        ({"scope": "run", "max_uses": 10_001}, "grant.max_uses"),
        ({"scope": "run", "max_uses": True}, "grant.max_uses"),
        ({"scope": "run", "expires_at": "2020-01-01T00:00:00Z"}, "grant.expires_at"),
        ({"scope": "run", "expires_at": "2999-01-01T00:00:00Z"}, "grant.expires_at"),
        ({"scope": "run", "expires_at": "tomorrow"}, "grant.expires_at"),
        ({"scope": "run", "forever": True}, "grant"),
        ("always", "grant"),
    ],
)
def test_a_bad_grant_is_422_and_decides_nothing(personas, api_as, grant, field):
    approval = pending(personas)
    response = decide(api_as(personas.alice, "review"), approval, grant=grant)
    assert response.status_code == 422, response.json()
    assert field in response.json()["errors"], response.json()
    assert_nothing_decided(approval)


@pytest.mark.parametrize(
    ("bound", "status", "where"),
    [
        ("1152921504606846976", 422, "grant"),  # JSON, but past what RFC 8785 holds exactly
        ("1e999", 400, "malformed_json"),  # past a float: the parser refuses the body itself
    ],
)
def test_a_number_bound_beyond_canonical_json_is_refused_not_500(personas, api_as, bound, status, where):
    script = [
        {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1", "amount": 150}}]},
        {"content": "Done."},
    ]
    approval = pending(personas, script)
    raw = (
        f'{{"verdict": "approve", "checkpoint_id": "{approval.checkpoint_id}", '
        f'"grant": {{"scope": "agent", "match": {{"amount": {{"lte": {bound}}}}}}}}}'
    )
    client = api_as(personas.alice, "review")
    response = client.post(f"/api/v1/approvals/{approval.id}/decision", raw, content_type="application/json")
    assert response.status_code == status, response.content
    problem = response.json()
    assert problem["code"] == where or any(field.startswith(where) for field in problem.get("errors", {}))
    assert_nothing_decided(approval)


def test_a_grant_rides_only_on_an_approve(personas, api_as):
    approval = pending(personas)
    response = decide(api_as(personas.alice, "review"), approval, verdict="reject", grant={"scope": "run"})
    assert response.status_code == 422
    assert_nothing_decided(approval)


def test_a_never_grantable_tool_is_422_not_grantable(personas, api_as):
    script = [{"tool_calls": [{"name": "execute", "arguments": {"command": "true"}}]}, {"content": "ok"}]
    approval = pending(personas, script)
    response = decide(api_as(personas.alice, "review"), approval, grant={"scope": "run"})
    assert response.status_code == 422 and response.json()["code"] == "not_grantable"
    assert_nothing_decided(approval)


def test_a_quorum_vote_cannot_carry_a_grant(personas, api_as, monkeypatch):
    agent = get_agent("demo")
    tools = tuple(
        replace(t, quorum=Quorum(approvals=2)) if t.name == "send_email" else t for t in agent.tools
    )
    monkeypatch.setitem(agent.__dict__, "tools", tools)  # a quorum tool that forgot grantable=False
    approval = pending(personas)
    assert approval.required_approvals == 2
    response = decide(api_as(personas.alice, "review"), approval, grant={"scope": "agent"})
    assert response.status_code == 422 and response.json()["code"] == "not_grantable"
    assert_nothing_decided(approval)


def test_a_global_grant_by_a_reviewer_who_is_not_an_admin_is_403(personas, api_as):
    approval = pending(personas)
    response = decide(api_as(personas.alice, "review"), approval, grant={"scope": "global"})
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert_nothing_decided(approval)


def test_an_admin_may_grant_everywhere(personas, api_as):
    approval = pending(personas)
    response = decide(api_as(personas.admin, "review"), approval, grant={"scope": "global"})
    assert response.status_code == 201, response.json()
    assert response.json()["grant"]["scope"] == "global"
    assert run_until_it_stops(personas).status == "succeeded"


def test_a_reviewer_who_may_not_decide_the_approval_cannot_grant_either(personas, api_as):
    approval = pending(personas)
    response = decide(api_as(personas.carol, "submit", "review"), approval, grant={"scope": "agent"})
    assert response.status_code in (403, 404)
    assert_nothing_decided(approval)


def make_grant(personas, api_as, reviewer=None, script=None, **grant):
    approval = pending(personas, script)
    grant.setdefault("scope", "agent")
    response = decide(api_as(reviewer or personas.alice, "review"), approval, grant=grant)
    assert response.status_code == 201, response.json()
    return response.json()["grant"]


def test_the_grants_list_pages_with_a_cursor_and_filters_by_status(personas, api_as):
    first = make_grant(personas, api_as)
    second = make_grant(
        personas, api_as, script=email_script(to="x@example.org"), match={"to": {"endswith": ".org"}}
    )
    client = api_as(personas.bob, "review")
    page = client.get("/api/v1/grants?limit=1").json()
    assert [g["id"] for g in page["results"]] == [second["id"]] and page["next"]
    rest = client.get(page["next"]).json()
    assert [g["id"] for g in rest["results"]] == [first["id"]] and rest["next"] is None
    client.post(f"/api/v1/grants/{first['id']}/revoke")  # bob does not own it: refused
    api_as(personas.alice, "review").post(f"/api/v1/grants/{first['id']}/revoke")
    revoked = client.get("/api/v1/grants?status=revoked").json()["results"]
    assert [g["id"] for g in revoked] == [first["id"]]
    assert client.get("/api/v1/grants?status=nonsense").status_code == 400


def test_an_outsider_sees_no_grants(personas, api_as):
    make_grant(personas, api_as)
    assert api_as(personas.olivia, "submit").get("/api/v1/grants").json()["results"] == []
    # not even the submitter of the run it was made on: grants are for reviewers and admins
    assert api_as(personas.carol, "submit").get("/api/v1/grants").json()["results"] == []


def test_a_grant_is_as_private_as_the_run_it_was_made_on(personas, api_as):
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="x",
        reviewers=["alice"],
        model={"provider": "scripted", "script": email_script(body="CONFIDENTIAL-PLAN")},
    )
    run_execute(run_id=run.id, worker="in-process")
    approval = run.approvals.get(status=ApprovalStatus.PENDING)
    made = decide(api_as(personas.alice, "review"), approval, grant={"scope": "agent", "match": "exact"})
    assert made.status_code == 201, made.json()
    bob = api_as(personas.bob, "review")
    assert bob.get(f"/api/v1/runs/{run.id}").status_code == 404
    assert bob.get("/api/v1/grants").json()["results"] == []
    assert bob.post(f"/api/v1/grants/{made.json()['grant']['id']}/revoke").status_code == 404
    for reader in (personas.alice, personas.admin):
        [grant] = api_as(reader, "review").get("/api/v1/grants").json()["results"]
        assert grant["arguments"]["body"] == "CONFIDENTIAL-PLAN"


def test_revoke_is_for_the_owner_or_an_admin_and_happens_once(personas, api_as):
    grant = make_grant(personas, api_as)
    url = f"/api/v1/grants/{grant['id']}/revoke"
    assert api_as(personas.bob, "review").post(url).status_code == 403
    assert api_as(personas.alice, "submit").post(url).json()["code"] == "missing_scope"
    response = api_as(personas.alice, "review").post(url)
    assert response.status_code == 200 and response.json()["status"] == "revoked"
    again = api_as(personas.admin, "review").post(url)
    assert again.status_code == 409 and again.json()["code"] == "revoked"
    assert api_as(personas.olivia, "review").post(url).status_code in (403, 404)


def test_an_admin_revokes_anyones_grant(personas, api_as):
    grant = make_grant(personas, api_as)
    response = api_as(personas.admin, "review").post(f"/api/v1/grants/{grant['id']}/revoke")
    assert response.status_code == 200 and response.json()["revoked_by"] == "admin"
    assert run_until_it_stops(personas, email_script()).status == "input_required"
