"""The desk's view of a call, from the server: its place in the queue (`queue_sort_key`) and
whether it passes a page's filters (`queue_matches`) agree with the page the queue's SQL draws,
so desk.js restates neither; and the preview's summary (`desk.cards.call_summary`) says what
is unusual about approving a call, the facts a reviewer decides by, and one risk line."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from reviewdesk.approvals.reads.queue import QueueFilters, approvals_queue_for, queue_matches, queue_sort_key
from reviewdesk.approvals.reads.representation import approval_data, approvals_data
from reviewdesk.desk.cards import call_summary, desk_view
from tests.reviewdesk.approvals.conftest import EXECUTE_SCRIPT, asking, refund_script
from tests.reviewdesk.desk.test_snapshot_window import clone_pending

pytestmark = pytest.mark.django_db


def email(to: str, body: str = "It is on its way.") -> list[dict]:
    arguments = {"to": to, "subject": "Your refund", "body": body}
    return [{"tool_calls": [{"name": "send_email", "arguments": arguments}]}, {"content": "Sent."}]


def test_the_sort_key_orders_a_queue_as_the_server_does_across_tiers(interrupted_run, personas):
    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice)
    _, approval = interrupted_run()
    clone_pending(approval, 4)
    clone_pending(approval, 4, assignees=["group:billing"])
    clone_pending(approval, 4, assignees=["alice"])
    page = approvals_queue_for(personas.alice, QueueFilters())
    payloads = approvals_data(page.approvals)
    keys = [queue_sort_key(p, "alice") for p in payloads]
    assert len(keys) == 13
    assert keys == sorted(keys), "the page's order is the keys' order"
    assert [k[0] for k in keys] == ["0"] * 4 + ["1"] * 4 + ["2"] * 5


def test_matches_keeps_exactly_the_calls_each_filter_keeps(interrupted_run, personas):
    Group.objects.get_or_create(name="billing")[0].user_set.add(personas.alice)
    run, approval = interrupted_run()
    interrupted_run(script=asking(question="Which order?", options=["A-1001", "A-1002"]))
    clone_pending(approval, 2, assignees=["group:billing"])
    clone_pending(approval, 2, assignees=["alice"])
    clone_pending(approval, 2, tool="refund_payment")
    everything = approvals_data(approvals_queue_for(personas.alice, QueueFilters()).approvals)
    values = {
        "agent": ["", "demo", "other"],
        "tool": ["", "send_email", "refund_payment"],
        "run": ["", str(run.id)],
        "assignee": ["", "me", "any", "group:billing"],
        "kind": ["", "question", "tool_call"],
    }
    checked = 0
    for combination in itertools.product(*values.values()):
        filters = QueueFilters(**dict(zip(values, combination, strict=True)))
        page = {str(a.id) for a in approvals_queue_for(personas.alice, filters).approvals}
        assert {p["id"] for p in everything if queue_matches(p, filters, "alice")} == page, filters
        checked += bool(page)
    assert checked > 20


def test_an_ordinary_email_is_summed_up_by_recipient_subject_and_body_and_asks_nothing(
    interrupted_run, personas
):
    _, approval = interrupted_run(
        script=email("ada@example.com", "Line one\nLine two\nLine three\nLine four")
    )
    summary = call_summary(approval_data(approval))
    assert summary["facts"] == [["To", "ada@example.com"], ["Subject", "Your refund"]]
    assert summary["body"] == "Line one\nLine two\nLine three\n…"
    assert summary["warnings"] == [] and summary["unusual"] == []
    assert summary["risk"] == ""  # its badge says irreversible; a risk line marks the unusual


def test_a_lookalike_recipient_with_a_hidden_character_is_unusual_twice(interrupted_run, personas):
    _, approval = interrupted_run(script=email("ada@examp1e.com", "Your refund\u202e is on its way."))
    summary = call_summary(approval_data(approval))
    assert summary["warnings"] == ["ada@examp1e.com is not a known customer's address"]
    assert summary["invisible"] is True
    assert summary["unusual"] == [
        "ada@examp1e.com is not a known customer's address",
        "the arguments contain invisible characters (shown escaped)",
    ]
    assert summary["risk"] == (
        "⚠ ada@examp1e.com is not a known customer's address · ⚠ invisible characters · irreversible"
    )


def test_a_refund_larger_than_what_is_left_carries_a_risk_mark(interrupted_run, personas):
    _, approval = interrupted_run(script=refund_script(900))
    summary = call_summary(approval_data(approval))
    assert ["This refund", "900.00"] in summary["facts"]
    assert any(label == "Left after it" for label, _ in summary["facts"])
    assert summary["risk"].startswith("⚠ this refund exceeds what is left to refund")
    assert summary["unusual"] == summary["warnings"] != []


def test_a_question_has_no_summary_and_the_page_renders_its_summary_for_a_call(interrupted_run, personas):
    _, question = interrupted_run(script=asking(question="Which order?", options=["A-1001", "A-1002"]))
    assert desk_view(approval_data(question), username="alice")["summary"] is None
    interrupted_run(script=email("ada@examp1e.com"))
    client = Client()
    client.force_login(personas.alice)
    page = client.get("/").content.decode()
    assert "To: ada@examp1e.com" in page
    assert "⚠ ada@examp1e.com is not a known customer&#x27;s address" in page


def test_the_card_endpoint_gives_the_desks_view_to_a_reviewer_only(interrupted_run, personas):
    _, call = interrupted_run(script=refund_script(900))
    alice, carol = Client(), Client()
    alice.force_login(personas.alice)
    carol.force_login(personas.carol)  # the submitter, no reviewer
    answer = alice.get(f"/approvals/{call.id}/card")
    assert answer.status_code == 200
    assert answer.json()["desk"]["summary"]["warnings"][0].startswith("this refund exceeds")
    assert carol.get(f"/approvals/{call.id}/card").status_code in (403, 404)


def test_the_last_vote_of_a_quorum_is_unusual_and_the_first_is_not(interrupted_run, personas):
    _, call = interrupted_run(script=EXECUTE_SCRIPT)
    data = approval_data(call)
    assert data["quorum"]["required"] == 2
    assert call_summary(data)["unusual"] == []
    last = {**data, "quorum": {**data["quorum"], "approved_by": ["bob"]}}
    assert call_summary(last)["unusual"] == ["yours is the last of 2 approvals: approving runs it"]
