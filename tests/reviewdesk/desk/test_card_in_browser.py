"""In headless Chromium: the card desk.js builds from the template is the card the server renders.

The desk page comes from Django's test client; Chromium gets it, desk.js and a
stand-in socket that answers with a snapshot of the same approvals. desk.js then
replaces every server card with one cloned from #card-template, so the two can be
compared element by element. No server process runs here; tests/e2e covers the
live socket. A decision the page posts is recorded and answered with a stand-in of what
the approval's page sends desk.js.

The cards' approve/reject buttons are served disabled and armed by desk.js, the batch pick
by batch.js: tested here with the script held back (404), as a script not run yet.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.test import Client
from playwright.sync_api import expect

from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import Verdict
from reviewdesk.approvals.reads.queue import QueueFilters, queue_matches, queue_sort_key
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.desk.cards import desk_view
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.services import run_submit
from tests.conftest import SEND_EMAIL_SCRIPT, make_user
from tests.reviewdesk.desk.chromium import desk_scripts, routed_page

pytestmark = pytest.mark.e2e

ORIGIN = "http://desk.test"

# Replaces WebSocket before desk.js runs: records where it connects, marks the server's
# cards (a mark that survives only if desk.js fails to replace them), sends the snapshot and
# then the pushes, if any (no snapshot: a socket that has not answered yet).
FAKE_SOCKET = """
window.__socketUrls = [];
window.WebSocket = class {
  constructor(url) {
    window.__socketUrls.push(url);
    window.__socket = this; // a test pushes more through it later
    if (window.__snapshot) document.querySelectorAll("li.card").forEach((card) => { card.dataset.fromServer = "yes"; });
    this.readyState = 1;
    setTimeout(() => {
      this.onopen();
      if (window.__snapshot) this.onmessage({ data: JSON.stringify(window.__snapshot) });
      (window.__pushes || []).forEach((push) => this.onmessage({ data: JSON.stringify(push) }));
      window.__socketSent = true;
    }, 0);
  }
  send(text) {
    (window.__sent = window.__sent || []).push(JSON.parse(text)); // what the page asked the server
  }
};
window.WebSocket.OPEN = 1;
"""

# An element as data: tag, attributes (form fields by their current value; the CSRF token,
# masked afresh at every render, left out), its own text, then its children. What desk.js
# keeps moving on every card alike (the countdown, the selection mark) is left out.
SHAPE = """
(root) => {
  const shape = (el) => {
    const attrs = {};
    for (const a of el.attributes) if (a.name !== "aria-current") attrs[a.name] = a.value;
    if (el.classList.contains("countdown")) return [el.tagName.toLowerCase(), {}, "", []];
    if (el.tagName === "INPUT") {
      if (el.name === "csrfmiddlewaretoken") delete attrs.value;
      else attrs.value = el.value;
    }
    const text = [...el.childNodes].filter((n) => n.nodeType === 3)
      .map((n) => n.textContent.replace(/\\s+/g, " ").trim()).filter(Boolean).join(" ");
    return [el.tagName.toLowerCase(), attrs, text, [...el.children].map(shape)];
  };
  return [...root.querySelectorAll("li.card")].map(shape);
}
"""


def armed(cards: list) -> int:
    """Arm the controls that wait for a script (data-arm) in these card shapes, as desk.js and
    batch.js do, asserting that each was served disabled: how many there were."""

    def arm(shape) -> int:
        _, attrs, _, children = shape
        count = 0
        if "data-arm" in attrs:
            assert "disabled" in attrs, attrs
            del attrs["disabled"]
            count = 1
        return count + sum(arm(child) for child in children)

    return sum(arm(card) for card in cards)


DESK_SCRIPTS = (
    "shown.js",
    "time.js",
    "schema.js",
    "dialog.js",
    "desk_card.js",
    "desk_decide.js",
    "desk_keys.js",
    "desk.js",
    "edit.js",
    "batch.js",
    "nav.js",
)
NO_FILTERS = QueueFilters()
# What `/approvals/ID/card` answers the page: the desk's view of each approval a test sent it,
# worked out before it is asked (Playwright answers a route from an async context, where Django
# reads no database). Filled by `as_sent`, emptied for each page.
CARD_VIEWS: dict[str, dict] = {}


def as_sent(message: dict | None, username: str = "bob", filters: QueueFilters = NO_FILTERS) -> dict | None:
    """A socket message as the desk page's socket sends it to `username` (desk/consumers.py):
    a snapshot's approvals with the desk's view of each (its preview's summary, its place in the
    queue); an approval event's data with its place and whether it passes the page's `filters`."""
    if message is None:
        return None
    data = message.get("data")
    if message["type"] == "snapshot":
        approvals = [{**a, "desk": desk_view(a, username=username)} for a in data["approvals"]]
        return {**message, "data": {**data, "approvals": approvals}}
    if message["type"].startswith("approval.") and data and "desk" not in data:
        CARD_VIEWS[data["id"]] = desk_view(data, username=username)
        placed = {
            "sort_key": queue_sort_key(data, username),
            "matches": queue_matches(data, filters, username),
        }
        return {**message, "data": {**data, "desk": placed}}
    return message


@contextmanager
def desk_in_chromium(
    html: str,
    snapshot: dict | None,
    pushes: list[dict] | None = None,
    *,
    held_back: str | None = None,
    answer: tuple[int, dict] = (500, {}),
    posted: list | None = None,
    username: str = "bob",
    filters: QueueFilters = NO_FILTERS,
) -> Iterator:
    """The desk page `html` with desk.js, its socket a stand-in that sends `snapshot` (None:
    nothing yet) then `pushes`, each as the socket sends it to `username` (`as_sent`): the page
    once all of them are applied. `held_back` is never served. A POST is answered with `answer`
    (status, JSON), as the approval's page answers desk.js, and added to `posted` as (path,
    Accept, body). A card's view (`/approvals/ID/card`) is the server's, from the database."""
    posted = [] if posted is None else posted
    files = {f"{ORIGIN}/": (html, "text/html")}
    files.update(desk_scripts(ORIGIN, DESK_SCRIPTS, held_back=held_back))
    CARD_VIEWS.clear()
    snapshot = as_sent(snapshot, username, filters)
    pushes = [as_sent(p, username, filters) for p in pushes or []]

    def serve(route) -> None:
        request = route.request
        card = re.fullmatch(rf"{ORIGIN}/approvals/([0-9a-f-]+)/card", request.url)
        if request.method == "GET" and card:
            # Only a pushed approval's view is worked out: the others (the snapshot's, the
            # server's cards, read for the selected card's "why the agent asks") answer 404.
            view = CARD_VIEWS.get(card.group(1))
            if view is None:
                route.fulfill(status=404, json={"detail": "no such approval"})
            else:
                route.fulfill(json={"id": card.group(1), "desk": view})
            return
        if request.method == "POST":  # the desk's side of a decision: `answer`, as JSON
            path = request.url.removeprefix(ORIGIN)
            posted.append((path, request.headers.get("accept", ""), request.post_data or ""))
            if isinstance(answer[1], str):  # a page, as Django's 404 or a login redirect answers
                route.fulfill(status=answer[0], body=answer[1], content_type="text/html")
            else:
                route.fulfill(status=answer[0], json=answer[1])
            return
        body, content_type = files.get(request.url, ("", "text/plain"))
        route.fulfill(body=body, content_type=content_type, status=200 if body else 404)

    init = f"window.__snapshot = {json.dumps(snapshot)}; window.__pushes = {json.dumps(pushes)};"
    with routed_page(ORIGIN, serve, init=init + FAKE_SOCKET) as page:
        if held_back is None:
            page.wait_for_function("window.__socketSent === true")
        yield page


def test_desk_js_builds_the_card_the_server_renders_for_each_kind(pending, personas):
    approvals = [pending("tool_call"), pending("reconcile")]
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": [approval_data(a) for a in approvals]}}
    # What the server rendered, before desk.js touches it.
    with desk_in_chromium(html, snapshot) as page:
        served = page.evaluate(
            f"(html) => ({SHAPE})(new DOMParser().parseFromString(html, 'text/html'))", html
        )
        built = page.evaluate(SHAPE, page.query_selector("#approvals"))
        socket_urls = page.evaluate("window.__socketUrls")

    assert [card[1]["data-kind"] for card in served] == ["tool_call", "reconcile"]
    # The server's cards wait, disabled, for desk.js and batch.js; the cards built are armed:
    # the batch pick, "all of this run", Approve, Reject and Edit; Mark done, Re-run and Reject.
    assert armed(served) == 2 + 3 + 3
    assert built == served
    assert socket_urls == ["ws://desk.test/ws/desk/?events=approvals"]  # approval events only


def test_an_approval_pushed_onto_an_empty_desk_is_the_selected_card(pending, personas):
    """The keys act on the selected card: one that arrives while the queue is empty must be it,
    as the first card is when the page or its snapshot draws the queue. (A test that pressed `o`
    just after its run's card arrived waited forever when the card came by push.)"""
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()  # nothing pending yet
    approval = approval_data(pending("tool_call"))
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": []}}
    pushed = {"seq": 1, "type": "approval.created", "data": approval}
    with desk_in_chromium(html, snapshot, [pushed]) as page:
        card = page.locator(f"li.card[data-approval-id='{approval['id']}']")
        expect(card).to_have_attribute("aria-current", "true")
        expect(card.locator("button.approve")).to_be_enabled()


DECISION_BUTTONS = (
    "li.card[data-kind=tool_call] button.approve",
    "li.card[data-kind=tool_call] button.reject",
    "li.card[data-kind=reconcile] button.approve",
    "li.card[data-kind=reconcile] button[value=rerun]",
    "li.card[data-kind=reconcile] button.reject",
)


BATCH_CONTROLS = ("li.card input.batch-pick", "li.card button.pick-run")


def test_before_batch_js_the_batch_pick_waits(pending, personas):
    """A box ticked before batch.js was unticked when batch.js drew the selection (the pick
    lost, silently): the batch controls wait for batch.js, as the decision buttons for desk.js."""
    pending("tool_call")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    with desk_in_chromium(html, None, held_back="batch.js") as page:
        for control in BATCH_CONTROLS:
            expect(page.locator(control)).to_be_disabled()
        expect(page.locator("li.card button.approve")).to_be_enabled()  # desk.js's own
    with desk_in_chromium(html, None) as page:
        for control in BATCH_CONTROLS:
            expect(page.locator(control)).to_be_enabled()
        page.locator("li.card input.batch-pick").check()
        expect(page.locator("#batch-count")).to_have_text("1 selected")


def test_before_desk_js_a_card_posts_nothing(pending, personas):
    """Before desk.js holds the page, a card's buttons posted their form natively: send_email
    (irreversible) approved on a click with no confirmation, Enter in the reason typed for a
    rejection approved it, and Enter in a reconcile's reference marked it done, unconfirmed.
    Now they wait, disabled."""
    pending("tool_call")
    pending("reconcile")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    posted: list = []
    with desk_in_chromium(html, None, held_back="desk.js", posted=posted) as page:
        for field in (
            "li.card[data-kind=tool_call] input[name=reason]",
            "li.card[data-kind=reconcile] input[name=external_ref]",
        ):
            page.locator(field).fill("not this one")
            page.locator(field).press("Enter")
            page.wait_for_load_state()
            assert posted == [], field  # natively: verdict=approve (or confirm), and a page load
        page.locator("li.card[data-kind=tool_call] button.approve").click(force=True)
        page.wait_for_load_state()
        assert posted == []
        for button in DECISION_BUTTONS + BATCH_CONTROLS:  # batch.js needs desk.js
            expect(page.locator(button)).to_be_disabled()


APPROVED = (200, {"decided": True, "detail": "Approved send_email for run …."})


def test_desk_js_arms_the_server_cards_and_decides_in_place(pending, personas):
    """desk.js enables the server's cards before its socket answers: Enter in the reason posts
    nothing, and Approve on an ordinary send_email (no warning in its preview) decides in place
    at once: neither the browser's confirm nor a page dialog asks first (issue 35, item 7)."""
    approval = pending("tool_call")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    posted: list = []
    asked: list[str] = []
    with desk_in_chromium(html, None, answer=APPROVED, posted=posted) as page:
        page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
        card = page.locator(f"li.card[data-approval-id='{approval.id}']")
        reason = card.locator("input[name=reason]")
        reason.fill("not this one")
        reason.press("Enter")  # without `r` first: nothing, rather than the form's Approve
        card.locator("button.approve").click()
        expect(card).to_have_count(0)  # decided in place: the card leaves the queue
        expect(page.locator("dialog#confirm")).not_to_be_visible()
    assert asked == []
    [(path, accept, body)] = posted
    assert (path, accept) == (f"/approvals/{approval.id}/", "application/json")
    assert 'name="verdict"\r\n\r\napprove\r\n' in body


def test_a_card_refused_as_decided_elsewhere_stays_off(pending, personas):
    """alice decided the call after bob's page drew it, and no event has told his page yet: his
    Approve is refused, and the card's buttons (and its keys) stay off rather than offer a
    decision that can no longer be made."""
    approval = pending("tool_call")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    # What the approval's page answers then (tests/reviewdesk/desk/test_batch_refusals.py).
    refused = (
        409,
        {
            "decided": False,
            "detail": "Not decided: this approval was already rejected by alice",
            "code": "decided",
        },
    )
    posted: list = []
    with desk_in_chromium(html, None, answer=refused, posted=posted) as page:
        page.on("dialog", lambda dialog: dialog.accept())
        card = page.locator(f"li.card[data-approval-id='{approval.id}']")
        card.locator("button.approve").click()
        expect(page.locator("#notices .flash.error")).to_contain_text("already rejected by alice")
        expect(card.locator("button.approve")).to_be_disabled()
        expect(card.locator("button.reject")).to_be_disabled()
        page.keyboard.press("a")  # the selected card: a key acts on armed buttons only
        page.keyboard.press("r")  # and a reason sent with Enter: a reject by the keys, not posted
        page.keyboard.type("too late")
        page.keyboard.press("Enter")
        page.wait_for_timeout(500)
        expect(page.locator("#notices .flash")).to_have_count(1)
    assert len(posted) == 1


def test_a_push_for_the_card_being_typed_in_keeps_the_reason_and_its_focus(pending, personas):
    """bob pressed `r` and is typing a reason when a push redraws that card (a colleague's vote,
    a hand-over note, a reconnect's snapshot): desk.js replaced the card, so the reason typed so
    far vanished and the focus moved to the card itself, where the rest of the reason was read as
    keys: the `a` of "amount" approved the call he meant to reject."""
    approval = pending("tool_call")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    data = approval_data(approval)
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": [data]}}
    pushes = [
        {"seq": 1, "type": "approval.updated", "data": data},
        {"seq": 2, "type": "snapshot", "data": {"approvals": [data]}},
    ]
    posted: list = []
    with desk_in_chromium(html, snapshot, answer=APPROVED, posted=posted) as page:
        page.on("dialog", lambda dialog: dialog.accept())
        page.keyboard.press("r")
        page.keyboard.type("wrong ")
        for message in pushes:
            push(page, message)
            page.keyboard.type("amount ")
        reason = page.locator(f"li.card[data-approval-id='{approval.id}'] input[name=reason]")
        expect(reason).to_have_value("wrong amount amount ")
        expect(reason).to_be_focused()
        page.keyboard.press("Enter")  # still a reject: the `r` survived the redraw
        expect(page.locator("#notices .flash.success")).to_have_count(1)
    [(_, _, body)] = posted
    assert 'name="verdict"\r\n\r\nreject\r\n' in body
    assert "wrong amount amount" in body


def test_keys_typed_for_a_card_decided_elsewhere_do_not_act_on_the_next(pending, personas):
    """bob pressed `r` and is typing a reason when alice rejects that call: its card left, the
    focus went to the next card, and the rest of his reason was read as keys there: the `a` of
    "amount" approved a call he had not looked at, and its `o` opened another. Keys typed on
    straight after stay off; after a pause they act again."""
    first, second = pending("tool_call"), pending("tool_call")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    snapshot = {
        "seq": 0,
        "type": "snapshot",
        "data": {"approvals": [approval_data(first), approval_data(second)]},
    }
    approval_decide(
        approval_id=first.id,
        reviewer=personas.alice,
        verdict=Verdict.REJECT,
        reason="no",
        checkpoint_id=str(first.checkpoint_id),
    )
    first.refresh_from_db()
    rejected = {"seq": 1, "type": "approval.updated", "data": approval_data(first)}
    posted: list = []
    with desk_in_chromium(html, snapshot, answer=APPROVED, posted=posted) as page:
        page.on("dialog", lambda dialog: dialog.accept())
        expect(page.locator("li.card").first).to_have_attribute("data-approval-id", str(first.id))
        page.keyboard.press("r")
        page.keyboard.type("wrong ")
        push(page, rejected)
        page.keyboard.type("amount, check it", delay=50)
        page.wait_for_timeout(300)
        assert posted == []
        assert page.url == f"{ORIGIN}/"
        nxt = page.locator(f"li.card[data-approval-id='{second.id}']")
        expect(nxt).to_have_attribute("aria-current", "true")
        page.wait_for_timeout(1200)  # a pause: the keys are the reviewer's again
        page.keyboard.press("j")
        page.keyboard.press("r")
        expect(nxt.locator("input[name=reason]")).to_be_focused()


def test_an_event_older_than_the_snapshot_does_not_bring_back_a_card_it_left_out(pending, personas):
    """The snapshot is read after its seq, so it is newer than every event up to that seq: the
    replay that follows it (from the page's own seq) only says why cards left. Drawn, such an
    event brought back what the snapshot left out for a reason no event tells: a call of a group
    bob has left since, there for good and refused with a 404 when he tried it."""
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    page_seq = int(html.split('data-seq="')[1].split('"')[0])
    gone = approval_data(pending("tool_call"))  # pushed, when bob was in its group, before the snapshot
    snapshot = {"seq": page_seq + 5, "type": "snapshot", "data": {"approvals": []}}
    replayed = [
        {"seq": page_seq + 2, "type": "approval.created", "data": gone},
        {"seq": page_seq + 5, "type": "replay.done", "data": {"after": page_seq, "more": False}},
    ]
    with desk_in_chromium(html, snapshot, replayed) as page:
        page.wait_for_timeout(200)
        expect(page.locator("li.card")).to_have_count(0)
        expect(page.locator("#empty")).to_be_visible()
        expect(page.locator("#count")).to_have_text("0")


def test_a_batch_item_answered_with_a_page_rather_than_json_says_why(pending, personas):
    """A call handed over to another group while it waited in bob's batch is no longer his to see:
    its page answers 404, Django's HTML page, and a session that ended sends him to log in. desk.js
    read those pages as JSON and reported the item as "the desk did not answer (Unexpected token
    '<' ...)": it did answer, and bob was told neither why nor what to do."""
    approval = pending("tool_call")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    not_found = client.post(f"/approvals/{uuid.uuid4()}/", HTTP_ACCEPT="application/json")
    assert not_found.status_code == 404 and not not_found["Content-Type"].startswith("application/json")
    with desk_in_chromium(html, None, answer=(404, not_found.content.decode())) as page:
        page.locator(f"li.card[data-approval-id='{approval.id}'] input.batch-pick").check()
        page.locator("#batch-reject").click()
        error = page.locator("#notices .flash.error")
        expect(error).to_contain_text("0 rejected, 1 refused: send_email (run ")
        expect(error).to_contain_text("no longer yours to see")
        expect(error).not_to_contain_text("Unexpected token")


@pytest.mark.parametrize(
    ("assignee", "targets", "kept"),
    [
        ("group:finance", ["group:finance"], True),  # the server lists it: it names the group
        ("bob", ["group:finance"], False),  # the server does not: it names bob only through a group
        ("bob", ["bob"], True),
    ],
    ids=["a group's calls", "not a group member's", "a reviewer's by name"],
)
def test_a_live_call_joins_a_page_filtered_by_assignee_as_the_server_filters(
    pending, personas, assignee, targets, kept
):
    """`?assignee=NAME` keeps the calls whose targets name NAME (a username or group:NAME), as
    the server's queue reads them; desk.js compared NAME with the usernames the targets reach,
    so a new call for group:finance never joined the finance page (dropped, not even counted as
    on another page), and a call for the group joined a member's page, which the server's would not."""
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/", {"assignee": assignee}).content.decode()
    data = approval_data(pending("tool_call"))
    data["reviewer"] = {"targets": targets, "users": ["bob"]}
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": []}}
    created = {"seq": 1, "type": "approval.created", "data": data}
    with desk_in_chromium(html, snapshot, [created], filters=QueueFilters(assignee=assignee)) as page:
        expect(page.locator("li.card")).to_have_count(1 if kept else 0)


def test_a_card_that_no_longer_matches_the_pages_filter_leaves_it(pending, personas):
    """bob's page shows the calls open to any reviewer (?assignee=any); alice hands one over to
    group:finance, bob's group. It is still bob's, but the server's page no longer lists it:
    desk.js redrew it in place, under a filter it no longer matched, until a reload."""
    approval = pending("tool_call")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/", {"assignee": "any"}).content.decode()
    data = approval_data(approval)
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": [data]}}
    handed = {
        **data,
        "reviewer": {"targets": ["group:finance"], "users": ["bob"]},
        "handover": {"by": "alice", "at": data["created_at"], "note": ""},
    }
    with desk_in_chromium(html, snapshot) as page:
        expect(page.locator("li.card")).to_have_count(1)
        push(
            page, {"seq": 1, "type": "approval.updated", "data": handed}, filters=QueueFilters(assignee="any")
        )
        expect(page.locator("li.card")).to_have_count(0)
        expect(page.locator("#notices")).to_contain_text("handed over by alice")


COLOUR_QUESTION = [
    {
        "tool_calls": [
            {"name": "ask_human", "arguments": {"question": "Which colour?", "options": ["red", "blue"]}}
        ]
    },
    {"content": "Thanks."},
]


def test_r_on_a_question_card_says_how_to_answer_it_and_throws_nothing(interrupted_run, personas):
    """`r` focuses the reject reason, but a question card has neither a reason field nor a
    reject: desk.js threw (a null `.focus()`), nothing happened, and the `r` intent stayed on the
    card; `a` did nothing, silently. Now both say how a question is answered, and decide nothing."""
    _, question = interrupted_run(COLOUR_QUESTION)
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": [approval_data(question)]}}
    errors: list[str] = []
    posted: list = []
    with desk_in_chromium(html, snapshot, answer=APPROVED, posted=posted) as page:
        page.on("pageerror", lambda error: errors.append(str(error)))
        card = page.locator(f"li.card[data-approval-id='{question.id}']")
        expect(card).to_have_attribute("aria-current", "true")
        page.keyboard.press("r")
        expect(page.locator("#notices .flash.info")).to_contain_text("A question is answered, not rejected")
        expect(card).not_to_have_attribute("data-intent", "reject")
        page.keyboard.press("Enter")
        page.keyboard.press("a")  # a question's `a` answers: its options take their numbers
        expect(page.locator("#notices .flash.info").first).to_contain_text(
            "Pick an option with its number (1"
        )
        page.wait_for_timeout(300)
    assert errors == []
    assert posted == []


def test_a_reviewer_who_submitted_the_run_is_offered_no_decision_on_its_calls(personas):
    """dave reviews and submits. His own run's call is on his desk (he may follow it), but the
    server refuses him its decision (never the submitter): his card offered Approve, Reject and
    the batch pick anyway, each refused with a 403 once clicked. The card, served or built from a
    push, says he cannot decide it and offers nothing that would be refused; `a` says why."""
    dave = make_user("dave", REVIEWERS, SUBMITTERS)
    run = run_submit(
        submitter=dave,
        agent="demo",
        input="Tell Ada her refund is on its way.",
        model={"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
    )
    run_execute(run_id=run.id, worker="in-process")
    own = run.approvals.get()
    client = Client()
    client.force_login(dave)
    html = client.get("/").content.decode()
    data = approval_data(own)
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": [data]}}
    posted: list = []
    with desk_in_chromium(html, snapshot, answer=APPROVED, posted=posted) as page:
        served = page.evaluate(
            f"(html) => ({SHAPE})(new DOMParser().parseFromString(html, 'text/html'))", html
        )
        built = page.evaluate(SHAPE, page.query_selector("#approvals"))
        card = page.locator(f"li.card[data-approval-id='{own.id}']")
        expect(card.locator(".own-run")).to_contain_text("You submitted this run")
        expect(card.locator("button, input:not([type=hidden])")).to_have_count(0)
        page.keyboard.press("a")
        page.keyboard.press("r")
        page.keyboard.press("x")
        expect(page.locator("#notices .flash.info").first).to_contain_text("You submitted this run")
        expect(page.locator("#batch")).to_be_hidden()
        page.wait_for_timeout(300)
    assert armed(served) == 0  # nothing served that waits to be armed: nothing to click
    assert built == served
    assert posted == []
    # What a click would have met: the server's rule, which the card now follows.
    body = {"verdict": "approve", "checkpoint_id": str(own.checkpoint_id)}
    assert client.post(f"/approvals/{own.id}/", body, HTTP_ACCEPT="application/json").status_code == 403


@pytest.mark.parametrize(
    "written",
    [
        lambda run: run.hex,
        lambda run: "{" + str(run) + "}",
        lambda run: f"urn:uuid:{run}",
        lambda run: str(run).upper(),
    ],
    ids=["without hyphens", "in braces", "as a urn", "in capitals"],
)
def test_a_live_call_joins_a_page_filtered_by_its_run_however_the_id_is_written(
    interrupted_run, personas, written
):
    """`?run=` takes the id as Python's UUID reads it, so the server's page kept the run's calls
    for an id without hyphens, in braces or as `urn:uuid:`; desk.js compared the text as typed
    (lowercased) with the call's run, so a live call of that run never joined the page (nor was
    counted as on another). The page writes the id once, as the queue reads it, for both."""
    run, approval = interrupted_run()
    _, elsewhere = interrupted_run()
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/", {"run": written(run.id)}).content.decode()
    assert f'data-approval-id="{approval.id}"' in html  # the server's page keeps it
    assert f'data-approval-id="{elsewhere.id}"' not in html
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": []}}
    pushes = [
        {"seq": 1, "type": "approval.created", "data": approval_data(elsewhere)},
        {"seq": 2, "type": "approval.created", "data": approval_data(approval)},
    ]
    with desk_in_chromium(html, snapshot, pushes, filters=QueueFilters(run=str(run.id))) as page:
        expect(page.locator("li.card")).to_have_count(1)
        expect(page.locator("li.card")).to_have_attribute("data-approval-id", str(approval.id))


def push(page, message: dict, username: str = "bob", filters: QueueFilters = NO_FILTERS) -> None:
    message = as_sent(message, username, filters)
    page.evaluate("(sent) => window.__socket.onmessage({ data: JSON.stringify(sent) })", message)


def test_a_card_handed_over_to_me_moves_where_the_server_sorts_it(pending, personas):
    """Two calls open to every reviewer, the sooner to expire first; alice hands the later one
    to bob by name. The server's queue now lists it first (named me, then my groups', then the
    rest): bob's page redrew it where it was, second, until a reload."""
    sooner, later = pending("tool_call"), pending("tool_call")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    data = [approval_data(sooner), approval_data(later)]
    assert data[0]["expires_at"] <= data[1]["expires_at"]
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": data, "total": 2}}
    handed = {
        **data[1],
        "reviewer": {"targets": ["bob"], "users": ["bob"]},
        "handover": {"by": "alice", "at": data[1]["created_at"], "note": ""},
    }
    with desk_in_chromium(html, snapshot) as page:
        cards = page.locator("li.card")
        expect(cards.first).to_have_attribute("data-approval-id", str(sooner.id))
        push(page, {"seq": 1, "type": "approval.updated", "data": handed})
        expect(cards.first).to_have_attribute("data-approval-id", str(later.id))
        expect(cards).to_have_count(2)
        expect(page.locator("#count")).to_have_text("2")  # it was in the count, and still is


@pytest.mark.parametrize("how", ["handed over", "escalated"])
def test_a_call_that_reaches_me_from_elsewhere_is_counted_as_the_server_counts(pending, personas, how):
    """A call this page has never seen arrives as an update, handed over or escalated to bob: it
    may have been his all along (on another page, in the count) or have just become his (not in
    it), and the event cannot say which. desk.js took it as already counted: the count stayed
    where it was. It now asks the socket for a fresh snapshot, whose count is the server's."""
    mine = pending("tool_call")
    other = pending("tool_call")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    data = approval_data(other)
    arrived = {**data, "reviewer": {"targets": ["alice", "bob"], "users": ["alice", "bob"]}}
    if how == "handed over":
        arrived["handover"] = {"by": "carol", "at": data["created_at"], "note": ""}
    else:
        arrived["escalation_level"] = 1
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": [approval_data(mine)], "total": 1}}
    fresh = {"seq": 1, "type": "snapshot", "data": {"approvals": [approval_data(mine), arrived], "total": 2}}
    with desk_in_chromium(html, snapshot) as page:
        expect(page.locator("#count")).to_have_text("1")
        push(page, {"seq": 1, "type": "approval.updated", "data": arrived})
        page.wait_for_function("(window.__sent || []).some((m) => m.type === 'snapshot')", timeout=5_000)
        push(page, fresh)
        expect(page.locator("#count")).to_have_text("2")
        expect(page.locator("li.card")).to_have_count(2)


def test_a_card_with_lookalike_characters_and_a_hand_over_note_is_escaped_alike_by_desk_js(
    interrupted_run, personas
):
    """A variation selector, a Hangul filler, a no-break space and a trailing space in the
    arguments, and a reversed span in the hand-over note: the card desk.js builds shows each
    escaped, exactly as the server's card does."""
    from reviewdesk.approvals.lifecycle.handover import approval_handover

    subject = "Your\u00a0refund\ufe0f is\u3164here "
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
    _, approval = interrupted_run(script)
    approval = approval_handover(approval_id=approval.id, by=personas.alice, to="bob", note="fine\u202etxt")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": [approval_data(approval)]}}
    with desk_in_chromium(html, snapshot) as page:
        served = page.evaluate(
            f"(html) => ({SHAPE})(new DOMParser().parseFromString(html, 'text/html'))", html
        )
        built = page.evaluate(SHAPE, page.query_selector("#approvals"))
        card = page.locator(f"li.card[data-approval-id='{approval.id}']")
        args = card.locator(".args").text_content()
        handover = card.locator(".handover").text_content()
    armed(served)
    assert built == served
    assert '"subject": "Your\\u00a0refund\\ufe0f is\\u3164here\\u0020"' in args
    assert handover == "alice: “fine\\u202etxt”"


def test_an_open_editor_keeps_what_was_typed_and_its_caret_when_its_card_is_drawn_again(pending, personas):
    """bob pressed `e` and is typing in the editor when a push draws the card again (a colleague's
    note, a snapshot, the preview read anew): the editor, a form of fields without names, vanished
    with what he had typed, and the rest of his typing went to the desk's keys. It moves into the
    new card whole, with its focus, and Enter signs the edit from there."""
    approval = pending("tool_call")
    client = Client()
    client.force_login(personas.bob)
    html = client.get("/").content.decode()
    data = approval_data(approval)
    snapshot = {"seq": 0, "type": "snapshot", "data": {"approvals": [data]}}
    posted: list = []
    with desk_in_chromium(html, snapshot, answer=APPROVED, posted=posted) as page:
        card = page.locator(f"li.card[data-approval-id='{approval.id}']")
        expect(card).to_have_attribute("data-summary", "ready")
        page.keyboard.press("e")
        first = card.locator("form.edit-form [data-name=to]")
        expect(first).to_be_focused()  # the caret in the first field: typing is no shortcut
        page.keyboard.type("m")
        push(page, {"seq": 1, "type": "approval.updated", "data": data})
        expect(card).to_have_attribute("data-summary", "ready")  # drawn twice: the event, the preview
        expect(card.locator("form.edit-form")).to_have_count(1)
        expect(first).to_have_value("ada@example.comm")
        expect(first).to_be_focused()
        page.keyboard.type("o")  # an `o` opened the card's page when the typing lost its field
        page.keyboard.press("Enter")
        expect(page.locator("#notices .flash.success")).to_have_count(1)
    [(_, _, body)] = posted
    assert 'name="verdict"\r\n\r\nedit\r\n' in body
    assert '"to":"ada@example.commo"' in body
