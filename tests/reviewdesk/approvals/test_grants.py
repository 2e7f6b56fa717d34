"""Standing grants on the database: made with an approve, matched by the worker, used up,
expired, revoked, raced. Runs execute in-process (tests/e2e covers a real worker)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from agents.ledger import CallBinding
from agents.state import CallState, CallStatus
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.grants.access import grant_revoke
from reviewdesk.approvals.grants.use import grant_matching_call, grant_use, grantor_may_decide_by_name
from reviewdesk.approvals.models import ApprovalStatus, Grant, GrantUse
from reviewdesk.audit.models import AuditEvent
from reviewdesk.lib.errors import Conflict, Forbidden
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus, SideEffect
from reviewdesk.runs.services import run_submit
from tests.reviewdesk.approvals.conftest import refund_script

EMAIL = {"to": "ada@example.com", "subject": "Your refund", "body": "It is on its way."}


def email_script(**arguments) -> list[dict]:
    return [
        {"tool_calls": [{"name": "send_email", "arguments": {**EMAIL, **arguments}}]},
        {"content": "Emailed."},
    ]


def run_until_it_stops(personas, script=None) -> Run:
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Tell Ada.",
        model={"provider": "scripted", "script": script or email_script()},
    )
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    return run


def approve_with_grant(personas, reviewer=None, script=None, **grant) -> Grant:
    """A first run asks; `reviewer` (alice) approves it and grants ahead of time."""
    run = run_until_it_stops(personas, script)
    approval = run.approvals.get(status=ApprovalStatus.PENDING)
    grant.setdefault("scope", "agent")
    decision = approval_decide(
        approval_id=approval.id,
        reviewer=reviewer or personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
        grant=grant,
    )
    return Grant.objects.get(decision=decision)


@pytest.mark.django_db
def test_an_exact_grant_lets_the_same_call_run_without_asking_and_says_which_grant(personas, mailoutbox):
    grant = approve_with_grant(personas, match="exact", max_uses=3)
    assert grant.payload["type"] == "grant" and grant.payload["arguments_sha256"] == grant.arguments_sha256
    run = run_until_it_stops(personas)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert not run.approvals.exists()  # no human was asked
    grant.refresh_from_db()
    assert grant.uses == 1
    use = GrantUse.objects.get(grant=grant)
    assert use.run_id == run.id and use.number == 1
    assert SideEffect.objects.get(run=run).status == "confirmed"
    audit = AuditEvent.objects.get(action="grant.used")
    assert audit.subject_id == str(grant.id) and audit.data["run"] == str(run.id)
    assert len(mailoutbox) == 1


@pytest.mark.django_db
def test_an_exact_grant_does_not_allow_other_arguments(personas):
    approve_with_grant(personas, match="exact")
    run = run_until_it_stops(personas, email_script(body="Something else."))
    assert run.status == RunStatus.INPUT_REQUIRED
    assert run.approvals.filter(status=ApprovalStatus.PENDING).count() == 1


@pytest.mark.django_db
def test_a_pattern_grant_allows_calls_that_keep_its_constraints_only(personas):
    approve_with_grant(personas, match={"to": {"endswith": "@example.com"}})
    allowed = run_until_it_stops(personas, email_script(to="grace@example.com", body="Other text"))
    assert allowed.status == RunStatus.SUCCEEDED and not allowed.approvals.exists()
    refused = run_until_it_stops(personas, email_script(to="grace@example.com.evil.org"))
    assert refused.status == RunStatus.INPUT_REQUIRED


@pytest.mark.django_db
def test_a_run_scoped_grant_does_not_reach_another_run(personas):
    approve_with_grant(personas, match="exact", scope="run")
    run = run_until_it_stops(personas)
    assert run.status == RunStatus.INPUT_REQUIRED


@pytest.mark.django_db
def test_a_grant_is_used_up_to_its_limit_then_a_human_is_asked(personas):
    grant = approve_with_grant(personas, match="exact", max_uses=2)
    assert [run_until_it_stops(personas).status for _ in range(3)] == [
        RunStatus.SUCCEEDED,
        RunStatus.SUCCEEDED,
        RunStatus.INPUT_REQUIRED,
    ]
    grant.refresh_from_db()
    assert grant.uses == 2


@pytest.mark.django_db
def test_an_expired_grant_never_matches(personas):
    expires = timezone.now() + timedelta(seconds=1)
    approve_with_grant(personas, match="exact", expires_at=expires.isoformat())
    time.sleep(max(0.0, (expires - timezone.now()).total_seconds()) + 0.1)
    assert run_until_it_stops(personas).status == RunStatus.INPUT_REQUIRED


@pytest.mark.django_db
def test_a_revoked_grant_allows_nothing_more(personas):
    grant = approve_with_grant(personas, match="exact")
    grant_revoke(grant_id=grant.id, user=personas.alice)
    assert run_until_it_stops(personas).status == RunStatus.INPUT_REQUIRED
    grant.refresh_from_db()
    assert grant.uses == 0 and grant.revoked_by == personas.alice


@pytest.mark.django_db
def test_a_use_after_revocation_is_refused_by_the_row(personas):
    """The gate's use re-reads the row: a grant found live and revoked before its use counts nothing."""
    grant = approve_with_grant(personas, match="exact")
    binding = CallBinding(str(grant.approval.run_id), None, "call_x", "send_email")
    grant_revoke(grant_id=grant.id, user=personas.admin)
    assert grant_use(grant_id=str(grant.id), binding=binding, max_uses=10, attempt=None) is False


@pytest.mark.django_db
def test_a_grant_revoked_by_its_row_alone_is_refused(personas):
    """Grants revoked before revocations were signed have `revoked_at` and nothing signed: the
    row alone still refuses them."""
    grant = approve_with_grant(personas, match="exact")
    Grant.objects.filter(pk=grant.pk).update(revoked_at=timezone.now(), revoked_by=personas.alice)
    binding = CallBinding(str(grant.approval.run_id), None, "call_x", "send_email")
    assert grant_use(grant_id=str(grant.id), binding=binding, max_uses=10, attempt=None) is False
    assert run_until_it_stops(personas).status == RunStatus.INPUT_REQUIRED


@pytest.mark.django_db
def test_a_use_past_expiry_is_refused_by_the_row(personas):
    grant = approve_with_grant(personas, match="exact")
    Grant.objects.filter(pk=grant.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    binding = CallBinding(str(grant.approval.run_id), None, "call_x", "send_email")
    assert grant_use(grant_id=str(grant.id), binding=binding, max_uses=10, attempt=None) is False


@pytest.mark.django_db
def test_a_grant_never_allows_a_run_its_grantor_submitted(personas):
    """Four eyes hold for grants: alice's grant does not approve alice's own run."""
    from django.contrib.auth.models import Group

    from reviewdesk.accounts.roles import SUBMITTERS

    approve_with_grant(personas, match="exact")
    personas.alice.groups.add(Group.objects.get_or_create(name=SUBMITTERS)[0])
    run = run_submit(
        submitter=personas.alice,
        agent="demo",
        input="x",
        model={"provider": "scripted", "script": email_script()},
    )
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED


@pytest.mark.django_db
def test_only_the_owner_or_an_admin_revokes_and_only_once(personas):
    grant = approve_with_grant(personas, match="exact")
    with pytest.raises(Forbidden):
        grant_revoke(grant_id=grant.id, user=personas.bob)
    grant_revoke(grant_id=grant.id, user=personas.admin)
    with pytest.raises(Conflict):
        grant_revoke(grant_id=grant.id, user=personas.alice)
    assert AuditEvent.objects.filter(action="grant.revoked").count() == 1


def in_threads(*calls):
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def body(i, call):
        try:
            barrier.wait()
            results[i] = call()
        except Exception as exc:  # reported to the test
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_uses_of_a_last_use_count_once(personas):
    grant = approve_with_grant(personas, match="exact", max_uses=1)

    def use(call_id):
        def go():
            with transaction.atomic():
                binding = CallBinding(str(grant.approval.run_id), None, call_id, "send_email")
                return grant_use(grant_id=str(grant.id), binding=binding, max_uses=1, attempt=None)

        return go

    results = in_threads(use("call_a"), use("call_b"))
    assert sorted(results, key=str) == [False, True], results
    grant.refresh_from_db()
    assert grant.uses == 1 and GrantUse.objects.filter(grant=grant).count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_runs_racing_for_a_last_use_send_one_email(personas, mailoutbox):
    approve_with_grant(personas, match="exact", max_uses=1)
    runs = [
        run_submit(
            submitter=personas.carol,
            agent="demo",
            input="x",
            model={"provider": "scripted", "script": email_script()},
        )
        for _ in range(2)
    ]
    in_threads(*(lambda r=r: run_execute(run_id=r.id, worker=f"w{r.pk}") for r in runs))
    statuses = sorted(Run.objects.get(pk=r.pk).status for r in runs)
    assert statuses == sorted([RunStatus.SUCCEEDED, RunStatus.INPUT_REQUIRED])
    assert len(mailoutbox) == 1


@pytest.mark.django_db
def test_an_endswith_domain_grant_cannot_send_mail_to_another_domain(personas, mailoutbox):
    approve_with_grant(personas, match={"to": {"endswith": "@example.com"}})
    run = run_until_it_stops(personas, email_script(to="evil@evil.org (x@example.com"))
    assert not run.approvals.exists()  # the call is invalid: no reviewer is asked, and no grant used
    assert not GrantUse.objects.exists()
    assert mailoutbox == []


@pytest.mark.django_db
def test_a_grant_never_allows_a_call_routed_to_others_than_its_maker(personas, dave):
    # alice may decide a 150 refund, and grants up to a million; 5,000 is finance's to decide
    grant = approve_with_grant(personas, script=refund_script(150), match={"amount": {"lte": 1_000_000}})
    run = run_until_it_stops(personas, refund_script(5000))
    assert run.status == RunStatus.INPUT_REQUIRED
    assert run.approvals.get().assignees == ["group:finance"]  # finance is asked, as with no grant
    grant.refresh_from_db()
    assert grant.uses == 0
    refund = {"order_id": "A-1001", "amount": 5000}
    assert (
        grant_matching_call(run=run, call=CallState("c", "refund_payment", refund, CallStatus.AWAITING))
        is None
    )
    assert not grantor_may_decide_by_name("alice", str(run.id), "refund_payment", refund)
    assert grantor_may_decide_by_name("dave", str(run.id), "refund_payment", refund)
    assert grantor_may_decide_by_name("alice", str(run.id), "refund_payment", {**refund, "amount": 150})


def test_a_grant_revoked_while_its_email_waits_for_a_retry_sends_nothing(
    personas, mailoutbox, monkeypatch, settings
):
    """A grant is revocable at once: an email it allowed whose first try failed (the mail server
    refused the connection: certainly unsent) is not sent by the retry after the revoke: a
    reviewer is asked instead. Its use was counted by that first try, so the retry asks
    whether the grant still lives."""
    from reviewdesk.demo.world import DjangoDemoWorld

    settings.DESK_TOOL_RETRY_INLINE_SECONDS = 0  # a transient failure releases the run at once
    grant = approve_with_grant(personas, scope="agent", max_uses=5)
    run_execute(run_id=Run.objects.get(approvals__grants=grant).id, worker="test")  # the approved one
    mailoutbox.clear()
    send = DjangoDemoWorld.send_email

    def refused(self, **arguments):
        raise ConnectionRefusedError("mail server down")

    monkeypatch.setattr(DjangoDemoWorld, "send_email", refused)
    run = run_until_it_stops(personas)  # allowed by the grant; its send fails
    assert run.status == RunStatus.QUEUED
    assert list(SideEffect.objects.filter(run=run).values_list("status", flat=True)) == ["retrying"]

    grant_revoke(grant_id=grant.id, user=personas.alice)
    monkeypatch.setattr(DjangoDemoWorld, "send_email", send)
    Run.objects.filter(pk=run.pk).update(next_attempt_at=None)
    run_execute(run_id=run.id, worker="test")
    run.refresh_from_db()
    assert mailoutbox == []
    # Nothing allows the call now: a reviewer is asked, as for a call no grant covers.
    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    assert run.approvals.filter(status=ApprovalStatus.PENDING, tool="send_email").count() == 1


@pytest.mark.django_db
def test_the_approval_asked_after_a_revoke_is_consumed_by_the_retry_it_authorises(
    personas, mailoutbox, monkeypatch, settings
):
    """After the revoke above a reviewer approves the call; its retry sends the email once,
    on that decision, which is consumed with it like any decision that lets a call run."""
    from reviewdesk.approvals.models import Decision
    from reviewdesk.demo.world import DjangoDemoWorld

    settings.DESK_TOOL_RETRY_INLINE_SECONDS = 0
    grant = approve_with_grant(personas, scope="agent", max_uses=5)
    run_execute(run_id=Run.objects.get(approvals__grants=grant).id, worker="test")
    mailoutbox.clear()
    send = DjangoDemoWorld.send_email

    def refused(self, **arguments):
        raise ConnectionRefusedError("mail server down")

    monkeypatch.setattr(DjangoDemoWorld, "send_email", refused)
    run = run_until_it_stops(personas)
    grant_revoke(grant_id=grant.id, user=personas.alice)
    monkeypatch.setattr(DjangoDemoWorld, "send_email", send)
    Run.objects.filter(pk=run.pk).update(next_attempt_at=None)
    run_execute(run_id=run.id, worker="test")
    approval = run.approvals.get(status=ApprovalStatus.PENDING, tool="send_email")
    decision = approval_decide(
        approval_id=approval.id,
        reviewer=personas.bob,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    run_execute(run_id=run.id, worker="test")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert len(mailoutbox) == 1
    assert Decision.objects.get(pk=decision.pk).consumed_at is not None


@pytest.mark.django_db
def test_of_two_grants_alike_in_scope_and_expiry_the_newest_is_used_as_the_orm_ordered_them(personas):
    """The worker's look for a grant is one hand-written statement (rows.grants_live_for); the ORM's
    query it replaced came newest first (Grant.Meta.ordering), and the narrowest-then-soonest
    sort is stable, so two grants alike in both (an `expires_at` the reviewers both sent) were
    used newest first. Without the ORDER BY the tie went to whichever row the database returned
    first (the oldest, in insertion order), on SQLite and PostgreSQL alike."""
    expires = (timezone.now() + timedelta(days=2)).replace(microsecond=0).isoformat()
    older = approve_with_grant(personas, match="exact", expires_at=expires)
    # A second run whose call the exact grant does not cover asks again; bob grants wider.
    newer = approve_with_grant(
        personas,
        reviewer=personas.bob,
        script=email_script(body="Something else."),
        match={"to": {"endswith": "@example.com"}},
        expires_at=expires,
    )
    assert older.expires_at == newer.expires_at and older.scope == newer.scope == "agent"
    assert older.created_at < newer.created_at
    run = run_until_it_stops(personas, email_script(body="A third text."))
    assert run.status == RunStatus.SUCCEEDED and not run.approvals.exists()
    assert GrantUse.objects.get(run=run).grant_id == newer.id
    # Both cover the first run's very call: the newest of them is the one matched.
    call = CallState("c", "send_email", EMAIL, CallStatus.AWAITING)
    assert grant_matching_call(run=run, call=call) == str(newer.id)


@pytest.mark.django_db
def test_use_rows_renumbered_by_hand_make_the_next_use_ask_a_human_not_fail_the_run(personas, mailoutbox):
    """The review's attack on the use count: with the records of uses tampered (here a use row
    renumbered, so the next use's number is taken) the next use's row is refused by the
    database. That was an internal error that failed the run; it is a refused grant, and the
    call asks a human."""
    grant = approve_with_grant(personas, match="exact", max_uses=3)
    assert run_until_it_stops(personas).status == RunStatus.SUCCEEDED
    GrantUse.objects.filter(grant=grant).update(number=2)

    run = run_until_it_stops(personas)
    assert run.status == RunStatus.INPUT_REQUIRED, (run.status, run.error)
    assert run.approvals.filter(status=ApprovalStatus.PENDING, tool="send_email").count() == 1
    assert len(mailoutbox) == 1 and GrantUse.objects.filter(grant=grant).count() == 1


@pytest.mark.django_db
def test_a_grants_uses_are_its_use_rows(personas):
    """No counter of its own: the count the lists show is the rows'."""
    from reviewdesk.approvals.grants.access import grants_with_uses

    grant = approve_with_grant(personas, match="exact", max_uses=3)
    run_until_it_stops(personas)
    run_until_it_stops(personas)
    assert "uses" not in {f.name for f in Grant._meta.get_fields()}
    assert grants_with_uses(Grant.objects.filter(pk=grant.pk)).get().uses == 2
    GrantUse.objects.filter(grant=grant, number=2).delete()
    assert grants_with_uses(Grant.objects.filter(pk=grant.pk)).get().uses == 1 == grant.uses


def email_that_fails_once_then_retries(personas, monkeypatch, settings, **grant):
    """(grant, run): a first run approved with `grant`, then a run whose granted email failed
    certainly unsent (the mail server refused the connection), its row `retrying`, ready to retry."""
    from reviewdesk.demo.world import DjangoDemoWorld

    settings.DESK_TOOL_RETRY_INLINE_SECONDS = 0  # a transient failure releases the run at once
    made = approve_with_grant(personas, scope="agent", max_uses=5, **grant)
    run_execute(run_id=Run.objects.get(approvals__grants=made).id, worker="test")
    send = DjangoDemoWorld.send_email

    def refused(self, **arguments):
        raise ConnectionRefusedError("mail server down")

    monkeypatch.setattr(DjangoDemoWorld, "send_email", refused)
    run = run_until_it_stops(personas)
    assert list(SideEffect.objects.filter(run=run).values_list("status", flat=True)) == ["retrying"]
    monkeypatch.setattr(DjangoDemoWorld, "send_email", send)
    Run.objects.filter(pk=run.pk).update(next_attempt_at=None)
    return made, run


@pytest.mark.django_db
def test_an_email_whose_grant_expired_before_its_retry_is_not_sent_and_asks_a_human(
    personas, mailoutbox, monkeypatch, settings
):
    """A grant expires between its email's failed first try and the retry (a short grant, and
    the clock passing its signed expiry): the retry sends nothing and a reviewer is asked."""
    expires = timezone.now() + timedelta(seconds=4)
    _, run = email_that_fails_once_then_retries(
        personas, monkeypatch, settings, expires_at=expires.isoformat()
    )
    mailoutbox.clear()
    time.sleep(max(0.0, (expires - timezone.now()).total_seconds()) + 0.1)
    run_execute(run_id=run.id, worker="test")
    run.refresh_from_db()
    assert mailoutbox == []
    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    assert run.approvals.filter(status=ApprovalStatus.PENDING, tool="send_email").count() == 1


@pytest.mark.django_db
def test_an_email_whose_grant_row_says_expired_at_its_retry_is_not_sent(
    personas, mailoutbox, monkeypatch, settings
):
    """The retry asks the ledger whether the grant still lives, not only the signed payload the
    gate verified a moment before: a grant whose row says expired (its `expires_at` moved into
    the past, as it is the instant a grant expires between those two reads) allows no retry."""
    grant, run = email_that_fails_once_then_retries(personas, monkeypatch, settings)
    mailoutbox.clear()
    Grant.objects.filter(pk=grant.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    run_execute(run_id=run.id, worker="test")
    run.refresh_from_db()
    assert mailoutbox == []
    assert run.status == RunStatus.INPUT_REQUIRED, run.error


def backends_waiting_for_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="SQLite serialises every writer")
def test_a_use_that_waits_on_another_uses_lock_counts_after_it_with_the_next_number(personas):
    """Two uses of a grant with two uses left, on two real connections: the second waits on the
    grant's row until the first commits, then counts its row and takes use 2. Both count (without
    the lock both would count none, take number 1, and the second would be refused)."""
    from tests.reviewdesk.lib.test_writers_lock import Holder, Writer

    grant = approve_with_grant(personas, match="exact", max_uses=2)

    def use(call_id):
        binding = CallBinding(str(grant.approval.run_id), None, call_id, "send_email")
        return lambda: grant_use(grant_id=str(grant.id), binding=binding, max_uses=2, attempt=None)

    first = Holder(use("call_a"))
    first.start()
    assert first.written.wait(30) and first.error is None and first.result is True, first.error
    second = Writer(use("call_b"))
    second.start()
    deadline = time.monotonic() + 30
    while backends_waiting_for_a_lock() < 1:  # the second use is blocked behind the first
        assert time.monotonic() < deadline and not second.done.is_set(), "the second use never waited"
        time.sleep(0.02)
    first.release.set()
    first.join(30)
    assert second.done.wait(30) and second.error is None, second.error
    assert second.result is True
    assert sorted(GrantUse.objects.filter(grant=grant).values_list("number", flat=True)) == [1, 2]
