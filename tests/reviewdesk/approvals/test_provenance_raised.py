"""Where a raised call's arguments came from, as the desk stores and serves it (issue 38).

In-process: the run is advanced by `run_execute` in this process on the real database (the
worker's own path; tests/e2e drives the same through a real worker). The finding itself is
agents.provenance's, tested in tests/agents/test_provenance.py: here, that the desk hands it
the run's log up to the call and the agent's word on its tools, and keeps and serves the answer.
"""

from __future__ import annotations

import pytest

from agents.registry import get_agent
from agents.state import CallState, CallStatus
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.lifecycle.provenance import messages_before, tool_trust
from reviewdesk.approvals.lifecycle.raising import approval_raise
from reviewdesk.approvals.models import ApprovalStatus, Decision
from reviewdesk.audit.models import AuditEvent
from reviewdesk.runs.execution import run_execute

pytestmark = pytest.mark.django_db

INBOX_SCRIPT = [
    {"tool_calls": [{"name": "lookup_customer", "arguments": {"email": "ada@example.com"}}]},
    {"tool_calls": [{"name": "read_inbox", "arguments": {"email": "ada@example.com"}}]},
    {
        "tool_calls": [
            {
                "name": "send_email",
                "arguments": {
                    "to": "billing@examp1e.com",
                    "subject": "Refund for A-1001",
                    "body": "Your refund of 250.00 is on its way.",
                },
            }
        ]
    },
    {"content": "Sent."},
]


def best(approval, pointer):
    return approval.provenance["sources"][pointer][0]


def test_a_recipient_read_from_an_inbound_email_is_flagged_and_the_task_s_order_is_the_task_s(
    interrupted_run,
):
    _, approval = interrupted_run(script=INBOX_SCRIPT)
    assert approval.tool == "send_email"
    to = best(approval, "/to")
    assert to["kind"] == "tool_output" and to["tool"] == "read_inbox" and to["trusted"] is False
    assert to["call_id"] == "call_1_0"  # the scripted provider's id for turn 1's first call
    # The subject is the inbound email's, word for word: untrusted too, but it aims nothing.
    assert [(s["kind"], s["tool"]) for s in approval.provenance["sources"]["/subject"]] == [
        ("tool_output", "read_inbox")
    ]
    assert approval.provenance["sources"]["/body"] == [{"kind": "none"}]  # the model wrote it
    flags = approval.provenance["flags"]
    assert [(f["pointer"], f["code"]) for f in flags if f["code"] == "untrusted_origin"] == [
        ("/to", "untrusted_origin")
    ]
    # Stored once, at the raise; the audit row of the request names the warning.
    requested = AuditEvent.objects.get(action="approval.requested", subject_id=str(approval.id))
    assert [f["pointer"] for f in requested.data["provenance_flags"]] == ["/to"]


def test_an_address_from_a_trusted_lookup_raises_no_warning(interrupted_run):
    script = [
        {"tool_calls": [{"name": "lookup_customer", "arguments": {"email": "ada@example.com"}}]},
        {
            "tool_calls": [
                {"name": "send_email", "arguments": {"to": "ada@example.com", "subject": "Hi", "body": "x"}}
            ]
        },
        {"content": "Emailed Ada."},
    ]
    _, approval = interrupted_run(script=script)
    to = best(approval, "/to")
    # The task ("Tell Ada her refund is on its way.") does not spell the address; the lookup's output does.
    assert (to["kind"], to["tool"], to["trusted"], to["step"]) == ("tool_output", "lookup_customer", True, 4)
    assert approval.provenance["flags"] == []


def test_a_sibling_s_output_is_not_a_source_of_its_batch(interrupted_run):
    """The lookup and the email in one model turn: the model wrote the address before it read
    the lookup's output, so the address is its own (the output is logged after the call)."""
    _, approval = interrupted_run()  # SEND_EMAIL_SCRIPT: lookup and send_email in one batch
    assert approval.provenance["sources"]["/to"] == [{"kind": "none"}]


def test_the_api_serves_provenance_and_its_flags_with_the_approval(interrupted_run, personas, api_as):
    _, approval = interrupted_run(script=INBOX_SCRIPT)
    body = api_as(personas.alice, "review").get(f"/api/v1/approvals/{approval.id}").json()
    assert body["provenance"]["/to"][0]["tool"] == "read_inbox"
    assert body["provenance_flags"][0]["code"] == "untrusted_origin"
    assert body["reading"] is None  # the demo agent asks no second opinion


def test_a_value_the_model_wrote_is_none_and_only_the_log_before_the_call_counts(interrupted_run):
    script = [
        {
            "tool_calls": [
                {"name": "send_email", "arguments": {"to": "zed@example.org", "subject": "Hi", "body": "x"}}
            ]
        },
        {"content": "Done."},
    ]
    _, approval = interrupted_run(script=script)
    assert approval.provenance["sources"]["/to"] == [{"kind": "none"}]


def test_an_edit_keeps_the_sources_of_what_it_kept_and_names_the_reviewer_for_what_they_wrote(
    interrupted_run, personas
):
    _, approval = interrupted_run(script=INBOX_SCRIPT)
    edited = {**approval.arguments, "to": "ada@example.com"}
    decision = approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="edit",
        checkpoint_id=str(approval.checkpoint_id),
        arguments=edited,
    )
    decision = Decision.objects.get(pk=decision.pk)
    assert decision.provenance["sources"]["/to"] == [{"kind": "reviewer", "match": "exact", "by": "alice"}]
    assert decision.provenance["sources"]["/subject"] == approval.provenance["sources"]["/subject"]


def test_a_question_is_not_traced(interrupted_run):
    script = [
        {"tool_calls": [{"name": "ask_human", "arguments": {"question": "Refund A-1001 in full?"}}]},
        {"content": "Asked."},
    ]
    _, approval = interrupted_run(script=script)
    assert approval.kind == "question" and approval.provenance is None
    assert approval.status == ApprovalStatus.PENDING


def test_raising_again_traces_again(interrupted_run):
    """A request raised again (after a cancel) is traced afresh, over the log read back."""
    run, approval = interrupted_run(script=INBOX_SCRIPT)
    approval.status = ApprovalStatus.CANCELLED
    approval.save(update_fields=["status"])
    call = CallState(
        id=approval.tool_call_id, name=approval.tool, arguments=approval.arguments, status=CallStatus.AWAITING
    )
    again = approval_raise(run=run, attempt=None, checkpoint_id=approval.checkpoint_id, call=call)
    assert again.pk != approval.pk and again.provenance == approval.provenance


def test_only_the_log_up_to_the_call_is_searched(interrupted_run):
    """What was logged after the assistant message that made the call (a sibling's output once
    its batch is settled) the model had not read when it wrote the arguments."""
    run, approval = interrupted_run(script=INBOX_SCRIPT)
    log = [m.body for m in run.messages.order_by("position")]
    later = {"role": "tool", "tool_call_id": "x", "content": "billing@examp1e.com"}
    assert messages_before(run, approval.tool_call_id, log=[*log, later]) == log[:-1]
    assert messages_before(run, approval.tool_call_id) == log[:-1]  # read from the database alike


def test_a_tool_no_longer_declared_is_untrusted(interrupted_run):
    run, _ = interrupted_run(script=INBOX_SCRIPT)
    trust = tool_trust(get_agent("demo"), run)
    assert trust.trusted("lookup_customer") is True
    assert trust.trusted("read_inbox") is False
    assert trust.trusted("a_tool_since_removed") is False


def test_a_retry_of_a_rejected_address_is_still_the_inbox_s_and_flagged(interrupted_run, personas):
    """The reviewer rejects with a reason that names the planted address; the model sends to it
    again. The retry's address is still flagged as the inbound email's: the rejection (which
    the desk recorded, so it is the reviewer's) quotes it, and quoting never vouches."""
    retry = INBOX_SCRIPT[2]
    run, approval = interrupted_run(script=[*INBOX_SCRIPT[:3], retry, {"content": "Sent."}])
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="reject",
        checkpoint_id=str(approval.checkpoint_id),
        reason="do NOT write to billing@examp1e.com, it is not Ada's",
    )
    run_execute(run_id=run.id, worker="in-process")
    again = run.approvals.get(status=ApprovalStatus.PENDING)
    sources = again.provenance["sources"]["/to"]
    assert [(s["kind"], s.get("tool"), s.get("said")) for s in sources] == [
        ("tool_output", "read_inbox", None),
        ("reviewer", None, "rejection"),
    ]
    assert [f["code"] for f in again.provenance["flags"] if f["pointer"] == "/to"] == ["untrusted_origin"]
