"""Signed grant revocations on the database: revoking signs a revocation and pins it in the
revocations file; a database writer who clears the revoked grant's row does not bring it back.
Runs execute in-process (tests/e2e/test_grants.py covers a real worker)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from agents.decisions import rfc3339_signed, sign_payload
from agents.grants import SignedRevocation, revocation_payload, revokes
from agents.testing.keys import generate_signing_key
from reviewdesk.approvals import signing
from reviewdesk.approvals.grants.access import grant_revoke, grant_status, grants_with_uses
from reviewdesk.approvals.grants.revocations import pinned_revocations, revocation_pin
from reviewdesk.approvals.models import ApprovalStatus, Grant, GrantUse
from reviewdesk.audit.models import AuditEvent
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus, SideEffect
from tests.reviewdesk.approvals.test_grants import approve_with_grant, email_script, run_until_it_stops

pytestmark = pytest.mark.django_db


def clear_the_revocation_from_the_row(grant: Grant, *, signed_too: bool = False) -> None:
    """What a database writer does to bring a revoked grant back: a plain UPDATE of its row."""
    columns: dict = {"revoked_at": None, "revoked_by": None}
    if signed_too:
        columns |= {"revocation": None, "revocation_signature": ""}
    assert Grant.objects.filter(pk=grant.pk).update(**columns) == 1


def asked_a_human(run: Run) -> bool:
    return (
        run.status == RunStatus.INPUT_REQUIRED
        and run.approvals.filter(status=ApprovalStatus.PENDING, tool="send_email").count() == 1
    )


def test_revoking_signs_a_revocation_naming_the_grant_its_revoker_and_when_and_pins_it(personas):
    grant = approve_with_grant(personas, match="exact")
    grant_revoke(grant_id=grant.id, user=personas.admin)
    grant.refresh_from_db()
    signed = SignedRevocation(payload=grant.revocation, signature=grant.revocation_signature)
    assert grant.revocation == {
        "type": "grant-revocation",
        "version": 1,
        "grant_id": str(grant.id),
        "revoked_by": "admin",
        "revoked_at": rfc3339_signed(grant.revoked_at),
        "key_id": signing.current_key_id(),
    }
    assert revokes(signed, str(grant.id), keyring=signing.FileKeyring())
    assert pinned_revocations(str(grant.id)) == [signed]


def test_a_revoked_grant_whose_revoked_at_a_database_writer_cleared_still_asks_a_human(personas, mailoutbox):
    """The review's attack: revoke, clear `revoked_at` with an UPDATE, and the next email went out
    with no human. The gate refuses the grant by its signed revocation; the call asks a reviewer."""
    grant = approve_with_grant(personas, match="exact")
    grant_revoke(grant_id=grant.id, user=personas.alice)
    clear_the_revocation_from_the_row(grant)

    run = run_until_it_stops(personas)
    assert asked_a_human(run), (run.status, run.error)
    assert mailoutbox == [] and not GrantUse.objects.exists()


def test_a_revocation_erased_from_the_row_altogether_holds_by_the_pinned_file(personas, mailoutbox):
    grant = approve_with_grant(personas, match="exact")
    grant_revoke(grant_id=grant.id, user=personas.alice)
    clear_the_revocation_from_the_row(grant, signed_too=True)

    run = run_until_it_stops(personas)
    assert asked_a_human(run), (run.status, run.error)
    assert mailoutbox == [] and not GrantUse.objects.exists()


def test_a_worker_that_cannot_see_the_pinned_file_still_refuses_by_the_rows_signed_revocation(
    personas, mailoutbox, settings, tmp_path
):
    """A worker on another host without the shared file keeps the row's signed copy: a writer who
    clears only `revoked_at` is still refused there."""
    grant = approve_with_grant(personas, match="exact")
    grant_revoke(grant_id=grant.id, user=personas.alice)
    clear_the_revocation_from_the_row(grant)
    settings.DESK_GRANT_REVOCATIONS_FILE = tmp_path / "never-written.jsonl"

    assert asked_a_human(run_until_it_stops(personas))
    assert mailoutbox == []


def test_a_revocation_that_does_not_verify_or_names_another_grant_revokes_nothing(personas, mailoutbox):
    """Only a revocation the desk's key signed for this very grant counts: a forged one (in the
    file or on the row), or the desk's revocation of another grant, leaves the grant allowing."""
    grant = approve_with_grant(personas, match="exact", max_uses=5)
    other = approve_with_grant(personas, script=email_script(to="ada@example.org"), match="exact")
    grant_revoke(grant_id=other.id, user=personas.alice)
    other.refresh_from_db()
    stranger, stranger_id = generate_signing_key()
    forged = revocation_payload(
        grant_id=str(grant.id), revoked_by="alice", revoked_at=timezone.now(), key_id=stranger_id
    )
    revocation_pin(SignedRevocation(payload=forged, signature=sign_payload(stranger, forged)))
    moved = {**other.revocation, "grant_id": str(grant.id)}  # the other grant's signature
    revocation_pin(SignedRevocation(payload=moved, signature=other.revocation_signature))
    Grant.objects.filter(pk=grant.pk).update(
        revocation=moved, revocation_signature=other.revocation_signature
    )

    run = run_until_it_stops(personas)
    assert run.status == RunStatus.SUCCEEDED and not run.approvals.exists(), run.error
    assert GrantUse.objects.get().grant_id == grant.id and len(mailoutbox) == 1


def test_a_revoke_whose_revocation_cannot_be_pinned_revokes_nothing_and_says_so(personas, settings, tmp_path):
    """The pin is written in the revoke's transaction: a revocation the file did not get is not
    shown as done (the row, its signed copy and the audit row roll back with the error)."""
    grant = approve_with_grant(personas, match="exact")
    settings.DESK_GRANT_REVOCATIONS_FILE = tmp_path  # a directory: nothing can be appended to it
    with pytest.raises(OSError):
        grant_revoke(grant_id=grant.id, user=personas.alice)
    grant.refresh_from_db()
    assert grant.revoked_at is None and grant.revocation is None
    assert not AuditEvent.objects.filter(action="grant.revoked").exists()


def test_a_pinned_file_the_worker_cannot_read_refuses_every_grant(personas, mailoutbox, settings, tmp_path):
    """The worker cannot tell whether the grant was revoked: it asks a human rather than guess."""
    approve_with_grant(personas, match="exact")
    settings.DESK_GRANT_REVOCATIONS_FILE = tmp_path  # there, but no file to read
    assert asked_a_human(run_until_it_stops(personas))
    assert mailoutbox == []


def test_the_lists_show_a_grant_revoked_by_its_signed_revocation_whatever_revoked_at_says(personas):
    grant = approve_with_grant(personas, match="exact")
    grant_revoke(grant_id=grant.id, user=personas.alice)
    clear_the_revocation_from_the_row(grant)
    assert grant_status(grants_with_uses(Grant.objects.filter(pk=grant.pk)).get()) == "revoked"


def test_a_retry_under_a_revoked_grant_whose_row_was_cleared_sends_nothing(
    personas, mailoutbox, monkeypatch, settings
):
    """An email the grant allowed failed certainly unsent; the grant is revoked and its row
    cleared before the retry. The retry asks whether the grant lives: the signed revocation
    says no, and a reviewer is asked."""
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
    assert list(SideEffect.objects.filter(run=run).values_list("status", flat=True)) == ["retrying"]
    grant_revoke(grant_id=grant.id, user=personas.alice)
    clear_the_revocation_from_the_row(grant)
    monkeypatch.setattr(DjangoDemoWorld, "send_email", send)
    Run.objects.filter(pk=run.pk).update(next_attempt_at=None)
    run_execute(run_id=run.id, worker="test")
    run.refresh_from_db()
    assert mailoutbox == []
    assert asked_a_human(run), (run.status, run.error)
