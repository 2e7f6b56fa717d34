"""The approval page: what a reviewer sees, and deciding from it (session + CSRF)."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.test import Client

from reviewdesk.approvals.models import Decision

pytestmark = pytest.mark.django_db


def logged_in(user, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def test_it_shows_exactly_what_will_be_signed(interrupted_run, personas):
    _, approval = interrupted_run()
    page = logged_in(personas.alice).get(f"/approvals/{approval.id}/").content.decode()
    assert approval.arguments_sha256 in page
    assert (
        "{&quot;body&quot;:&quot;It is on its way.&quot;,&quot;subject&quot;:&quot;Your refund&quot;" in page
    )
    assert 'value="edit"' in page and 'value="approve"' in page


def test_an_outsider_cannot_see_it_and_the_submitter_cannot_decide(interrupted_run, personas):
    _, approval = interrupted_run()
    assert logged_in(personas.olivia).get(f"/approvals/{approval.id}/").status_code == 403
    assert logged_in(personas.carol).get(f"/approvals/{approval.id}/").status_code == 403


def test_a_post_without_the_csrf_token_is_refused(interrupted_run, personas):
    _, approval = interrupted_run()
    response = logged_in(personas.alice, csrf=True).post(
        f"/approvals/{approval.id}/", {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id)}
    )
    assert response.status_code == 403
    assert not Decision.objects.exists()


def test_editing_from_the_page_signs_the_edited_arguments_with_the_note(interrupted_run, personas):
    _, approval = interrupted_run()
    edited = {**approval.arguments, "subject": "Refund issued"}
    response = logged_in(personas.alice).post(
        f"/approvals/{approval.id}/",
        {
            "verdict": "edit",
            "arguments": json.dumps(edited),
            "note": "keep it short",
            "checkpoint_id": str(approval.checkpoint_id),
        },
    )
    assert response.status_code == 302
    decision = Decision.objects.get()
    assert (decision.verdict, decision.arguments, decision.note) == ("edit", edited, "keep it short")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [("{not json", "not valid JSON"), (json.dumps({"to": "x"}), "schema")],
    ids=["malformed", "schema"],
)
def test_a_bad_edit_from_the_page_explains_itself_and_decides_nothing(
    interrupted_run, personas, arguments, message
):
    _, approval = interrupted_run()
    client = logged_in(personas.alice)
    response = client.post(
        f"/approvals/{approval.id}/",
        {"verdict": "edit", "arguments": arguments, "checkpoint_id": str(approval.checkpoint_id)},
        follow=True,
    )
    assert message in response.content.decode()
    assert not Decision.objects.exists()


def test_a_stale_page_cannot_approve(interrupted_run, personas):
    run, approval = interrupted_run()
    older = run.checkpoints.order_by("number").first()
    response = logged_in(personas.alice).post(
        f"/approvals/{approval.id}/", {"verdict": "approve", "checkpoint_id": str(older.id)}, follow=True
    )
    assert "stale page" in response.content.decode()
    assert not Decision.objects.exists()


@pytest.mark.parametrize("verdict", ["approve", "reject"])
def test_a_call_whose_agent_is_no_longer_deployed_is_refused_as_stale_not_a_500(
    interrupted_run, personas, verdict
):
    """The desk was redeployed without the run's agent: its pending calls stay on the desk, and
    deciding one raised UnknownAgent from the decide service (a 500, after the checks passed),
    where a tool the agent no longer has is refused as a stale page."""
    run, approval = interrupted_run()
    run.agent = "retired"
    run.save(update_fields=["agent"])
    alice = logged_in(personas.alice)
    form = {"verdict": verdict, "checkpoint_id": str(approval.checkpoint_id)}
    page = alice.post(f"/approvals/{approval.id}/", form, follow=True).content.decode()
    assert (
        "Not decided: the agent &#x27;retired&#x27; is not loaded in this process "
        f"(DESK_AGENTS={','.join(settings.DESK_AGENTS)})" in page
    )
    answer = alice.post(f"/approvals/{approval.id}/", form, HTTP_ACCEPT="application/json")
    assert answer.status_code == 409 and answer.json()["code"] == "stale"
    assert not Decision.objects.exists()


def test_a_submitter_signing_in_lands_on_their_runs_and_anyone_else_without_a_role_is_refused(personas):
    """Logging in lands everyone on the desk; carol reviews nothing, so her page is her runs."""
    response = logged_in(personas.carol).get("/")
    assert response.status_code == 302 and response["Location"] == "/runs/"
    assert logged_in(personas.carol).get("/runs/").status_code == 200
    assert logged_in(personas.olivia).get("/").status_code == 403
    assert logged_in(personas.alice).get("/").status_code == 200


def test_a_page_not_yours_or_not_there_says_why_and_leads_back(personas):
    """Django's bare "Not Found" / "403 Forbidden" left a reviewer on a page with no way out."""
    import uuid

    missing = logged_in(personas.alice).get(f"/approvals/{uuid.uuid4()}/")
    page = missing.content.decode()
    assert missing.status_code == 404
    assert "No such approval: it does not exist, or it is not yours to see" in page
    assert 'href="/"' in page and 'href="/runs/"' in page
    refused = logged_in(personas.olivia).get("/")
    assert refused.status_code == 403 and "The desk is for reviewers." in refused.content.decode()


@pytest.mark.parametrize(
    ("next_url", "lands_on"),
    [
        ("/?tool=send_email", "/?tool=send_email"),
        ("https://evil.example/", "/"),
        ("//evil.example/", "/"),
        ("desk-page", "/"),  # a bare word: `redirect` read it as a view's name, a 500
        ("/\r\nSet-Cookie: a=b", "/"),  # no line break in a Location header: a 500
        ("", "/"),
    ],
    ids=["the desk's own path", "another site", "scheme-relative", "a bare word", "a line break", "none"],
)
def test_after_a_decision_the_form_goes_back_to_its_page_on_this_site_only(
    interrupted_run, personas, next_url, lands_on
):
    _, approval = interrupted_run()
    form = {
        "checkpoint_id": str(approval.checkpoint_id),
        "verdict": "reject",
        "reason": "no",
        "next": next_url,
    }
    response = logged_in(personas.alice).post(f"/approvals/{approval.id}/", form)
    assert (response.status_code, response["Location"]) == (302, lands_on)
    assert Decision.objects.filter(request=approval, verdict="reject").count() == 1
