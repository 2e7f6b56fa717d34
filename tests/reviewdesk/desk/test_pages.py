"""The desk's pages: one card partial, JSON shown as JSON, and URLs the templates build."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.conf import settings
from django.template import Context, Template
from django.test import Client
from django.urls import reverse

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import RunStatus

pytestmark = pytest.mark.django_db

ZERO = "00000000-0000-0000-0000-000000000000"


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


class Skeleton(HTMLParser):
    """The first <li class="card"> from `start` on, as its elements' tag, classes and names in
    order, each with the kind of request it is for (its own or its nearest ancestor's
    data-for-kind): the shape of a card without its data."""

    VOID = ("input", "br")
    DATA = "data"

    def __init__(self, html: str, start: int) -> None:
        super().__init__()
        self.open: list[str | None] = []  # the for-kind of each open element
        self.done = False
        self.shape: list[tuple[str, str | None, str | None, str | None]] = []
        self.feed(html[start:])

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        is_card = tag == "li" and "card" in (attrs.get("class") or "").split()
        if self.done or not (self.open or is_card):
            return
        optional = next((name.removeprefix("data-") for name in attrs if name.startswith("data-if-")), None)
        kind = attrs.get("data-for-kind") or optional or (self.open[-1] if self.open else None)
        if kind != self.DATA:
            self.shape.append((tag, attrs.get("class"), attrs.get("name"), kind))
        # The summary's facts and warnings, its arguments' sources, the reading's concerns and a
        # question's options are lists of data: their items are the approval's, not the card's shape.
        if set((attrs.get("class") or "").split()) & {
            "facts",
            "warnings",
            "options",
            "provenance",
            "concerns",
        }:
            kind = self.DATA
        if tag not in self.VOID:
            self.open.append(kind)

    def handle_endtag(self, tag):
        if self.open and tag not in self.VOID:
            self.open.pop()
            self.done = not self.open


# The parts of the blank card a served card may lack: desk.js drops them for a call without them.
OPTIONAL_PARTS = (
    "reconcile",
    "question",
    "if-invisible",
    "if-quorum",
    "if-handover",
    "if-own-run",
    "if-risk",
    "if-device-key",
    "if-answer",
    # An external run's call: where it comes from, its framework's preview and limits.
    "if-external",
    "if-external-preview",
    "if-no-edit",
    "if-all-or-nothing",
    # Issue 38: where the arguments came from (or why that is not known), the second opinion.
    "if-provenance",
    "if-provenance-note",
    "if-reading",
    "if-reading-summary",
)


def test_the_live_template_is_the_server_card_left_blank(interrupted_run, personas):
    """desk.js clones #card-template; it must be the same markup as the cards the server renders."""
    interrupted_run()
    page = logged_in(personas.alice).get("/").content.decode()
    served = Skeleton(page, page.index('id="approvals"')).shape
    blank = Skeleton(page, page.index('id="card-template"')).shape
    assert served and blank
    # The blank card carries the reconcile form, the question's form, the invisible-characters flag, the quorum's
    # count, the hand-over note and the own-run note too; desk.js drops them for a plain tool call.
    # The queue's summary parts apply to a call whose preview says so: its risk line, its device-key note.
    present = {s[3] for s in served}
    assert [s for s in blank if s[3] not in OPTIONAL_PARTS or s[3] in present] == served
    assert {"if-quorum", "if-handover", "if-risk", "if-summary"} <= {s[3] for s in blank}
    assert any(s[3] == "reconcile" for s in blank)


def test_the_blank_card_holds_the_served_cards_sources_and_second_opinion(interrupted_run, personas):
    """A card with where its arguments came from and a ready reading: the same shape as the blank
    card's, the parts it does not have aside (desk_card.js fills the blank card for a live one)."""
    _, approval = interrupted_run()
    approval.provenance = {"sources": {"/to": [{"kind": "task", "match": "exact", "step": 1}]}, "flags": []}
    approval.reading = {
        "status": "ready",
        "model": "m",
        "risk": "medium",
        "summary": "Emails Ada.",
        "concerns": [{"about": "/to", "text": "t"}],
        "at": "2026-12-07T10:00:00Z",
    }
    approval.save()
    page = logged_in(personas.alice).get("/").content.decode()
    served = Skeleton(page, page.index('id="approvals"')).shape
    blank = Skeleton(page, page.index('id="card-template"')).shape
    present = {s[3] for s in served}
    assert {"if-provenance", "if-reading", "if-reading-summary"} <= present
    assert [s for s in blank if s[3] not in OPTIONAL_PARTS or s[3] in present] == served


def test_the_live_template_carries_the_url_patterns_desk_js_fills_in(interrupted_run, personas):
    run, approval = interrupted_run()
    page = logged_in(personas.alice).get("/").content.decode()
    template = re.search(r"<template [^>]*>", page).group(0)
    assert f'data-placeholder="{ZERO}"' in template
    run_url = re.search(r'data-run-url="([^"]+)"', template).group(1)
    approval_url = re.search(r'data-approval-url="([^"]+)"', template).group(1)
    assert run_url.replace(ZERO, str(run.id)) == reverse("run", args=[run.id]) == f"/runs/{run.id}/"
    assert approval_url.replace(ZERO, str(approval.id)) == f"/approvals/{approval.id}/"
    assert 'data-socket-path="/ws/desk/"' in page  # the socket's public path (DESIGN.md)


def test_a_card_shows_the_arguments_as_json_escaped(interrupted_run, personas):
    script = [
        {
            "tool_calls": [
                {
                    "name": "send_email",
                    "arguments": {
                        "to": "ada@example.com",
                        "subject": "Café",
                        "body": "<b>refund</b> & 'thanks'",
                    },
                }
            ]
        },
        {"content": "Done."},
    ]
    _, approval = interrupted_run(script=script)
    client = logged_in(personas.alice)
    # One key a line, indented, escaped. The key order is the database's: PostgreSQL's jsonb
    # keeps its own, SQLite the submitted one.
    lines = [
        "  &quot;to&quot;: &quot;ada@example.com&quot;",
        "  &quot;subject&quot;: &quot;Café&quot;",
        "  &quot;body&quot;: &quot;&lt;b&gt;refund&lt;/b&gt; &amp; &#x27;thanks&#x27;&quot;",
    ]
    desk = client.get("/").content.decode()
    args = re.search(r'<pre class="args">(\{\n.*?\n\})</pre>', desk, re.S).group(1)
    assert sorted(args.strip("{}\n").split(",\n")) == sorted(lines)
    edit_box = client.get(f"/approvals/{approval.id}/").content.decode()
    assert f">{args}</textarea>" in edit_box
    assert "<b>refund" not in desk + edit_box


def test_the_approval_page_shows_edited_arguments_as_json(interrupted_run, personas):
    _, approval = interrupted_run()
    edited = {**approval.arguments, "subject": "Refund issued"}
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="edit",
        arguments=edited,
        checkpoint_id=str(approval.checkpoint_id),
    )
    page = logged_in(personas.bob).get(f"/approvals/{approval.id}/").content.decode()
    assert "<dt>Approved arguments</dt>" in page
    assert "&quot;subject&quot;: &quot;Refund issued&quot;" in page
    assert "{&#x27;" not in page  # no Python dict repr


def test_the_run_page_shows_the_conversation_as_roles_text_and_json(interrupted_run, personas):
    run, approval = interrupted_run()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    page = logged_in(personas.carol).get(f"/runs/{run.id}/").content.decode()
    log = page[page.index('<ol class="log">') :]
    roles = re.findall(r'<strong class="role">(\w+)</strong>', log)
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert '<p class="text">Tell Ada her refund is on its way.</p>' in log
    assert '<p class="text">Emailed Ada.</p>' in log
    # The model's call, its arguments (JSON text) re-indented as JSON.
    assert '<code class="tool">send_email</code> <span class="call-id">call_0_1</span>' in log
    assert re.search(r"\n  &quot;subject&quot;: &quot;Your refund&quot;,?\n", log)
    # A tool's result (JSON text) as JSON, with the call it answers.
    assert "result of <code>call_0_0</code>" in log
    assert re.search(r"\n  &quot;name&quot;: &quot;Ada Lovelace&quot;,?\n", log)
    assert "&#x27;role&#x27;" not in log and "{&#x27;" not in log  # no Python dict repr


def test_the_audit_page_shows_event_data_as_json(interrupted_run, personas):
    interrupted_run()
    page = logged_in(personas.admin).get("/audit/").content.decode()
    assert '<pre class="json">{\n  &quot;agent&quot;: &quot;demo&quot;\n}</pre>' in page
    assert "{&#x27;" not in page


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (
            {"b": "<i>", "a": "é"},
            "{\n  &quot;b&quot;: &quot;&lt;i&gt;&quot;,\n  &quot;a&quot;: &quot;é&quot;\n}",
        ),
        ([1, None, True], "[\n  1,\n  null,\n  true\n]"),
        ("text", "&quot;text&quot;"),
    ],
    ids=["object keeps its order and is escaped", "list", "string"],
)
def test_pretty_json_writes_json_and_the_page_escapes_it(value, shown):
    assert Template("{% load desk_json %}{{ v|pretty_json }}").render(Context({"v": value})) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('{"ok":true,"n":[1]}', "{\n  &quot;ok&quot;: true,\n  &quot;n&quot;: [\n    1\n  ]\n}"),
        ("{not json <x>", "{not json &lt;x&gt;"),
    ],
    ids=["JSON text is re-indented", "anything else is shown as written"],
)
def test_pretty_json_text_reindents_json_and_leaves_other_text(text, shown):
    assert Template("{% load desk_json %}{{ t|pretty_json_text }}").render(Context({"t": text})) == shown


def test_no_template_or_script_spells_a_path_or_prints_a_repr():
    """Paths come from `{% url %}` (and, for desk.js, from the patterns the page hands it)."""
    root = Path(settings.BASE_DIR)
    offenders = []
    for path in sorted((root / "templates").rglob("*.html")):
        text = path.read_text()
        for pattern in (r'(href|action|value|src)="/', r"\|pprint", r"fetch\(\s*[\"'`]/"):
            offenders += [f"{path.relative_to(root)}: {m.group(0)}" for m in re.finditer(pattern, text)]
    for path in sorted((root / "static").rglob("*.js")):
        offenders += [
            f"{path.relative_to(root)}: {m.group(0)}" for m in re.finditer(r"[\"'`]/", path.read_text())
        ]
    assert offenders == []
