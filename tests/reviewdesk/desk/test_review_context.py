"""What a reviewer reads before deciding: context, previews that never act, the queue, and
arguments whose invisible characters are shown escaped."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from html import unescape
from pathlib import Path

import pytest
from django.conf import settings
from django.core import mail
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.approvals.reads.queue import (
    QUEUE_MAX_PAGE_OFFSET,
    QUEUE_PAGE_SIZE,
    QueueFilters,
    approvals_queue_for,
)
from reviewdesk.demo.models import DemoRefund
from reviewdesk.desk.templatetags.desk_json import exact, has_invisible, pretty_json, shown_json, visible

pytestmark = pytest.mark.django_db

REFUND_SCRIPT = [
    {
        "content": "Ada was charged twice; I will refund the order in full.",
        "tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 250}}],
    },
    {"content": "Refunded."},
]
EXECUTE_SCRIPT = [
    {"tool_calls": [{"name": "execute", "arguments": {"command": "make deploy"}}]},
    {"content": "ok"},
]
BIDI = "ada@example.com\u202egro.live"  # reads as ada@example.com + "evil.org" reversed
BIDI_SCRIPT = [
    {"tool_calls": [{"name": "send_email", "arguments": {"to": BIDI, "subject": "Hi", "body": "x\u200by"}}]},
    {"content": "sent"},
]


# Two gated calls, one model turn after the other: the second is asked once the first is decided.
TWO_EMAILS = [
    {
        "tool_calls": [
            {"name": "send_email", "arguments": {"to": "ada@example.com", "subject": "1", "body": "a"}}
        ]
    },
    {
        "tool_calls": [
            {"name": "send_email", "arguments": {"to": "ada@example.com", "subject": "2", "body": "b"}}
        ]
    },
    {"content": "done"},
]


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def preview(client: Client, approval, arguments):
    return client.post(
        f"/approvals/{approval.id}/preview",
        data=json.dumps({"arguments": arguments}),
        content_type="application/json",
    )


def test_the_approval_page_shows_who_asked_for_what_and_why(interrupted_run, personas):
    _, approval = interrupted_run(REFUND_SCRIPT)
    html = logged_in(personas.alice).get(f"/approvals/{approval.id}/").content.decode()
    assert "Tell Ada her refund is on its way." in html  # the task
    assert ">carol<" in html and ">demo<" in html  # submitter, agent
    assert "Refund part or all of an order." in html  # the tool's description
    assert "refund_payment needs a reviewer&#x27;s approval under its policy" in html
    # The model's message that made the call, marked as model text.
    assert 'id="asking-text">Ada was charged twice; I will refund the order in full.' in html
    assert "model text, untrusted" in html
    # The preview: total, already refunded, this refund, what is left.
    for label, value in (("Order total", "250.00"), ("Already refunded", "0.00"), ("This refund", "250.00")):
        assert f"<dt>{label}</dt><dd>{value}" in html
    assert "<dt>Left after it</dt><dd>0.00" in html


def test_the_approval_page_lists_the_runs_earlier_decisions(interrupted_run, personas):
    from reviewdesk.approvals.deciding.record import approval_decide
    from reviewdesk.runs.execution import run_execute

    run, first = interrupted_run(TWO_EMAILS)
    approval_decide(
        approval_id=first.id,
        reviewer=personas.bob,
        verdict="reject",
        reason="wrong tone",
        checkpoint_id=str(first.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="in-process")
    second = ApprovalRequest.objects.get(run=run, status="pending")
    html = logged_in(personas.alice).get(f"/approvals/{second.id}/").content.decode()
    assert "rejected</span> by bob: “wrong tone”" in html


def test_a_preview_reads_the_world_and_never_acts_on_it(interrupted_run, personas, tmp_path):
    _, email = interrupted_run()
    _, refund = interrupted_run(REFUND_SCRIPT)
    _, command = interrupted_run(EXECUTE_SCRIPT)
    DemoRefund.objects.create(order_id="A-1001", amount=Decimal("30.00"), idempotency_key="earlier")
    alice = logged_in(personas.alice)
    outbox = Path(settings.EMAIL_FILE_PATH)
    before = sorted(outbox.iterdir()) if outbox.exists() else []
    runs_dir = Path(settings.DESK_RUNS_DIR) / str(command.run_id)

    email_answer = preview(
        alice, email, {"to": "ada@example.com", "subject": "Edited", "body": "Body\nline 2"}
    )
    refund_answer = preview(alice, refund, {"order_id": "A-1001", "amount": 200})
    command_answer = preview(alice, command, {"command": "touch /tmp/should-not-exist-desk9"})

    assert email_answer.status_code == refund_answer.status_code == command_answer.status_code == 200
    email_rows = dict(email_answer.json()["preview"]["rows"])
    assert email_rows["To"] == "ada@example.com" and email_rows["Subject"] == "Edited"
    assert email_answer.json()["preview"]["body"] == "Body\nline 2"
    assert dict(refund_answer.json()["preview"]["rows"]) == {
        "Order total": "250.00",
        "Already refunded": "30.00",
        "This refund": "200.00",
        "Left after it": "20.00",
    }
    command_rows = dict(command_answer.json()["preview"]["rows"])
    assert command_rows["Working directory"] == f"a scratch copy of {runs_dir}, removed when the command ends"
    assert command_rows["Time limit"].startswith(f"{settings.DESK_EXECUTE_TIMEOUT_SECONDS:g} s")
    # Nothing happened: no mail, no new refund row, no command run, no working directory made.
    assert mail.outbox == []
    assert (sorted(outbox.iterdir()) if outbox.exists() else []) == before
    assert list(DemoRefund.objects.values_list("idempotency_key", flat=True)) == ["earlier"]
    assert not Path("/tmp/should-not-exist-desk9").exists()
    assert not runs_dir.exists()


def test_a_refund_preview_warns_when_it_exceeds_what_is_left(interrupted_run, personas):
    _, refund = interrupted_run(REFUND_SCRIPT)
    DemoRefund.objects.create(order_id="A-1001", amount=Decimal("100.00"), idempotency_key="earlier")
    answer = preview(logged_in(personas.alice), refund, {"order_id": "A-1001", "amount": 250}).json()
    assert answer["preview"]["warnings"] == [
        "this refund exceeds what is left to refund (150.00): it will fail"
    ]


def test_the_preview_of_edited_arguments_says_what_is_unusual_about_signing_them(interrupted_run, personas):
    """The approval page confirms an edit only when its edited call is unusual: the endpoint's
    summary is the desk's (`call_summary`) for the arguments sent, not for the original ones."""
    _, refund = interrupted_run(REFUND_SCRIPT)  # 250.00 of an order of 250.00: ordinary
    DemoRefund.objects.create(order_id="A-1001", amount=Decimal("100.00"), idempotency_key="earlier")
    alice = logged_in(personas.alice)
    within = preview(alice, refund, {"order_id": "A-1001", "amount": 150}).json()["summary"]
    assert within["unusual"] == []
    assert ["This refund", "150.00"] in within["facts"]
    beyond = preview(alice, refund, {"order_id": "A-1001", "amount": 151}).json()["summary"]
    assert beyond["unusual"] == ["this refund exceeds what is left to refund (150.00): it will fail"]
    hidden = preview(alice, refund, {"order_id": "A-1001\u202e", "amount": 1}).json()["summary"]
    assert "the arguments contain invisible characters (shown escaped)" in hidden["unusual"]


def test_the_preview_endpoint_refuses_bad_arguments_and_strangers(interrupted_run, personas):
    _, approval = interrupted_run()
    alice = logged_in(personas.alice)
    bad = preview(alice, approval, {"to": "ada@example.com", "subject": "", "body": "x", "cc": "eve"})
    assert bad.status_code == 422
    assert bad.json()["errors"] == [
        "(root): Additional properties are not allowed ('cc' was unexpected)",
        "subject: '' should be non-empty",
    ]
    assert (
        alice.post(f"/approvals/{approval.id}/preview", data="{", content_type="application/json").status_code
        == 400
    )
    deep: object = "x"
    for _ in range(40):
        deep = {"a": deep}
    assert preview(alice, approval, deep).status_code == 400
    assert preview(logged_in(personas.olivia), approval, {}).status_code == 403
    anonymous = preview(Client(), approval, {})
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert logged_in(personas.alice).get(f"/approvals/{approval.id}/preview").status_code == 405


def test_the_preview_of_an_approval_assigned_to_someone_else_is_not_found(interrupted_run, personas):
    _, approval = interrupted_run(reviewers=["bob"])
    assert preview(logged_in(personas.alice), approval, {}).status_code == 404


def test_the_queue_puts_my_approvals_first_then_the_soonest_to_expire(interrupted_run, personas):
    _, open_late = interrupted_run(approval_ttl_seconds=3000)
    _, open_soon = interrupted_run(approval_ttl_seconds=600)
    _, mine_late = interrupted_run(reviewers=["alice"], approval_ttl_seconds=5000)
    _, bobs = interrupted_run(reviewers=["bob"])
    page = approvals_queue_for(personas.alice, QueueFilters())
    assert [a.id for a in page.approvals] == [mine_late.id, open_soon.id, open_late.id]
    assert bobs.id not in [a.id for a in page.approvals]
    assert [a.id for a in approvals_queue_for(personas.alice, QueueFilters(assignee="me")).approvals] == [
        mine_late.id
    ]
    assert [a.id for a in approvals_queue_for(personas.alice, QueueFilters(assignee="any")).approvals] == [
        open_soon.id,
        open_late.id,
    ]
    only_run = approvals_queue_for(personas.alice, QueueFilters(run=str(open_late.run_id)))
    assert [a.id for a in only_run.approvals] == [open_late.id]
    assert approvals_queue_for(personas.alice, QueueFilters(run="not-a-uuid")).approvals == []
    assert approvals_queue_for(personas.alice, QueueFilters(tool="execute")).approvals == []


def test_the_desk_page_is_paged_and_its_query_count_does_not_grow(interrupted_run, personas):
    _, approval = interrupted_run()
    template = ApprovalRequest.objects.get(pk=approval.pk)

    def clone(n):
        for _ in range(n):
            template.pk = None
            template.tool_call_id = f"clone-{ApprovalRequest.objects.count()}"
            template.save(force_insert=True)

    def render():
        with CaptureQueriesContext(connection) as queries:
            response = logged_in(personas.alice).get("/")
        return response, len(queries)

    _, few_queries = render()
    clone(QUEUE_PAGE_SIZE + 5)
    many, many_queries = render()
    assert many_queries == few_queries
    html = many.content.decode()
    cards = html.count('<li class="card"') - 1  # the blank one in #card-template
    assert cards == QUEUE_PAGE_SIZE
    assert f"<title>({QUEUE_PAGE_SIZE + 6}) Desk" in html
    second = logged_in(personas.alice).get("/", {"offset": QUEUE_PAGE_SIZE}).content.decode()
    assert second.count('<li class="card"') - 1 == 6
    assert 'rel="prev"' in second and 'rel="next"' not in second


def test_past_the_count_cap_the_desk_says_1000_plus_and_still_pages_to_the_end(
    interrupted_run, personas, monkeypatch
):
    """With the cap at 3 and pages of 2, five pending read "3+" on the page, its title and its
    socket snapshot; "next page" still follows the rows themselves, not the stopped count."""
    from reviewdesk.approvals.reads import queue as selectors
    from reviewdesk.desk import consumers

    monkeypatch.setattr(selectors, "QUEUE_COUNT_CAP", 3)
    monkeypatch.setattr(selectors, "QUEUE_PAGE_SIZE", 2)
    _, approval = interrupted_run()
    template = ApprovalRequest.objects.get(pk=approval.pk)
    for n in range(4):
        template.pk, template.tool_call_id = None, f"clone-{n}"
        template.save(force_insert=True)

    alice = logged_in(personas.alice)
    pages = [alice.get("/", {"offset": offset}).content.decode() for offset in (0, 2, 4)]
    assert all("<title>(3+) Desk" in html and 'data-total-capped="yes"' in html for html in pages)
    assert [html.count('<li class="card"') - 1 for html in pages] == [2, 2, 1]
    assert ['rel="next"' in html for html in pages] == [True, True, False]
    assert "of 3+" in pages[0]
    filtered = alice.get("/", {"tool": approval.tool}).content.decode()
    assert "of 3+ matching" in filtered

    snapshot = consumers._snapshot.func(personas.alice)["data"]
    assert (snapshot["total"], snapshot["total_capped"], snapshot["more"]) == (3, True, True)

    monkeypatch.setattr(selectors, "QUEUE_COUNT_CAP", 5)
    exact = alice.get("/").content.decode()
    assert "<title>(5) Desk" in exact and 'data-total-capped=""' in exact


def furthest_read(queries) -> int:
    """The largest LIMIT or OFFSET in the statements: how far into the queue any of them may walk."""
    return max(
        (int(n) for q in queries for n in re.findall(r"\b(?:LIMIT|OFFSET) (\d+)", q["sql"])), default=0
    )


@pytest.mark.parametrize("tiers", ["one tier", "named first"])
def test_an_offset_far_past_the_end_of_the_queue_is_its_last_page_read_no_further(
    interrupted_run, personas, tiers
):
    """The window read as far as the offset asked (an OFFSET, or each tier's ids up to it, of a
    billion): one request walked every pending call to draw an empty page. Now an offset past
    the counted end is the last real page, read as that page is, on the page and its socket."""
    from reviewdesk.desk import consumers

    _, approval = interrupted_run()
    template = ApprovalRequest.objects.get(pk=approval.pk)
    for n in range(QUEUE_PAGE_SIZE + 5):
        template.pk, template.tool_call_id = None, f"clone-{n}"
        template.assignees = ["alice"] if tiers == "named first" and n % 2 else []
        template.save(force_insert=True)
    alice = logged_in(personas.alice)
    with CaptureQueriesContext(connection) as ordinary:
        last = alice.get("/", {"offset": QUEUE_PAGE_SIZE}).content.decode()
    with CaptureQueriesContext(connection) as huge:
        response = alice.get("/", {"offset": 999_999_999})
    page = response.content.decode()
    assert response.status_code == 200
    assert page.count('<li class="card"') - 1 == 6 == last.count('<li class="card"') - 1
    assert f'data-offset="{QUEUE_PAGE_SIZE}"' in page and 'rel="prev"' in page and 'rel="next"' not in page
    assert "Call 1,000,000,000 is past the end of this queue: here is its last page." in page
    assert len(huge) == len(ordinary)
    assert furthest_read(huge) <= QUEUE_MAX_PAGE_OFFSET + QUEUE_PAGE_SIZE + 1
    snapshot = consumers._snapshot.func(personas.alice, (QueueFilters(), 999_999_999))["data"]
    assert (snapshot["offset"], len(snapshot["approvals"]), snapshot["more"]) == (QUEUE_PAGE_SIZE, 6, False)


def test_the_queue_pages_no_deeper_than_its_limit_and_says_how_to_reach_the_rest(
    interrupted_run, personas, monkeypatch
):
    """Past QUEUE_MAX_PAGE_OFFSET (here one page of 2) no next page is offered, and an offset
    asked beyond it is that deepest page, read no further; the page says to filter."""
    from reviewdesk.approvals.reads import queue

    monkeypatch.setattr(queue, "QUEUE_MAX_PAGE_OFFSET", 2)
    monkeypatch.setattr(queue, "QUEUE_PAGE_SIZE", 2)
    monkeypatch.setattr(queue, "QUEUE_COUNT_CAP", 3)
    _, approval = interrupted_run()
    template = ApprovalRequest.objects.get(pk=approval.pk)
    for n in range(6):
        template.pk, template.tool_call_id = None, f"clone-{n}"
        template.save(force_insert=True)
    alice = logged_in(personas.alice)
    note = "The desk pages no further than call 4: filter the queue to reach the rest."
    clicked = alice.get("/", {"offset": 2}).content.decode()
    with CaptureQueriesContext(connection) as queries:
        asked = alice.get("/", {"offset": 10**6}).content.decode()
    for page in (clicked, asked):
        assert page.count('<li class="card"') - 1 == 2 and 'data-offset="2"' in page
        assert note in page and 'rel="next"' not in page and 'rel="prev"' in page
    assert furthest_read(queries) <= 21  # each count at most 3 + 1; Django's get() reads up to 21
    assert note not in alice.get("/").content.decode()  # the first page pages on


def test_invisible_characters_in_arguments_are_escaped_and_flagged_on_every_page(interrupted_run, personas):
    run, approval = interrupted_run(BIDI_SCRIPT)
    alice = logged_in(personas.alice)
    for url in ("/", f"/approvals/{approval.id}/", f"/runs/{run.id}/"):
        html = alice.get(url).content.decode()
        assert "\u202e" not in html and "\u200b" not in html, url
        assert "ada@example.com\\u202egro.live" in html, url
    assert "contains invisible characters" in alice.get("/").content.decode()
    assert "contains invisible characters" in alice.get(f"/approvals/{approval.id}/").content.decode()


# Two options that read alike: the second answers "keep it" with a zero-width space the model
# may read as "no", and the third, reversed, reads as "delete it".
LOOKALIKE_OPTIONS = ["keep it", "keep it\u200b", "\u202eti eteled"]
QUESTION_SCRIPTS = {
    "options": [
        {
            "tool_calls": [
                {"name": "ask_human", "arguments": {"question": "Data?", "options": LOOKALIKE_OPTIONS}}
            ]
        },
        {"content": "ok"},
    ],
    "schema": [
        {
            "tool_calls": [
                {
                    "name": "ask_human",
                    "arguments": {
                        "question": "Data?",
                        "schema": {
                            "type": "object",
                            "properties": {"what\u202e": {"title": "Keep\u200b", "enum": LOOKALIKE_OPTIONS}},
                        },
                    },
                }
            ]
        },
        {"content": "ok"},
    ],
}


@pytest.mark.parametrize("form", sorted(QUESTION_SCRIPTS))
def test_a_questions_options_and_fields_show_their_invisible_characters_escaped(
    interrupted_run, personas, form
):
    """The model writes a question's options, and a schema's titles and choices: shown raw on the
    desk's card and the approval page, "keep it" and "keep it" + U+200B were two identical buttons
    answering differently, and a reversed option read as its opposite (desk.js's live card already
    escaped them)."""
    _, question = interrupted_run(QUESTION_SCRIPTS[form])
    alice = logged_in(personas.alice)
    pages = [f"/approvals/{question.id}/"] + (["/"] if form == "options" else [])  # a card: options only
    for url in pages:
        html = alice.get(url).content.decode()
        # The values posted stay as the model wrote them; what the reviewer reads is escaped.
        assert ">keep it\u200b<" not in html and ">\u202eti eteled<" not in html, url
        assert ">keep it\\u200b<" in html and ">\\u202eti eteled<" in html, url
    if form == "schema":
        assert "Keep\\u200b <select" in html and "Keep\u200b" not in html


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\u202eb", "a\\u202eb"),
        ("\u2066x\u2069", "\\u2066x\\u2069"),
        ("zero\u200b\u200c\u200dwidth\ufeff", "zero\\u200b\\u200c\\u200dwidth\\ufeff"),
        ("bell\x07 c1\x85", "bell\\u0007 c1\\u0085"),
        ("tag\U000e0041", "tag\\udb40\\udc41"),
        ("line\nand\ttab stay, é and 😀 too", "line\nand\ttab stay, é and 😀 too"),
        ("ascii bell\x07, escape\x1b and delete\x7f", "ascii bell\\u0007, escape\\u001b and delete\\u007f"),
        ("plain ascii\nwith a\ttab", "plain ascii\nwith a\ttab"),
        ("vs16 \u2764\ufe0f, vs \U000e0100", "vs16 \u2764\\ufe0f, vs \\udb40\\udd00"),
        ("\u115f\u1160\u3164\uffa0", "\\u115f\\u1160\\u3164\\uffa0"),
        ("a\u00a0b\u2009c\u202fd\u3000e\u2007f", "a\\u00a0b\\u2009c\\u202fd\\u3000e\\u2007f"),
        (
            "cgj\u034f mongolian\u180b khmer\u17b4 braille\u2800",
            "cgj\\u034f mongolian\\u180b khmer\\u17b4 braille\\u2800",
        ),
    ],
    ids=[
        "bidi override",
        "isolates",
        "zero width and BOM",
        "C0 and C1 controls",
        "astral as a surrogate pair",
        "ordinary text untouched",
        "ASCII controls (the regex path)",
        "plain ASCII untouched",
        "variation selectors",
        "Hangul fillers",
        "no-break and other odd spaces",
        "other default-ignorables and the blank braille cell",
    ],
)
def test_visible_escapes_what_cannot_be_seen(text, shown):
    assert visible(text) == shown
    assert has_invisible({"k": [text]}) == (text != shown)


def test_the_run_pages_input_and_output_show_their_invisible_characters_escaped(interrupted_run, personas):
    """The submitter writes the input and the model the output: the run page's facts showed
    them raw (its thread and the approval page escaped the same input), so a reversed span
    (U+202E) read as something else to the reviewer judging the run's calls."""
    run, _ = interrupted_run(BIDI_SCRIPT)
    run.input = "Refund Ada\u202e0001 \u200b"
    run.output = "Done\u202eenod ton"
    run.save(update_fields=["input", "output"])
    html = logged_in(personas.alice).get(f"/runs/{run.id}/").content.decode()
    assert "\u202e" not in html and "\u200b" not in html
    assert "<dd>Refund Ada\\u202e0001 \\u200b</dd>" in html and "<dd>Done\\u202eenod ton</dd>" in html


def test_tool_call_names_in_the_conversation_show_their_invisible_characters_escaped(
    interrupted_run, personas
):
    """The model writes the name of each tool it calls, any name (one it has not got is answered
    with an error, and stays in the log): the conversation on the approval page and the run page,
    and the thread's list of tools called, showed it raw."""
    run, approval = interrupted_run(BIDI_SCRIPT)
    message = run.messages.filter(role="assistant").order_by("position").first()
    message.body["tool_calls"].append(
        {
            "id": "call_x",
            "type": "function",
            "function": {"name": "lookup\u202eliame_dnes", "arguments": "{}"},
        }
    )
    message.save(update_fields=["body"])
    alice = logged_in(personas.alice)
    for url in (f"/approvals/{approval.id}/", f"/runs/{run.id}/"):
        html = alice.get(url).content.decode()
        assert "lookup\u202e" not in html, url
        assert "lookup\\u202eliame_dnes" in html, url


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Your refund ", "Your refund\\u0020"),
        ("  two leading", "\\u0020\\u0020two leading"),
        ("line one \t\nline two", "line one\\u0020\\u0009\nline two"),
        ("tab at the end\t", "tab at the end\\u0009"),
        ("words  with\ttwo spaces\n  and an indent", "words  with\ttwo spaces\n  and an indent"),
        ("a\u00a0", "a\\u00a0"),
    ],
    ids=["trailing", "leading", "before a line break", "trailing tab", "ordinary spacing untouched", "nbsp"],
)
def test_exact_also_shows_the_spaces_and_tabs_at_a_values_edges(text, shown):
    """For a value that is sent or signed (a preview's row, an option): a space or tab at its
    start, at its end or before a line break is escaped too; spaces between words are not."""
    assert exact(text) == shown
    assert has_invisible(text) == (text != shown)


def test_shown_json_marks_the_edge_spaces_of_each_string_and_still_parses_to_the_same_value():
    value = {"to ": " ada@example.com", "subject": "Your refund ", "body": "Hi \nAda", "same": "a  b"}
    shown = shown_json(value)
    assert '"to\\u0020": "\\u0020ada@example.com"' in shown
    assert '"subject": "Your refund\\u0020"' in shown and '"body": "Hi\\u0020\\nAda"' in shown
    assert '"same": "a  b"' in shown  # spaces between words, and the JSON's own, stay
    assert json.loads(shown) == value  # the edit form starts from this text: it must read back
    assert shown_json({"plain": "text", "n": [1, "two"]}) == pretty_json({"plain": "text", "n": [1, "two"]})


# What a reviewer could take for another call's arguments: each class of character that does
# not show (or shows as an ordinary space), in the subject of an email.
LOOKALIKE_SUBJECTS = {
    "variation selectors": (
        "Your refund\ufe0f is here\U000e0100",
        "Your refund\\ufe0f is here\\udb40\\udd00",
    ),
    "Hangul fillers": (
        "Your\u115frefund\u1160is\u3164here\uffa0",
        "Your\\u115frefund\\u1160is\\u3164here\\uffa0",
    ),
    "no-break and odd spaces": (
        "Your\u00a0refund\u2009is\u202fhere\u3000",
        "Your\\u00a0refund\\u2009is\\u202fhere\\u3000",
    ),
    "a trailing space": ("Your refund ", "Your refund\\u0020"),
}


def the_card(desk_page: str, approval) -> str:
    """The server's card for `approval` on the desk page (not the blank template desk.js clones),
    after its start tag: the arguments in its data attribute are data for batch.js, not shown."""
    start = desk_page.index('<div class="row">', desk_page.index(f'data-approval-id="{approval.id}"'))
    return unescape(desk_page[start : desk_page.index("</li>", start)])


def an_email_with_subject(interrupted_run, subject: str):
    script = [
        {
            "tool_calls": [
                {
                    "name": "send_email",
                    "arguments": {"to": "ada@example.com", "subject": subject, "body": "Hi"},
                }
            ]
        },
        {"content": "sent"},
    ]
    return interrupted_run(script)


@pytest.mark.parametrize("kind", sorted(LOOKALIKE_SUBJECTS))
def test_each_class_of_lookalike_character_is_shown_marked_on_the_card_and_the_approval_page(
    interrupted_run, personas, kind
):
    raw, shown = LOOKALIKE_SUBJECTS[kind]
    _, approval = an_email_with_subject(interrupted_run, raw)
    alice = logged_in(personas.alice)
    card = the_card(alice.get("/").content.decode(), approval)
    assert f'"subject": "{shown}"' in card and raw not in card
    assert "contains invisible characters" in card
    page = unescape(alice.get(f"/approvals/{approval.id}/").content.decode())
    assert raw not in page[: page.index('<script id="tool-schema"')]  # then the data approval.js reads
    assert f'"subject": "{shown}"' in page  # what you sign, and the edit form's text
    assert f'"subject":"{shown}"' in page  # the canonical JSON, compact as it is signed
    conversation = page[page.index('id="conversation"') : page.index('id="decided-before"')]
    assert f'"subject": "{shown}"' in conversation  # the model's call, in the conversation
    assert f'<dt>Subject</dt><dd>{shown} <span class="invisible-flag">' in page  # the preview
    assert "contains invisible characters: they are shown escaped" in page


def test_ordinary_text_renders_unchanged_on_the_card_and_the_approval_page(interrupted_run, personas):
    subject = "Your refund,  Ada: é, 東京 and 😀"
    _, approval = an_email_with_subject(interrupted_run, subject)
    alice = logged_in(personas.alice)
    card = the_card(alice.get("/").content.decode(), approval)
    page = unescape(alice.get(f"/approvals/{approval.id}/").content.decode())
    for html in (card, page):
        assert f'"subject": "{subject}"' in html
        assert "\\u0020" not in html and "contains invisible characters" not in html
    assert f"<dt>Subject</dt><dd>{subject}</dd>" in page


REVIEWER_TEXT = "ok\u202etxt.lave\u00a0\u3164 "  # a reversed span, a no-break space, a filler


def test_a_hand_over_note_is_shown_escaped_on_the_card_and_the_approval_page(interrupted_run, personas):
    from reviewdesk.approvals.lifecycle.handover import approval_handover

    _, approval = interrupted_run()
    approval_handover(approval_id=approval.id, by=personas.alice, to="bob", note=REVIEWER_TEXT)
    bob = logged_in(personas.bob)
    card = the_card(bob.get("/").content.decode(), approval)
    page = unescape(bob.get(f"/approvals/{approval.id}/").content.decode())
    assert "alice: “ok\\u202etxt.lave\\u00a0\\u3164 ”" in card
    assert 'by alice: “<span id="handover-note">ok\\u202etxt.lave\\u00a0\\u3164 </span>”' in page
    for html in (card, page):
        assert "\u202e" not in html and "\u3164" not in html


def test_a_decisions_reason_and_note_are_shown_escaped_where_the_desk_shows_them(interrupted_run, personas):
    from reviewdesk.approvals.deciding.record import approval_decide
    from reviewdesk.runs.execution import run_execute

    run, first = interrupted_run(TWO_EMAILS)
    approval_decide(
        approval_id=first.id,
        reviewer=personas.bob,
        verdict="reject",
        reason="reason " + REVIEWER_TEXT,
        note="note\ufe0f" + REVIEWER_TEXT,
        checkpoint_id=str(first.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="in-process")
    second = ApprovalRequest.objects.get(run=run, status="pending")
    alice = logged_in(personas.alice)
    decided = unescape(alice.get(f"/approvals/{first.id}/").content.decode())
    assert "<dd>reason ok\\u202etxt.lave\\u00a0\\u3164 </dd>" in decided
    assert "<dd>note\\ufe0fok\\u202etxt.lave\\u00a0\\u3164 </dd>" in decided
    earlier = unescape(alice.get(f"/approvals/{second.id}/").content.decode())
    assert "by bob: “reason ok\\u202etxt.lave\\u00a0\\u3164 ”" in earlier
    for html in (decided, earlier):
        assert "\u202e" not in html and "\ufe0f" not in html and "\u3164" not in html
