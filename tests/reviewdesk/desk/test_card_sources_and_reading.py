"""Issue 38 on the desk, in-process: a provenance flag is a warning (so approving it asks first
and "select all similar" leaves it out), each argument is drawn with its source's words, a
ready high reading asks for a confirmation that states its concerns, and a pending or failed
reading is never taken for a low one, neither on the card nor in the queue's "risk first" sort
and its reading filter (a failed one ranks and filters as medium), which the SQL page and the
socket's Python (`queue_sort_key`, `queue_matches`) apply alike."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.provenance import source_label
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.approvals.reads.queue import (
    QueueFilters,
    approvals_queue_for,
    queue_matches,
    queue_sort_key,
    queue_view_from,
)
from reviewdesk.approvals.reads.representation import approval_data, approvals_data
from reviewdesk.desk.cards import call_summary
from tests.reviewdesk.desk.test_snapshot_window import clone_pending

pytestmark = pytest.mark.django_db

FROM_INBOX = {
    "kind": "tool_output",
    "match": "exact",
    "step": 3,
    "tool": "read_inbox",
    "call_id": "c1",
    "trusted": False,
}
FROM_TASK = {"kind": "task", "match": "exact", "step": 1}
UNTRUSTED_TO = {
    "pointer": "/to",
    "code": "untrusted_origin",
    "text": "/to came only from read_inbox's output at step 3 (untrusted)",
}
SOURCES = {"/to": [FROM_INBOX], "/subject": [FROM_TASK], "/body": [{"kind": "none"}]}


def reading(status: str = "ready", risk: str | None = "high", **fields) -> dict:
    return {
        "status": status,
        "model": "reviewer-model",
        "risk": risk,
        "summary": "Emails a customer about a refund.",
        "concerns": [
            {"about": "/to", "text": "the recipient came from an inbound email"},
            {"about": "step:3", "text": "the email asks to send the refund elsewhere"},
        ],
        "at": "2026-12-07T10:00:00Z",
        **fields,
    }


def raised(interrupted_run, *, flags=(), sources=SOURCES, read=None) -> ApprovalRequest:
    """A pending send_email whose stored provenance and reading are the test's."""
    _, approval = interrupted_run()
    approval.provenance = {"sources": sources, "flags": list(flags)}
    approval.reading = read
    approval.save()
    return approval


def test_a_provenance_flag_is_a_warning_so_approving_asks_and_each_argument_has_its_source(interrupted_run):
    summary = call_summary(approval_data(raised(interrupted_run, flags=[UNTRUSTED_TO])))
    assert UNTRUSTED_TO["text"] in summary["warnings"]
    assert UNTRUSTED_TO["text"] in summary["unusual"]  # so batch.js never sweeps it in
    assert summary["risk"].startswith("⚠ ")
    rows = {row["pointer"]: row for row in summary["provenance"]}
    assert set(rows) == {"/to", "/subject", "/body"}
    assert rows["/to"]["value"] == "ada@example.com"
    assert rows["/to"]["label"] == source_label(FROM_INBOX)  # the engine's words, not the desk's
    assert rows["/subject"]["label"] == source_label(FROM_TASK)
    assert (rows["/to"]["warning"], rows["/to"]["untrusted"]) == (True, True)
    assert (rows["/subject"]["warning"], rows["/subject"]["untrusted"]) == (False, False)
    assert summary["provenance_note"] == ""


def test_the_same_call_without_a_flag_is_not_unusual(interrupted_run):
    summary = call_summary(approval_data(raised(interrupted_run)))
    assert summary["unusual"] == [] and summary["risk"] == ""
    assert not any(row["warning"] for row in summary["provenance"])


def test_a_high_reading_asks_for_a_confirmation_that_states_its_concerns(interrupted_run):
    summary = call_summary(approval_data(raised(interrupted_run, read=reading(risk="high"))))
    assert summary["unusual"] == [
        "A second opinion (model output) reads this as high risk: /to: the recipient came from an "
        "inbound email; step 3: the email asks to send the refund elsewhere"
    ]
    assert summary["reading_level"] == "high"
    assert summary["reading_line"] == "2nd opinion: high risk"
    # A concern that names an argument points at its row; one that names a step does not.
    assert [c["row"] for c in summary["concerns"]] == [
        [row["pointer"] for row in summary["provenance"]].index("/to"),
        None,
    ]


def test_a_medium_or_low_reading_is_shown_but_asks_nothing(interrupted_run):
    for risk in ("medium", "low"):
        summary = call_summary(approval_data(raised(interrupted_run, read=reading(risk=risk))))
        assert summary["unusual"] == []
        assert (summary["reading_level"], summary["reading_line"]) == (risk, f"2nd opinion: {risk} risk")


def test_a_pending_or_failed_reading_is_never_low(interrupted_run):
    cases = {
        "pending": reading(status="pending", risk=None, concerns=[]),
        "unavailable": reading(status="unavailable", risk=None, error="the model timed out"),
        # A stored reading that says "unavailable" but carries a risk, and a ready one whose
        # risk is none of the three: neither is read as that risk.
        "unavailable with a risk": reading(status="unavailable", risk="low", error="invalid output"),
        "ready with no known risk": reading(status="ready", risk="none"),
    }
    for name, read in cases.items():
        summary = call_summary(approval_data(raised(interrupted_run, read=read)))
        assert summary["reading_level"] in ("pending", "unavailable"), name
        assert "low" not in summary["reading_line"], name
        assert summary["concerns"] == [], name  # a failed reading's leftovers are not advice
        assert summary["unusual"] == [], name
    pending = call_summary(approval_data(raised(interrupted_run, read=cases["pending"])))
    assert (pending["reading_line"], pending["reading_said"]) == ("2nd opinion: being read…", "being read…")
    failed = call_summary(approval_data(raised(interrupted_run, read=cases["unavailable"])))
    assert failed["reading_said"] == "unavailable: the model timed out"


def test_a_call_whose_provenance_is_not_known_says_so(interrupted_run):
    approval = raised(interrupted_run)
    approval.provenance = None
    approval.save()
    summary = call_summary(approval_data(approval))
    assert summary["provenance"] is None
    assert summary["provenance_note"] == "Where the arguments came from is not known for this call."
    external = {**approval_data(approval), "external": {"schema": {"type": "object"}}}
    assert call_summary(external)["provenance_note"] == (
        "Where the arguments came from is not known: the framework keeps its conversation."
    )


def read_queue(interrupted_run) -> dict[str, ApprovalRequest]:
    """Six pending calls: read high, medium and low, one being read, one whose reading failed,
    and one not read."""
    _, first = interrupted_run()
    clone_pending(first, 5)
    rows = list(ApprovalRequest.objects.filter(status="pending").order_by("expires_at", "created_at", "id"))
    names = ["none", "low", "unavailable", "pending", "medium", "high"]  # expiry order: high last
    reads = {
        "low": reading(risk="low"),
        # Not ready, whatever risk they carry: never ranked by it. Failed: ranked as medium (a
        # model made to fail must not sink the call); being read: the rest.
        "unavailable": reading(status="unavailable", risk="high", error="boom"),
        "pending": reading(status="pending", risk="high"),
        "medium": reading(risk="medium"),
        "high": reading(risk="high"),
    }
    for name, row in zip(names, rows, strict=True):
        row.reading = reads.get(name)
        row.save()
    return dict(zip(names, rows, strict=True))


def test_risk_first_puts_high_then_medium_and_unavailable_then_the_rest_in_the_usual_order(
    interrupted_run, personas
):
    calls = read_queue(interrupted_run)
    by_id = {str(row.id): name for name, row in calls.items()}
    usual = [by_id[str(a.id)] for a in approvals_queue_for(personas.alice, QueueFilters()).approvals]
    assert usual == ["none", "low", "unavailable", "pending", "medium", "high"]
    page = approvals_queue_for(personas.alice, QueueFilters(sort="risk")).approvals
    assert [by_id[str(a.id)] for a in page] == ["high", "unavailable", "medium", "none", "low", "pending"]
    # The socket's Python places a live card where the SQL page has it.
    keys = [queue_sort_key(p, "alice", sort="risk") for p in approvals_data(page)]
    assert keys == sorted(keys)
    assert sorted(queue_sort_key(p, "alice") for p in approvals_data(page))[0][0] == "2"


def test_the_reading_filter_keeps_readings_at_or_above_its_risk_and_unavailable_ones_as_medium(
    interrupted_run, personas
):
    calls = read_queue(interrupted_run)
    by_id = {str(row.id): name for name, row in calls.items()}
    everything = approvals_data(approvals_queue_for(personas.alice, QueueFilters()).approvals)
    wanted_names = {"medium": {"unavailable", "medium", "high"}, "high": {"high"}, "": set(calls)}
    for wanted, names in wanted_names.items():
        for sort in ("", "risk"):
            filters = QueueFilters(reading=wanted, sort=sort)
            page = {by_id[str(a.id)] for a in approvals_queue_for(personas.alice, filters).approvals}
            assert page == names, filters
            assert {by_id[p["id"]] for p in everything if queue_matches(p, filters, "alice")} == names


def test_a_url_asks_for_the_sort_and_filter_and_anything_else_reads_as_none():
    assert queue_view_from({"sort": "risk", "reading": "high"})[0] == QueueFilters(
        sort="risk", reading="high"
    )
    assert queue_view_from({"sort": "fancy", "reading": "low"})[0] == QueueFilters()


def test_the_desk_and_the_approval_page_draw_the_sources_and_the_reading(interrupted_run, personas):
    approval = raised(interrupted_run, flags=[UNTRUSTED_TO], read=reading(risk="high"))
    client = Client()
    client.force_login(personas.alice)
    desk = client.get("/", {"sort": "risk"}).content.decode()
    assert "2nd opinion: high risk" in desk
    assert 'Second opinion <span class="untrusted-tag">model output, advice only</span>' in desk
    assert f'<a href="#arg-{approval.id}-0">/to</a>: the recipient came from an inbound email' in desk
    assert '<option value="risk" selected>' in desk
    page = client.get(f"/approvals/{approval.id}/").content.decode()
    assert '<dd id="arg-0" class="arg flagged"><span class="arg-value">ada@example.com</span>' in page
    assert (
        '<p class="warning">⚠ /to came only from read_inbox&#x27;s output at step 3 (untrusted)</p>' in page
    )
    assert '<a href="#arg-0">/to</a>' in page


def test_an_edit_that_replaces_the_untrusted_recipient_no_longer_warns_and_one_that_keeps_it_does(
    interrupted_run, personas
):
    approval = raised(interrupted_run, flags=[UNTRUSTED_TO])
    client = Client()
    client.force_login(personas.alice)

    def summary_for(arguments: dict) -> dict:
        answer = client.post(
            f"/approvals/{approval.id}/preview", {"arguments": arguments}, content_type="application/json"
        )
        assert answer.status_code == 200, answer.content
        return answer.json()["summary"]

    kept = summary_for({**approval.arguments, "body": "Reworded by the reviewer."})
    assert UNTRUSTED_TO["text"] in kept["unusual"]
    rows = {row["pointer"]: row for row in kept["provenance"]}
    assert rows["/to"]["label"] == source_label(FROM_INBOX)
    assert rows["/body"]["label"] == source_label({"kind": "reviewer", "match": "exact", "by": "alice"})
    replaced = summary_for({**approval.arguments, "to": "grace@example.com"})
    assert UNTRUSTED_TO["text"] not in replaced["unusual"]
    assert not any(row["warning"] for row in replaced["provenance"])


def test_the_arguments_are_listed_in_the_tools_declared_order_whatever_order_the_database_kept():
    """PostgreSQL's jsonb keeps an object's keys shortest first (/to, /body, /subject): the card
    lists them as send_email declares them, on either database."""
    from reviewdesk.desk.cards import provenance_rows

    payload = {
        "agent": "demo",
        "tool": "send_email",
        "external": None,
        "arguments": {"to": "ada@example.com", "body": "Hi", "subject": "Refund", "extra": "x"},
        "provenance": {p: [{"kind": "none"}] for p in ("/to", "/body", "/subject", "/extra")},
        "provenance_flags": [],
    }
    assert [row["pointer"] for row in provenance_rows(payload)] == ["/to", "/subject", "/body", "/extra"]
