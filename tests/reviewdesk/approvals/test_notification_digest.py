"""Each reviewer's digest, the mails sent at once, and the settings page where a reviewer
chooses between them (approvals/lifecycle/notify.py, accounts/preferences.py).

In-process, on the database. The tests named for beat's ticks enqueue `approvals.tick` and
`approvals.digest` on the real Redis queue, and a Celery worker in a thread of this process (the
webhook tests' `celery_worker`) runs them; the others call the services as the tasks do. Mail is
Django's locmem outbox (`mailoutbox`), which the worker's thread shares, as in the other
notification tests (test_clock_and_notify.py)."""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta

import pytest
from celery import signals
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from reviewdesk.accounts.models import NotificationPreference
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.lifecycle import digest
from reviewdesk.approvals.lifecycle.digest import digest_items, digest_send, digests_send
from reviewdesk.approvals.lifecycle.notify import approvals_notify, expiring_due, expiring_send
from reviewdesk.approvals.models import ApprovalRequest, NotificationSent
from reviewdesk.approvals.tasks import approvals_tick
from reviewdesk.audit.models import AuditEvent
from reviewdesk.celery import app as celery_app
from reviewdesk.runs.models import Run, RunStatus
from reviewdesk.runs.services import run_submit
from tests.reviewdesk.approvals.conftest import asking
from tests.reviewdesk.webhooks.conftest import celery_worker  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db(transaction=True)

LINK = re.compile(r"http://desk\.test/approvals/link/[^/\s]+/")


@pytest.fixture(autouse=True)
def mail_on(settings):
    settings.DESK_NOTIFY_EMAIL = True
    settings.DESK_PUBLIC_URL = "http://desk.test"
    settings.DESK_NOTIFY_DIGEST_MINUTES = 5


def emails(count: int) -> list[dict]:
    return [
        {
            "name": "send_email",
            "arguments": {"to": "ada@example.com", "subject": f"Refund {i}", "body": "It is on its way."},
        }
        for i in range(count)
    ]


def refunds(count: int) -> list[dict]:
    return [
        {"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 150}} for _ in range(count)
    ]


def queue(interrupted_run, calls: list[dict], **fields):
    """One run of carol's whose model asks for all `calls` at once: each waits, open to every
    reviewer (alice, bob and admin) unless `fields` name reviewers."""
    run, _ = interrupted_run(script=[{"tool_calls": calls}, {"content": "Done."}], **fields)
    pending = list(run.approvals.filter(status="pending").order_by("created_at"))
    assert len(pending) == len(calls)
    return pending


def queued_by_the_worker(personas, calls: list[dict]) -> list[ApprovalRequest]:
    """`queue`, with the worker running the run (its `runs.run` task) until the calls wait."""
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Tell Ada her refund is on its way.",
        model={"provider": "scripted", "script": [{"tool_calls": calls}, {"content": "Done."}]},
    )
    deadline = time.monotonic() + 60
    while Run.objects.get(pk=run.pk).status != RunStatus.INPUT_REQUIRED:
        assert time.monotonic() < deadline, "the worker did not run the run"
        time.sleep(0.05)
    return list(run.approvals.filter(status="pending").order_by("created_at"))


@pytest.fixture
def beat(celery_worker, task_queue):  # noqa: F811 - the fixture imported above
    """beat(*names): enqueue these tasks on the real queue, in order, and return once the
    worker has finished every one (its task_postrun signal, sent in the worker's thread).
    Asked for after the test's first runs ran in-process: the queue starts empty."""
    done: list[str] = []
    lock = threading.Lock()

    def finished(sender=None, task=None, **_):
        if task.name.startswith("approvals."):
            with lock:
                done.append(task.name)

    signals.task_postrun.connect(finished, weak=False)

    def run(*names: str) -> None:
        with lock:
            done.clear()
        for name in names:
            celery_app.send_task(name)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if len(done) == len(names):
                    assert done == list(names)
                    return
            time.sleep(0.05)
        raise AssertionError(f"the worker finished {done} of {list(names)}")

    yield run
    signals.task_postrun.disconnect(finished)


def to_whom(mailoutbox) -> list[str]:
    return sorted(m.to[0] for m in mailoutbox)


def test_beat_looks_for_due_digests_on_its_own_schedule():
    assert django_settings.CELERY_BEAT_SCHEDULE["approvals-digest"] == {
        "task": "approvals.digest",
        "schedule": float(django_settings.DESK_NOTIFY_DIGEST_TICK_SECONDS),
    }
    assert "approvals.digest" in celery_app.tasks


def test_36_waiting_calls_make_one_digest_per_reviewer_per_interval_not_36_mails(
    request, interrupted_run, personas, mailoutbox
):
    """Beat's tick and two digest ticks over 36 calls open to every reviewer: one mail to each
    of alice, bob and admin, naming how many wait, grouped by tool, each call with its key fact
    and its own link. A call arriving within the interval waits for the next digest."""
    queue(interrupted_run, emails(24) + refunds(12))
    beat = request.getfixturevalue("beat")

    beat("approvals.tick", "approvals.digest", "approvals.digest")

    assert to_whom(mailoutbox) == ["admin@example.com", "alice@example.com", "bob@example.com"]
    subjects = {m.subject for m in mailoutbox}
    assert subjects == {"[Review Desk] 36 calls wait for your review: 24 send_email, 12 refund_payment"}
    (alices,) = [m for m in mailoutbox if m.to == ["alice@example.com"]]
    body = alices.body
    assert len(set(LINK.findall(body))) == 36
    assert "demo · send_email (24)" in body and "demo · refund_payment (12)" in body
    assert body.index("demo · refund_payment (12)") < body.index("demo · send_email (24)")
    assert "  - Email: To ada@example.com · Subject Refund 7\n" in body
    assert "  - Refund on order A-1001: This refund 150.00 · Left after it 100.00\n" in body
    assert NotificationSent.objects.filter(user=personas.alice, occasion="digest").count() == 36

    mailoutbox.clear()
    (late,) = queued_by_the_worker(personas, emails(1))
    beat("approvals.tick", "approvals.digest")
    assert mailoutbox == []  # within the interval: nothing, not even for the new call

    # Five minutes on, for alice only: her digest has the new call, and it alone.
    NotificationPreference.objects.filter(user=personas.alice).update(
        digest_sent_at=timezone.now() - timedelta(minutes=5, seconds=1)
    )
    beat("approvals.digest")
    (digest,) = mailoutbox
    assert digest.to == ["alice@example.com"]
    assert digest.subject == "[Review Desk] 1 call waits for your review: 1 send_email"
    assert len(LINK.findall(digest.body)) == 1 and "Subject Refund 0" in digest.body
    assert NotificationSent.objects.get(user=personas.alice, request=late).occasion == "digest"


def test_an_item_assigned_by_name_is_mailed_at_once_and_left_out_of_the_digest(
    interrupted_run, personas, mailoutbox
):
    (approval,) = queue(interrupted_run, emails(1), reviewers=["alice"])
    assert approval.assignees == ["alice"]

    assert approvals_notify(now=timezone.now()) == 1
    assert digests_send(now=timezone.now()) == 0

    (message,) = mailoutbox
    assert message.to == ["alice@example.com"]
    assert message.subject == (
        "[Review Desk] send_email (demo) waits for you: Email: To ada@example.com · Subject Refund 0"
    )
    assert len(LINK.findall(message.body)) == 1
    assert NotificationSent.objects.get(user=personas.alice, request=approval).occasion == "created"


def test_a_digest_leaves_a_call_not_yet_announced_to_the_tick_that_mails_it_at_once(
    interrupted_run, personas, mailoutbox
):
    """A digest tick that runs before the approvals tick has announced a call never lists it:
    the tick decides first who hears at once, and alice, named, hears once."""
    queue(interrupted_run, emails(1), reviewers=["alice"])

    assert digests_send(now=timezone.now()) == 0
    assert approvals_notify(now=timezone.now()) == 1

    assert [m.subject.split(":")[0] for m in mailoutbox] == ["[Review Desk] send_email (demo) waits for you"]


def test_with_immediate_mail_for_named_items_off_the_named_item_waits_for_the_digest(
    interrupted_run, personas, mailoutbox
):
    NotificationPreference.objects.create(user=personas.alice, immediate_assigned=False)
    queue(interrupted_run, emails(1), reviewers=["alice"])

    assert approvals_notify(now=timezone.now()) == 0
    assert digests_send(now=timezone.now()) == 1

    assert [m.subject for m in mailoutbox] == ["[Review Desk] 1 call waits for your review: 1 send_email"]


def test_an_item_about_to_expire_is_mailed_at_once_to_those_who_asked_once(
    interrupted_run, personas, mailoutbox
):
    """Open to every reviewer, the call was in their digests; ten minutes before its expiry the
    tick mails alice and admin at once, and again never; bob turned that off."""
    NotificationPreference.objects.create(user=personas.bob, immediate_expiring=False)
    (approval,) = queue(interrupted_run, emails(1))
    approvals_notify(now=timezone.now())
    assert digests_send(now=timezone.now()) == 3
    mailoutbox.clear()

    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() + timedelta(minutes=5))
    first, second = approvals_tick(), approvals_tick()

    assert (first["expiring"], second["expiring"]) == (2, 0)
    assert to_whom(mailoutbox) == ["admin@example.com", "alice@example.com"]
    assert all(
        re.fullmatch(
            r"\[Review Desk\] Expires in [45] min: send_email \(demo\): Email: To ada@example.com · .*",
            m.subject,
        )
        for m in mailoutbox
    )
    assert NotificationSent.objects.filter(request=approval, occasion="expiring").count() == 2


def test_two_ticks_that_read_the_same_expiring_item_warn_once(interrupted_run, personas, mailoutbox):
    """Both read the item and whom to warn before either sends: the warning's row, inserted
    once per reviewer, lets one tick through."""
    (approval,) = queue(interrupted_run, emails(1), reviewers=["alice"])
    approvals_notify(now=timezone.now() - timedelta(minutes=30))
    NotificationSent.objects.update(sent_at=timezone.now() - timedelta(minutes=30))  # told long ago
    ApprovalRequest.objects.filter(pk=approval.pk).update(expires_at=timezone.now() + timedelta(minutes=5))
    mailoutbox.clear()
    now = timezone.now()
    first_read, second_read = expiring_due(now=now), expiring_due(now=now)

    first = [expiring_send(approval=a, users=users, now=now) for a, users in first_read]
    second = [expiring_send(approval=a, users=users, now=now) for a, users in second_read]

    assert (first, second) == ([1], [0])
    assert [m.to for m in mailoutbox] == [["alice@example.com"]]


def test_two_digest_ticks_that_read_the_same_moment_send_one_mail(interrupted_run, personas, mailoutbox):
    """Two ticks read alice's digest (the same calls, the same last digest) before either sends:
    the compare-and-set on her `digest_sent_at` lets one through."""
    queue(interrupted_run, emails(3))
    approvals_notify(now=timezone.now())
    now = timezone.now()
    first_read, second_read = digest_items(personas.alice), digest_items(personas.alice)

    first = digest_send(user=personas.alice, seen=None, items=first_read, now=now)
    second = digest_send(user=personas.alice, seen=None, items=second_read, now=now)

    assert (first, second) == (1, 0)
    assert [m.to for m in mailoutbox] == [["alice@example.com"]]
    assert NotificationPreference.objects.get(user=personas.alice).digest_sent_at == now
    assert AuditEvent.objects.filter(action="notification.digest_sent").count() == 1


def test_a_digest_lists_so_many_and_the_next_one_the_rest(interrupted_run, personas, mailoutbox, monkeypatch):
    monkeypatch.setattr(digest, "DIGEST_ITEMS_MAX", 2)
    queue(interrupted_run, emails(3))
    approvals_notify(now=timezone.now())

    assert (
        digest_send(user=personas.alice, seen=None, items=digest_items(personas.alice), now=timezone.now())
        == 1
    )
    seen = NotificationPreference.objects.get(user=personas.alice).digest_sent_at
    assert (
        digest_send(user=personas.alice, seen=seen, items=digest_items(personas.alice), now=timezone.now())
        == 1
    )

    first, second = mailoutbox
    assert first.subject == "[Review Desk] 2 calls wait for your review: 2 send_email"
    assert "More wait on the desk; the next digest lists the next 2." in first.body
    assert "Subject Refund 0" in first.body and "Subject Refund 1" in first.body
    assert second.subject == "[Review Desk] 1 call waits for your review: 1 send_email"
    assert "Subject Refund 2" in second.body and "More wait" not in second.body


def test_a_call_decided_before_the_digest_goes_out_is_not_in_it(interrupted_run, personas, mailoutbox):
    decided_first, decided_meanwhile, waiting = queue(interrupted_run, emails(3))
    approvals_notify(now=timezone.now())
    for approval in (decided_first,):
        approval_decide(
            approval_id=approval.id,
            reviewer=personas.bob,
            verdict="reject",
            checkpoint_id=str(approval.checkpoint_id),
        )
    read = digest_items(personas.alice)  # the tick reads; then bob decides another
    approval_decide(
        approval_id=decided_meanwhile.id,
        reviewer=personas.bob,
        verdict="reject",
        checkpoint_id=str(decided_meanwhile.checkpoint_id),
    )

    assert [a.pk for a in read] == [decided_meanwhile.pk, waiting.pk]
    assert digest_send(user=personas.alice, seen=None, items=read, now=timezone.now()) == 1

    (digest,) = mailoutbox
    assert digest.subject == "[Review Desk] 1 call waits for your review: 1 send_email"
    assert "Subject Refund 2" in digest.body
    assert "Subject Refund 0" not in digest.body and "Subject Refund 1" not in digest.body


def test_a_hidden_character_in_a_key_fact_is_shown_escaped_and_flagged(interrupted_run, personas, mailoutbox):
    lookalike = {"to": "ada@examp1e.com\u202e", "subject": "Refund\nBcc: eve@example.com", "body": "x"}
    spaced = {"to": "ada@example.com", "subject": "Refund ", "body": "x"}
    queue(interrupted_run, [{"name": "send_email", "arguments": a} for a in (lookalike, spaced)])
    approvals_notify(now=timezone.now())
    digests_send(now=timezone.now())

    digest = next(m for m in mailoutbox if m.to == ["alice@example.com"])
    assert "To ada@examp1e.com\\u202e · Subject Refund\\u000aBcc: eve@example.com" in digest.body
    assert "⚠ ada@examp1e.com\u202e is not a known customer's address" not in digest.body
    assert "⚠ ada@examp1e.com\\u202e is not a known customer's address" in digest.body
    assert "⚠ contains invisible characters (shown escaped)" in digest.body
    assert "  - Email: To ada@example.com · Subject Refund\\u0020\n    ⚠ contains invisible" in digest.body


def test_a_question_and_a_command_read_as_such_in_the_digest(interrupted_run, personas, mailoutbox):
    interrupted_run(asking(question="Which colour\nfor the invoice?", options=["red", "blue"]))
    interrupted_run(
        script=[{"tool_calls": [{"name": "execute", "arguments": {"command": "make deploy\nrm -rf /"}}]}]
    )
    approvals_notify(now=timezone.now())

    digests_send(now=timezone.now())

    digest = next(m for m in mailoutbox if m.to == ["alice@example.com"])
    assert digest.subject == "[Review Desk] 2 items wait for your review: 1 question, 1 execute"
    assert "demo · question (1)\n  - The agent asks: Which colour\\u000afor the invoice?\n" in digest.body
    assert (
        "demo · execute (1)\n  - Shell command: `make deploy` · Working directory a scratch copy of "
        in digest.body
    )


# --- the settings page ---------------------------------------------------------------------


def logged_in(user, **options) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def test_the_settings_page_changes_the_mode_and_the_next_mail_follows_it(
    interrupted_run, personas, mailoutbox
):
    alice = logged_in(personas.alice)
    page = alice.get("/settings/")
    assert page.status_code == 200
    assert 'name="mode" value="digest" checked' in page.content.decode()
    assert 'href="/settings/"' in alice.get("/").content.decode()  # linked from the navigation

    saved = alice.post("/settings/", {"mode": "every", "digest_minutes": "10", "immediate_assigned": "on"})

    assert saved.status_code == 302 and saved["Location"] == "/settings/"
    preference = NotificationPreference.objects.get(user=personas.alice)
    assert (preference.mode, preference.digest_minutes, preference.immediate_assigned) == ("every", 10, True)
    assert preference.immediate_expiring is False
    audit = AuditEvent.objects.get(action="notification_settings.changed")
    assert audit.actor_id == personas.alice.pk
    assert audit.data["changed"] == {"mode": "every", "digest_minutes": 10, "immediate_expiring": False}

    # Every item: alice hears of an open call at once; bob and admin in their digests.
    queue(interrupted_run, refunds(1))
    assert approvals_notify(now=timezone.now()) == 1
    assert [m.to for m in mailoutbox] == [["alice@example.com"]]
    assert mailoutbox[0].subject == (
        "[Review Desk] refund_payment (demo) waits for you: "
        "Refund on order A-1001: This refund 150.00 · Left after it 100.00"
    )
    assert digests_send(now=timezone.now()) == 2
    assert to_whom(mailoutbox[1:]) == ["admin@example.com", "bob@example.com"]

    # Off: nothing at all, at once or in a digest, even for a call that names her.
    mailoutbox.clear()
    off = {"mode": "off", "digest_minutes": "", "immediate_assigned": "on", "immediate_expiring": "on"}
    assert alice.post("/settings/", off).status_code == 302
    queue(interrupted_run, emails(1), reviewers=["alice", "bob"])
    approvals_notify(now=timezone.now())
    NotificationPreference.objects.update(digest_sent_at=None)  # every digest due
    digests_send(now=timezone.now())
    assert to_whom(mailoutbox) == ["bob@example.com"]  # named too, at once; admin may not decide it


def test_the_settings_page_refuses_what_it_cannot_keep_and_says_why(personas):
    alice = logged_in(personas.alice)

    zero = alice.post("/settings/", {"mode": "digest", "digest_minutes": "0"})
    words = alice.post("/settings/", {"mode": "digest", "digest_minutes": "soon"})
    bogus = alice.post("/settings/", {"mode": "sometimes"})

    assert zero.status_code == words.status_code == bogus.status_code == 422
    assert "The digest interval is between 1 and 1440 minutes." in zero.content.decode()
    assert 'value="0"' in zero.content.decode()  # what was typed stays in the field
    assert "The digest interval is a whole number of minutes." in words.content.decode()
    assert "Choose how you hear of new items" in bogus.content.decode()
    assert not NotificationPreference.objects.exists()
    assert not AuditEvent.objects.filter(action="notification_settings.changed").exists()


def test_a_user_edits_only_their_own_settings(personas):
    """The page has no user in its URL or its form: what alice posts, naming bob or not,
    changes alice's settings, and bob's stay as they were."""
    NotificationPreference.objects.create(user=personas.bob, mode="every")
    alice = logged_in(personas.alice)

    alice.post("/settings/", {"mode": "off", "user": str(personas.bob.pk), "username": "bob"})

    assert NotificationPreference.objects.get(user=personas.bob).mode == "every"
    assert NotificationPreference.objects.get(user=personas.alice).mode == "off"
    assert alice.get(f"/settings/{personas.bob.pk}/").status_code == 404


def test_the_settings_page_wants_a_login_and_a_csrf_token(personas):
    assert Client().get("/settings/")["Location"].startswith("/accounts/login/")
    assert Client().post("/settings/", {"mode": "off"}).status_code == 302

    refused = logged_in(personas.alice, enforce_csrf_checks=True).post("/settings/", {"mode": "off"})

    assert refused.status_code == 403
    assert not NotificationPreference.objects.exists()
