"""The runs list, the run page and the notices name things as a person does: a run by its task
and the tools it called, ids shortened and copyable, a tool call that failed said to have failed
wherever it is shown even when the run went on (Django's test client)."""

from __future__ import annotations

import html as html_lib
import re

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.desk.templatetags.desk_ids import short, short_id, short_ids
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import RunStatus

pytestmark = pytest.mark.django_db

# A refund larger than the order: the reviewer approves it, the tool refuses it (a ToolError),
# the model reads the refusal and ends the run as it likes. The run succeeds; the call failed.
TOO_LARGE_REFUND = [
    {
        "content": "I will refund Ada.",
        "tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 300}}],
    },
    {"content": "Done."},
]


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def shown_text(page: str) -> str:
    """What a person reads: the page without its tags, attributes and scripts."""
    body = page[page.index("<body") :]
    body = re.sub(r"<script.*?</script>", "", body, flags=re.S)
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", body))


@pytest.fixture
def refund_failed(interrupted_run, personas):
    """A run that succeeded although its one approved call failed: (run, approval)."""
    run, approval = interrupted_run(TOO_LARGE_REFUND)
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    [effect] = run.side_effects.all()
    assert effect.outcome == "failed", effect.result
    return run, approval


def test_a_short_id_shows_eight_characters_and_copies_the_whole_id():
    full = "8d16b81e-4162-45e3-8411-37d2b38d3e92"
    shown = short_id(full, "run")
    assert '<code title="8d16b81e-4162-45e3-8411-37d2b38d3e92">8d16b81e</code>' in shown
    assert 'class="copy-id" data-copy="8d16b81e-4162-45e3-8411-37d2b38d3e92"' in shown
    assert 'type="button"' in shown  # a button: reached by Tab, pressed with Enter or Space
    assert short(full) == "8d16b81e…" and short("k1") == "k1"
    assert short_ids(f"Approved send_email for run {full}.") == "Approved send_email for run 8d16b81e…."


def test_the_runs_list_names_each_run_by_its_task_and_tool_with_a_short_copyable_id(
    interrupted_run, personas
):
    run, _ = interrupted_run()
    page = logged_in(personas.carol).get("/runs/").content.decode()
    row = page[page.index(f'data-run-id="{run.id}"') :]
    row = row[: row.index("</tr>")]
    assert f'<a href="/runs/{run.id}/">Tell Ada her refund is on its way.</a>' in row
    assert '<code>send_email</code> <span class="muted">waiting</span>' in row
    assert f'<code title="{run.id}">{str(run.id)[:8]}</code>' in row
    assert f'data-copy="{run.id}"' in row
    assert str(run.id) not in shown_text(page)  # the whole id is in the title and the button only


def test_a_failed_call_shows_as_failed_on_the_runs_list_though_the_run_succeeded(refund_failed, personas):
    run, _ = refund_failed
    page = logged_in(personas.carol).get("/runs/").content.decode()
    row = page[page.index(f'data-run-id="{run.id}"') :]
    row = row[: row.index("</tr>")]
    assert '<span class="status succeeded">succeeded</span>' in row
    assert ">1 call failed</span>" in row
    assert (
        '<span class="tool-chip failed"><code>refund_payment</code> <span class="outcome failed">failed</span>'
        in row
    )


def test_the_run_page_says_a_failed_call_failed_in_its_title_timeline_ledger_thread_and_conversation(
    refund_failed, personas
):
    run, _ = refund_failed
    page = logged_in(personas.carol).get(f"/runs/{run.id}/").content.decode()
    title = page[page.index('<h1 id="run-title">') : page.index("</h1>")]
    assert "Tell Ada her refund is on its way." in title and ">succeeded<" in title
    assert '<span class="outcome failed" id="run-failed-calls">1 tool call failed</span>' in title
    failed_entry = re.search(r'<li class="tl effect failed">.*?</li>', page, re.S).group(0)
    assert "Effect refund_payment confirmed (failed)" in failed_entry
    ledger = page[page.index('id="side-effects"') :]
    assert re.search(
        r'<li class="failed"><code>refund_payment</code>.*?<span class="outcome failed">failed</span>', ledger
    )
    conversation = page[page.index('<ol class="log">') :]
    call_id = run.side_effects.get().tool_call_id
    assert (
        f'result of <code>{call_id}</code></span> <span class="outcome failed">failed</span>' in conversation
    )
    assert f"<code>{run.id}</code>" not in page  # the title and the timeline name it by its task
    thread = page[page.index('<p class="tools">') + len('<p class="tools">') :]
    thread = thread[: thread.index("</p>")]
    assert thread == 'Tools called: <code>refund_payment</code> <span class="call-failed">failed</span>'


def test_the_timeline_leads_with_what_a_person_cares_about_and_folds_the_workers_steps(
    refund_failed, personas
):
    run, _ = refund_failed
    page = logged_in(personas.carol).get(f"/runs/{run.id}/").content.decode()
    entries = re.findall(r'<li class="tl ([a-z ]+)">.*?<span class="tl-text">(.*?)</span>', page, re.S)
    shown = [
        re.sub(r"<[^>]+>", "", text).strip() for classes, text in entries if "worker" not in classes.split()
    ]
    folded = [
        re.sub(r"<[^>]+>", "", text).strip() for classes, text in entries if "worker" in classes.split()
    ]
    assert shown == [
        "Run submitted",
        "Approval requested: refund_payment",
        "Approved refund_payment",
        "Effect refund_payment confirmed (failed)",
        "Run succeeded",
    ], entries
    assert "Attempt #1 started" in folded and "Model turn: answers" in folded
    assert "Effect refund_payment recorded as pending" in folded
    assert f'(<span id="worker-steps">{len(folded)}</span>)' in page


def test_a_decisions_notice_names_the_run_by_its_short_id(interrupted_run, personas):
    run, approval = interrupted_run()
    client = logged_in(personas.alice)
    response = client.post(
        f"/approvals/{approval.id}/",
        {"verdict": "reject", "reason": "no", "checkpoint_id": str(approval.checkpoint_id)},
    )
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        f"Rejected send_email for run {str(run.id)[:8]}."
    ]


def test_notices_quote_no_whole_id_and_come_in_one_box(interrupted_run, personas):
    """Two notices on one page (a hand-over's, which quotes the run's whole id, and the list's
    own): one box, above nothing it pushes down, every id cut to eight characters."""
    run, approval = interrupted_run()
    client = logged_in(personas.bob)
    client.post(reverse("approval-handover", args=[approval.id]), {"to": "alice", "note": ""})
    page = client.get("/runs/?offset=5000").content.decode()  # past the end: a notice of its own
    start = page.index('<div class="page-notices"')
    box = page[start : page.index("</div>", start)]
    assert box.count('<p class="flash') == 2, box
    assert f"Handed send_email for run {str(run.id)[:8]}… over to alice." in box
    assert 'role="status"' in box and 'id="notices-close"' in box
    assert str(run.id) not in shown_text(page)


def test_the_approval_page_says_an_earlier_call_of_the_run_failed(interrupted_run, personas):
    """The refund was approved and failed; the agent went on to ask for an email: the email's
    page lists the refund as approved, and says its call failed."""
    script = [
        TOO_LARGE_REFUND[0],
        {
            "tool_calls": [
                {
                    "name": "send_email",
                    "arguments": {"to": "ada@example.com", "subject": "Refund", "body": "Sorry."},
                }
            ]
        },
        {"content": "Done."},
    ]
    run, refund = interrupted_run(script)
    approval_decide(
        approval_id=refund.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(refund.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="in-process")
    email = run.approvals.get(status="pending")
    page = logged_in(personas.bob).get(f"/approvals/{email.id}/").content.decode()
    earlier = page[page.index('id="run-decisions"') : page.index("</ul>", page.index('id="run-decisions"'))]
    assert (
        f'<a href="/approvals/{refund.id}/">refund_payment</a> <span class="status approved">approved</span>'
        ' <span class="outcome failed">the call failed</span> by alice' in earlier
    ), earlier
