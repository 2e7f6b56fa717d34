"""The desk shows an external call as its framework sent it: where it comes from, the framework's
texts marked untrusted, no Edit where the framework cannot edit, the all-or-nothing line; and
the run page shows the framework, its context and what it reported."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.reviewdesk.external.conftest import call, submit_body

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_browser(personas) -> Client:
    client = Client()
    client.force_login(personas.alice)
    return client


def test_the_desk_card_says_where_a_call_comes_from_and_offers_no_edit_it_cannot_make(
    submitted, alice_browser
):
    submitted(submit_body(call("call_1", verdicts=["approve", "reject"]), resume_policy="all_or_nothing"))
    page = alice_browser.get("/").content.decode()
    card = page[page.index('<li class="card" tabindex="-1" data-approval-id="') :]
    card = card[: card.index("</li>")]
    assert 'via <span class="framework">openai-agents</span>' in card
    assert "oa:thread-42" in card
    assert "Refund 250 EUR on order 1234" in card and "framework text, untrusted" in card
    assert "openai-agents</span> cannot edit this call" in card
    assert "None of these calls runs until all are decided" in card
    assert "edit-open" not in card
    assert "not loaded" not in card  # no desk agent was asked for a preview


def test_a_call_that_can_be_edited_keeps_its_edit_and_says_no_limit(submitted, alice_browser):
    submitted()
    page = alice_browser.get("/").content.decode()
    card = page[page.index('<li class="card" tabindex="-1" data-approval-id="') :]
    card = card[: card.index("</li>")]
    assert "edit-open" in card
    assert "cannot edit" not in card and "None of these calls" not in card
    assert 'data-schema="{' in card  # the desk's editor checks the framework's schema


def test_the_approval_page_marks_the_frameworks_texts_and_limits(submitted, alice_browser):
    _, approval_id = submitted(
        submit_body(call("call_1", verdicts=["approve", "reject"]), resume_policy="all_or_nothing")
    )
    page = alice_browser.get(f"/approvals/{approval_id}/").content.decode()
    assert 'id="external-framework">openai-agents<' in page
    assert 'id="external-preview">Refund 250 EUR on order 1234<' in page
    assert 'id="no-edit"' in page and 'id="all-or-nothing"' in page
    assert 'id="edit-link"' not in page and 'id="edit-form"' not in page
    assert "The customer asked for a refund." in page  # the model's reason, as "why it asks"
    assert "Please refund my order 1234." in page  # the context's message
    assert "untrusted" in page


def test_the_approval_page_offers_edit_against_the_frameworks_schema(submitted, alice_browser):
    _, approval_id = submitted()
    page = alice_browser.get(f"/approvals/{approval_id}/").content.decode()
    assert 'id="edit-link"' in page and 'id="edit-form"' in page
    assert '"maximum": 1000' in page  # the schema the page checks an edit against


def test_a_page_decision_on_an_external_call_needs_no_desk_agent(submitted, alice_browser):
    from reviewdesk.approvals.models import ApprovalRequest

    _, approval_id = submitted()
    approval = ApprovalRequest.objects.get(pk=approval_id)
    response = alice_browser.post(
        f"/approvals/{approval_id}/",
        {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id), "reason": ""},
    )
    assert response.status_code in (302, 303), response.content[:300]
    approval.refresh_from_db()
    assert approval.status == "approved"


def test_the_run_page_shows_the_framework_its_context_and_what_it_reported(
    submitted, decide_api, api_as, personas, alice_browser
):
    data, approval_id = submitted()
    decision = decide_api(approval_id).json()
    carol = api_as(personas.carol, "submit")
    carol.post(
        f"/api/v1/approvals/{approval_id}/consume",
        {"decision_id": decision["id"], "nonce": decision["payload"]["nonce"]},
        format="json",
    )
    carol.post(
        f"/api/v1/runs/{data['run']['id']}/report",
        {
            "events": [
                {
                    "type": "tool.finished",
                    "tool_call_id": "call_1",
                    "status": "confirmed",
                    "summary": "refunded",
                },
                {"type": "run.finished", "status": "succeeded", "output": "Refunded."},
            ]
        },
        format="json",
    )
    page = alice_browser.get(f"/runs/{data['run']['id']}/").content.decode()
    assert 'id="run-external"' in page and "oa:thread-42" in page
    assert 'id="external-context"' in page and "Please refund my order 1234." in page
    assert "openai-agents took the decision on refund_payment" in page
    assert "openai-agents reports call_1 confirmed" in page
    assert "Run succeeded in openai-agents" in page
    assert "state-1" in page  # the framework's checkpoint
    assert 'id="retry-run"' not in page


def test_a_schema_whose_ref_the_desk_cannot_resolve_never_breaks_the_desk(submit, alice_browser):
    """A framework's schema pointing outside itself ($ref to a URL; the desk fetches nothing) is
    refused at the submit, so no reviewer's queue or page fails on it."""
    remote = {
        "type": "object",
        "properties": {"amount": {"$ref": "http://169.254.169.254/latest/meta-data"}},
    }
    response = submit(submit_body(call("call_1", schema=remote)))
    assert alice_browser.get("/").status_code == 200
    assert response.status_code == 422, response.json()
    assert "calls[0].schema" in response.json()["errors"]


def test_a_stored_schema_with_an_outside_ref_is_never_fetched_by_the_desk(submitted, alice_browser):
    """A schema kept before submits refused such references: the desk's pages resolve nothing
    outside it (no request reaches the URL it names) and still show the call."""
    import http.server
    import threading

    from reviewdesk.approvals.models import ApprovalRequest

    hits: list[str] = []

    class Target(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            body = b'{"type": "integer"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Target)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _, approval_id = submitted()
        remote = {"$ref": f"http://127.0.0.1:{server.server_port}/internal"}
        remote = {"type": "object", "properties": {"amount": remote}}
        ApprovalRequest.objects.filter(pk=approval_id).update(arguments_schema=remote)
        assert alice_browser.get("/").status_code == 200
        assert alice_browser.get(f"/approvals/{approval_id}/").status_code == 200
    finally:
        server.shutdown()
    assert hits == []
