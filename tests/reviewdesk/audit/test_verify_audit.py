"""`verify_audit` against an attacker with write access to the database.

The attacker edits, deletes or cuts rows, and sometimes rewrites the chain after
doing so. Lacking the audit key, a rewrite can only use the old plain SHA-256
rule (which the old code accepted) or a key of the attacker's own. Cutting the
tail leaves a valid prefix, so only the anchor outside the database shows it.

Beat anchors the head every minute, so the attacks with a recomputed chain come
after an anchor and two more rows: a rewrite under a guessed key fails at the
first row it touches; a rewrite under the old rule fails at the anchored row,
whose hash it cannot reproduce (unkeyed rows count only up to the newest anchor).
"""

from __future__ import annotations

import hashlib
import hmac

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.utils import timezone

from agents.canonical import canonical_json
from reviewdesk.audit.chain import GENESIS, keyed_hash, plain_hash, row_fields
from reviewdesk.audit.keys import audit_key
from reviewdesk.audit.models import AuditEvent, ChainVersion
from reviewdesk.audit.services import audit_record
from reviewdesk.audit.verification import audit_anchor, audit_verify

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_legacy_boundary(settings, tmp_path):
    """Each test's chain starts fresh, so its legacy boundary (a file beside the key) does too."""
    settings.DESK_AUDIT_PLAIN_UNTIL_FILE = tmp_path / "audit_plain_until"


def record(n: int, actor=None) -> list[AuditEvent]:
    return [
        audit_record(actor=actor, action="test.step", subject_type="run", subject_id=i, data={"n": i})
        for i in range(n)
    ]


def rewrite_chain(strategy: str) -> None:
    """The attacker recomputes every row's link and hash, as the old code's chain let them."""
    prev = GENESIS
    if strategy == "plain, no boundary":
        settings.DESK_AUDIT_PLAIN_UNTIL_FILE.unlink()
    for row in AuditEvent.objects.order_by("id"):
        if strategy.startswith("plain"):  # the old rule, and the row marked as written under it
            version, digest = ChainVersion.PLAIN, plain_hash(prev, row_fields(row))
        elif strategy == "the key":  # a compromised worker's: it holds the chain key
            row.prev_hash = prev
            version, digest = ChainVersion.KEYED, keyed_hash(audit_key(), row)
        else:  # the keyed rule under a key of the attacker's choosing
            message = {"v": 2, "id": row.pk, "prev": prev, "actor_id": row.actor_id, **row_fields(row)}
            version, digest = (
                ChainVersion.KEYED,
                hmac.new(b"guess", canonical_json(message), hashlib.sha256).hexdigest(),
            )
        AuditEvent.objects.filter(pk=row.pk).update(prev_hash=prev, hash=digest, version=version)
        prev = digest


def verify_audit_fails_at(row_id: int) -> str:
    with pytest.raises(CommandError) as failure:
        call_command("verify_audit")
    assert f"BROKEN at row {row_id}:" in str(failure.value)
    assert audit_verify() == (False, row_id)
    return str(failure.value)


def test_an_untouched_chain_with_its_anchors_verifies(personas, capsys):
    record(3, actor=personas.alice)
    assert audit_anchor().intact
    record(2)
    assert audit_anchor().intact
    call_command("verify_audit")
    assert "audit trail intact: 5 rows, 2 anchors" in capsys.readouterr().out
    assert audit_verify() == (True, None)


def recorded_and_anchored() -> list[AuditEvent]:
    """Four rows, an anchor over them, then two rows not anchored yet."""
    rows = record(4)
    assert audit_anchor().intact
    return rows + record(2)


def first_bad_after_rewrite(strategy: str, rows: list[AuditEvent]) -> int:
    # The legacy boundary refuses the first rewritten unkeyed row; without it (a boundary never
    # recorded) the anchor still pins row 3, whose hash the old rule cannot reproduce.
    return rows[3].pk if strategy == "plain, no boundary" else rows[0].pk


def test_an_edited_row_is_caught():
    rows = record(4)
    AuditEvent.objects.filter(pk=rows[1].pk).update(data={"forged": True})
    assert "does not match its contents" in verify_audit_fails_at(rows[1].pk)


@pytest.mark.parametrize("strategy", ["plain", "plain, no boundary", "guessed-key"])
def test_an_edited_row_is_caught_even_when_the_chain_is_recomputed(strategy):
    rows = recorded_and_anchored()
    AuditEvent.objects.filter(pk=rows[1].pk).update(data={"forged": True})
    rewrite_chain(strategy)
    verify_audit_fails_at(first_bad_after_rewrite(strategy, rows))


@pytest.mark.parametrize("change", ["edit", "delete"])
def test_before_any_anchor_a_chain_rewritten_as_legacy_rows_is_still_caught(change):
    """No anchor yet: the only thing outside the database is the legacy boundary, written on
    the first keyed row (0 here: this chain never had unkeyed rows)."""
    rows = record(4)
    if change == "edit":
        AuditEvent.objects.filter(pk=rows[1].pk).update(data={"forged": True})
    else:
        AuditEvent.objects.filter(pk=rows[1].pk).delete()
    rewrite_chain("plain")
    assert "past the last legacy row (0" in verify_audit_fails_at(rows[0].pk)


def test_a_deleted_row_is_caught():
    rows = record(4)
    AuditEvent.objects.filter(pk=rows[1].pk).delete()
    assert "does not follow the row before it" in verify_audit_fails_at(rows[2].pk)


@pytest.mark.parametrize("strategy", ["plain", "plain, no boundary", "guessed-key"])
def test_a_deleted_row_is_caught_even_when_the_chain_is_recomputed(strategy):
    rows = recorded_and_anchored()
    AuditEvent.objects.filter(pk=rows[1].pk).delete()
    rewrite_chain(strategy)
    verify_audit_fails_at(first_bad_after_rewrite(strategy, rows))


def test_a_truncated_tail_is_caught_by_the_anchor():
    rows = record(4)
    assert audit_anchor().intact
    AuditEvent.objects.filter(pk__in=[rows[2].pk, rows[3].pk]).delete()
    assert "the tail was cut" in verify_audit_fails_at(rows[3].pk)


@pytest.mark.parametrize("strategy", ["plain", "plain, no boundary", "guessed-key"])
def test_a_truncated_tail_is_caught_even_when_the_chain_is_recomputed(strategy):
    rows = recorded_and_anchored()
    AuditEvent.objects.filter(pk__in=[row.pk for row in rows[2:]]).delete()
    rewrite_chain(strategy)
    message = verify_audit_fails_at(first_bad_after_rewrite(strategy, rows))
    if strategy == "plain, no boundary":
        assert "the tail was cut" in message


def test_a_deleted_anchored_row_is_named():
    rows = record(4)
    assert audit_anchor().intact
    record(1)
    AuditEvent.objects.filter(pk=rows[3].pk).delete()
    assert "was deleted" in verify_audit_fails_at(rows[3].pk)


def test_an_attacker_holding_the_key_still_cannot_cut_an_anchored_tail():
    """A compromised worker has the chain key; the anchor file, outside its reach, still shows the cut."""
    rows = record(4)
    assert audit_anchor().intact
    AuditEvent.objects.filter(pk=rows[3].pk).delete()
    assert "the tail was cut" in verify_audit_fails_at(rows[3].pk)


def test_an_attacker_holding_the_key_still_cannot_rewrite_an_anchored_row():
    """A compromised worker edits a row and recomputes every row after it under the real key:
    each row checks out, and only the anchor's hash, outside its reach, shows the rewrite."""
    rows = recorded_and_anchored()
    AuditEvent.objects.filter(pk=rows[1].pk).update(data={"forged": True})
    rewrite_chain("the key")
    assert "its hash differs from the anchor of" in verify_audit_fails_at(rows[3].pk)


def test_a_forged_unkeyed_row_past_the_newest_anchor_is_refused():
    """Old rows, anchored after the upgrade; a row appended under the old rule is then a forgery."""
    legacy_rows(2)
    assert audit_anchor().intact
    legacy_rows(1, prev=AuditEvent.objects.order_by("id").last().hash)
    forged = AuditEvent.objects.order_by("id").last()
    assert "no anchor covers" in verify_audit_fails_at(forged.pk)


def legacy_rows(n: int, prev: str = GENESIS) -> None:
    """Rows as the old code wrote them (plain SHA-256); the migration marks them PLAIN."""
    for i in range(n):
        row = AuditEvent(
            at=timezone.now(),
            actor_name="system",
            action="legacy.step",
            subject_type="run",
            subject_id=str(i),
            prev_hash=prev,
            version=ChainVersion.PLAIN,
        )
        row.hash = plain_hash(prev, row_fields(row))
        row.save()
        prev = row.hash


def test_rows_written_before_the_chain_was_keyed_still_verify(capsys):
    legacy_rows(2)
    record(2)
    assert audit_anchor().intact
    call_command("verify_audit")
    assert "audit trail intact: 4 rows, 1 anchors" in capsys.readouterr().out


def test_an_unkeyed_row_after_keyed_rows_is_a_downgrade_and_fails():
    rows = record(3)
    last = rows[2]
    AuditEvent.objects.filter(pk=last.pk).update(
        version=ChainVersion.PLAIN, hash=plain_hash(last.prev_hash, row_fields(last))
    )
    assert "unkeyed row after keyed rows" in verify_audit_fails_at(last.pk)


def test_a_grant_bound_of_1e16_leaves_the_trail_verifiable(interrupted_run, personas, api_as):
    """Any reviewer's grant constraints reach the trail as sent: a bound of 1e16 (a double RFC
    8785 writes, so the desk takes it) comes back from PostgreSQL's jsonb as the integer
    10000000000000000. Its row's hash could not be computed at all: /audit/ and verify_audit
    failed, and beat anchored nothing more, for every row after it."""
    personas.alice.groups.add(Group.objects.get_or_create(name="finance")[0])
    script = [
        {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 150}}]},
        {"content": "Done."},
    ]
    _, approval = interrupted_run(script)
    decided = api_as(personas.alice, "review").post(
        f"/api/v1/approvals/{approval.id}/decision",
        {
            "verdict": "approve",
            "checkpoint_id": str(approval.checkpoint_id),
            "grant": {"match": {"amount": {"lte": 1e16}}, "scope": "run"},
        },
        format="json",
    )
    assert decided.status_code == 201, decided.json()
    assert audit_anchor().intact
    assert audit_verify() == (True, None)
