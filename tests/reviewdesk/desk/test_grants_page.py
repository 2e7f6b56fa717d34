"""The approval page's "always allow" fields, the /grants/ page and its Revoke button, and the
run timeline's line for a call a grant allowed (session login, CSRF as a browser sends it)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from reviewdesk.approvals.models import ApprovalStatus, Grant
from tests.reviewdesk.approvals.test_grants import run_until_it_stops

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def approve_from_the_page(personas, user=None, **fields):
    approval = run_until_it_stops(personas).approvals.get(status=ApprovalStatus.PENDING)
    body = {
        "checkpoint_id": str(approval.checkpoint_id),
        "verdict": "approve",
        "grant": "on",
        "grant_scope": "agent",
        "grant_hours": "24",
        "grant_max_uses": "3",
        **fields,
    }
    response = logged_in(user or personas.alice).post(f"/approvals/{approval.id}/", body, follow=True)
    return approval, response


def test_the_approval_page_offers_a_grant_for_a_grantable_tool_only(personas):
    approval = run_until_it_stops(personas).approvals.get(status=ApprovalStatus.PENDING)
    page = logged_in(personas.alice).get(f"/approvals/{approval.id}/").content.decode()
    assert 'id="grant-on"' in page and 'value="global"' not in page  # alice is no admin
    script = [{"tool_calls": [{"name": "execute", "arguments": {"command": "true"}}]}, {"content": "ok"}]
    execute = run_until_it_stops(personas, script).approvals.get(status=ApprovalStatus.PENDING)
    assert 'id="grant-on"' not in logged_in(personas.alice).get(f"/approvals/{execute.id}/").content.decode()


def test_approving_from_the_page_with_a_pattern_signs_the_grant(personas):
    constraints = {"to": {"endswith": "@example.com"}}
    approval, response = approve_from_the_page(
        personas, grant_match="constraints", grant_constraints=json.dumps(constraints)
    )
    assert response.status_code == 200
    grant = Grant.objects.get()
    assert grant.approval == approval and grant.constraints == constraints and grant.max_uses == 3
    assert grant.granted_by == personas.alice and grant.payload["constraints"] == constraints


def test_a_bad_grant_from_the_page_explains_itself_and_decides_nothing(personas):
    approval, response = approve_from_the_page(
        personas, grant_match="constraints", grant_constraints='{"to": {"regex": ".*"}}'
    )
    assert "Not decided" in response.content.decode() and "unknown operator" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING and not Grant.objects.exists()


def test_grant_constraints_holding_a_nul_are_refused_not_a_500(personas):
    """\\u0000 in the constraints' JSON decoded to a NUL that PostgreSQL's jsonb refused: a 500,
    where the API's parser refuses such a body with 400."""
    approval, response = approve_from_the_page(
        personas, grant_match="constraints", grant_constraints='{"to": {"eq": "ada\\u0000"}}'
    )
    assert response.status_code == 200
    assert "Not decided" in response.content.decode() and "NUL" in response.content.decode()
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING and not Grant.objects.exists()


def test_the_grants_page_lists_uses_and_offers_revoke_to_the_owner_and_admins_only(personas):
    approve_from_the_page(personas)
    run_until_it_stops(personas)  # used once, no one asked
    grant = Grant.objects.get()
    page = logged_in(personas.alice).get("/grants/").content.decode()
    button = f'action="/grants/{grant.id}/revoke/"'
    assert f'id="grant-{grant.id}"' in page and "1 of 3" in page and button in page
    assert button not in logged_in(personas.bob).get("/grants/").content.decode()
    assert button in logged_in(personas.admin).get("/grants/").content.decode()
    assert 'href="/grants/"' in page  # the nav links to it


def test_an_outsider_may_not_see_the_grants_page(personas):
    assert logged_in(personas.olivia).get("/grants/").status_code == 403


def test_revoke_from_the_page_by_the_owner_ends_the_grant_and_another_reviewer_cannot(personas):
    approve_from_the_page(personas)
    grant = Grant.objects.get()
    refused = logged_in(personas.bob).post(f"/grants/{grant.id}/revoke/", follow=True)
    assert "Not revoked" in refused.content.decode()
    grant.refresh_from_db()
    assert grant.revoked_at is None
    done = logged_in(personas.alice).post(f"/grants/{grant.id}/revoke/", follow=True)
    assert "allows nothing more" in done.content.decode()
    grant.refresh_from_db()
    assert grant.revoked_by == personas.alice
    assert run_until_it_stops(personas).status == "input_required"


def test_the_run_timeline_says_which_grant_allowed_a_call(personas):
    approve_from_the_page(personas)
    run = run_until_it_stops(personas)
    grant = Grant.objects.get()
    page = logged_in(personas.alice).get(f"/runs/{run.id}/").content.decode()
    assert "Allowed by a standing grant: send_email" in page
    assert f"grant {grant.id} by alice, use 1 of 3" in page


def test_a_reviewers_grants_page_makes_as_many_queries_for_three_grants_as_for_one(personas):
    """Each row's Revoke check read the reviewer's groups again: 50 grants, 50 more queries."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def page_queries() -> int:
        client = logged_in(personas.alice)
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/grants/")
        assert response.status_code == 200
        return len(queries)

    approve_from_the_page(personas, personas.bob, grant_scope="run")
    one = page_queries()
    for _ in range(2):
        approve_from_the_page(personas, personas.bob, grant_scope="run")
    assert Grant.objects.count() == 3
    assert page_queries() == one
