"""Device keys: registering a reviewer's public key, admins' signed endorsements and
revocations, the trust file workers pin, and the records a worker's gate is handed.

The server only stores what was signed elsewhere: an endorsement is signed by the admin's
own device key (in the browser, or with a key file from `manage.py trust enroll`), and the
records are re-verified by every worker under the roots pinned in DESK_TRUST_FILE
(`agents.trust`). The checks here turn away mistakes early; they are not what makes a
forged record harmless.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from agents.decisions import key_id_for
from agents.trust import (
    ENDORSEMENT,
    REVIEWER_ROLE,
    REVOCATION,
    Roots,
    SignedRecord,
    TrustFileError,
    endorsement_record,
    fingerprint,
    load_trust_file,
    load_trust_revoked,
    public_key_b64,
    public_key_from_b64,
    record_signed_by,
    revocation_record,
    signed_under_root,
    trust_file_text,
)
from reviewdesk.accounts.models import DeviceKey, Endorsement, Revocation
from reviewdesk.accounts.roles import is_admin
from reviewdesk.audit.services import audit_record
from reviewdesk.lib.errors import Forbidden, Invalid

LABEL_MAX = 100


def device_key_register(
    *, user: User, label: str, public_key: str, by: User | None = None, via: str = ""
) -> DeviceKey:
    """Store a user's device public key (base64 raw Ed25519); inert until endorsed.

    `by` is who registered it, the audit row's actor (the user on the Keys page; None for a
    command run on the server, named in `via`); the key's owner is in the row's data."""
    label = label.strip()
    if not label or len(label) > LABEL_MAX:
        raise Invalid(f"a label is 1 to {LABEL_MAX} characters", errors={"label": ["required"]})
    try:
        key = public_key_from_b64(public_key)
    except ValueError as exc:
        raise Invalid(str(exc), errors={"public_key": [str(exc)]}) from None
    with transaction.atomic():
        if DeviceKey.objects.filter(key_id=key_id_for(key)).exists():
            raise Invalid("this public key is already registered", errors={"public_key": ["registered"]})
        device_key = DeviceKey.objects.create(
            user=user,
            label=label,
            public_key=public_key,
            key_id=key_id_for(key),
            fingerprint=fingerprint(key),
        )
        audit_record(
            actor=by,
            action="device_key.registered",
            subject_type="device_key",
            subject_id=device_key.key_id,
            data={
                "user": user.get_username(),
                "label": label,
                "fingerprint": device_key.fingerprint,
                "via": via,
            },
        )
    return device_key


def _signer_key(admin: User, signer_key_id: str) -> DeviceKey:
    if not is_admin(admin):
        raise Forbidden("only admins endorse or revoke device keys")
    signer = DeviceKey.objects.filter(user=admin, key_id=signer_key_id).first()
    if signer is None:
        raise Invalid("sign with one of your own device keys", errors={"signer_key_id": ["not yours"]})
    # Workers ignore what a revoked root signs (its revocation is pinned at the next `trust pin`):
    # stored, the record would show the key endorsed or revoked here and do nothing there.
    revoked_here = Revocation.objects.filter(device_key=signer).exists()
    if revoked_here or signer.key_id in load_trust_revoked(Path(settings.DESK_TRUST_FILE)):
        raise Invalid(
            f"your device key {signer.key_id} is revoked: sign with another of your keys "
            "(workers ignore what a revoked key signs)",
            errors={"signer_key_id": ["revoked"]},
        )
    return signer


def endorsement_draft(
    *, admin: User, device_key: DeviceKey, signer_key_id: str, days: int | None = None
) -> dict[str, Any]:
    """The endorsement record the admin's key signs: this key is this user's, as a reviewer."""
    _signer_key(admin, signer_key_id)
    now = timezone.now()
    return endorsement_record(
        user=device_key.user.get_username(),
        public_key=device_key.public_key,
        roles=(REVIEWER_ROLE,),
        issued_at=now,
        not_after=now + timedelta(days=days or settings.DESK_ENDORSEMENT_DAYS),
        signer_key_id=signer_key_id,
    )


def revocation_draft(*, admin: User, device_key: DeviceKey, signer_key_id: str) -> dict[str, Any]:
    _signer_key(admin, signer_key_id)
    return revocation_record(key_id=device_key.key_id, revoked_at=timezone.now(), signer_key_id=signer_key_id)


def _store_signed(
    *, admin: User, device_key: DeviceKey, record: Any, signature: str
) -> tuple[type, dict[str, Any]]:
    if not isinstance(record, dict):
        raise Invalid("the record is a JSON object", errors={"record": ["not an object"]})
    signer = _signer_key(admin, str(record.get("signer_key_id")))
    kind = record.get("type")
    if kind == ENDORSEMENT:
        names_it = (
            record.get("key_id") == device_key.key_id
            and record.get("public_key") == device_key.public_key
            and record.get("user") == device_key.user.get_username()
        )
        model: type = Endorsement
    elif kind == REVOCATION:
        names_it, model = record.get("key_id") == device_key.key_id, Revocation
    else:
        raise Invalid("the record is neither an endorsement nor a revocation", errors={"record": ["type"]})
    if not names_it:
        raise Invalid("the record does not name this device key and its user", code="bad_signature")
    if not record_signed_by(
        SignedRecord(record=record, signature=signature), public_key_from_b64(signer.public_key)
    ):
        raise Invalid("the record's signature does not verify under your device key", code="bad_signature")
    return model, record


def signed_record_store(
    *, admin: User, device_key: DeviceKey, record: Any, signature: str, by: User | None = None, via: str = ""
) -> Endorsement | Revocation:
    """Store an endorsement or revocation signed by one of `admin`'s device keys, audited.

    `by` is who stored it, the audit row's actor (the admin on the Keys page; None for a
    command run on the server, named in `via`); the signing admin is in the row's data."""
    model, record = _store_signed(admin=admin, device_key=device_key, record=record, signature=signature)
    with transaction.atomic():
        row = model.objects.create(
            device_key=device_key,
            record=record,
            signature=signature,
            signer_key_id=record["signer_key_id"],
            signed_by=admin,
        )
        audit_record(
            actor=by,
            action="device_key.endorsed" if model is Endorsement else "device_key.revoked",
            subject_type="device_key",
            subject_id=device_key.key_id,
            data={
                "user": device_key.user.get_username(),
                "signer": admin.get_username(),
                "signer_key_id": record["signer_key_id"],
                "record": record,
                "via": via,
            },
        )
    return row


def device_key_state(device_key: DeviceKey) -> str:
    """ "revoked", "endorsed" or "pending", from the stored records (the server's view)."""
    if Revocation.objects.filter(device_key=device_key).exists():
        return "revoked"
    if Endorsement.objects.filter(device_key=device_key).exists():
        return "endorsed"
    return "pending"


def endorsed_key_ids(user: User) -> list[str]:
    """The user's device keys an admin endorsed and nobody revoked (the server's view)."""
    return list(
        DeviceKey.objects.filter(user=user, endorsement__isnull=False, revocation__isnull=True)
        .distinct()
        .values_list("key_id", flat=True)
    )


def device_keys_for(user: User) -> list[dict[str, Any]]:
    """What the Keys page lists: the user's own keys, or every key for an admin."""
    keys = DeviceKey.objects.select_related("user").order_by("user__username", "created_at")
    if not is_admin(user):
        keys = keys.filter(user=user)
    return [
        {
            "key_id": k.key_id,
            "user": k.user.get_username(),
            "label": k.label,
            "fingerprint": k.fingerprint,
            "created_at": k.created_at,
            "state": device_key_state(k),
            "mine": k.user_id == user.pk,
        }
        for k in keys
    ]


# --- what a worker is handed ----------------------------------------------------------------
class DatabaseTrust:
    """`agents.trust.DeviceTrust` on the database and the pinned trust file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path or settings.DESK_TRUST_FILE)

    def roots(self) -> Roots:
        try:
            return load_trust_file(self.path)
        except TrustFileError:
            return {}  # no roots: every device-signed decision is refused

    def revoked_ids(self) -> frozenset[str]:
        return load_trust_revoked(self.path)

    def records(self, key_id: str) -> tuple[list[SignedRecord], list[SignedRecord]]:
        return self.records_for([key_id])[key_id]

    def records_for(self, key_ids: Iterable[str]) -> dict[str, tuple[list[SignedRecord], list[SignedRecord]]]:
        """`records` for several key ids, in one query for each kind of record."""
        found: dict[str, tuple[list[SignedRecord], list[SignedRecord]]] = {k: ([], []) for k in key_ids}
        for index, model in enumerate((Endorsement, Revocation)):
            rows = model.objects.filter(device_key__key_id__in=list(found)).values_list(
                "device_key__key_id", "record", "signature"
            )
            for key_id, record, signature in rows:
                found[key_id][index].append(SignedRecord(record=record, signature=signature))
        return found


class TrustSnapshot:
    """`DatabaseTrust` read once for many decisions (the audit page): the trust file once, the
    records of the keys named in two queries. The same roots and records the gate is handed,
    checked by the same `agents.trust.verify_with_trust`; a worker keeps reading them afresh."""

    def __init__(self, key_ids: Iterable[str], path: Path | None = None) -> None:
        trust = DatabaseTrust(path)
        self._roots = trust.roots()
        self._revoked = trust.revoked_ids()
        self._records = trust.records_for(key_ids)

    def roots(self) -> Roots:
        return self._roots

    def revoked_ids(self) -> frozenset[str]:
        return self._revoked

    def records(self, key_id: str) -> tuple[list[SignedRecord], list[SignedRecord]]:
        return self._records.get(key_id, ([], []))


def device_trust_problems() -> list[str]:
    """Why a production worker that must verify device keys cannot: it pins no roots.
    Without them it would refuse every device-signed decision, and it should say so at start."""
    if not settings.DESK_REQUIRE_DEVICE_KEYS:
        return []
    try:
        load_trust_file(Path(settings.DESK_TRUST_FILE))
    except TrustFileError as exc:
        return [f"device keys are required (DESK_REQUIRE_DEVICE_KEYS) and {exc} (DESK_TRUST_FILE)"]
    return []


def _pinned_before(path: Path) -> tuple[Roots, frozenset[str]]:
    """The roots and revoked key ids of the trust file about to be replaced (none if unreadable)."""
    try:
        roots: Roots = load_trust_file(path)
    except TrustFileError:
        roots = {}
    return roots, load_trust_revoked(path)


@dataclass(frozen=True)
class Pinned:
    """What `trust_pin` wrote: the file, the keys it pinned, and the admin's keys it left out
    (not in the file it replaced, and not named to be added)."""

    path: Path
    keys: list[DeviceKey]
    left_out: list[DeviceKey]


def trust_pin(*, keys: list[DeviceKey], path: Path | None = None, add: Iterable[str] = ()) -> Pinned:
    """Write these admin device keys as the pinned roots, read-only (0444), with every device
    key a revocation names that is signed by one of them or by a root the file it replaces
    pinned: revoked in the file, a deleted revocation row cannot bring a key back.

    Only a first pin (no trust file with roots yet: the bootstrap, fingerprints compared by the
    operator) takes every key given. A pin over a file keeps the keys it pinned (with the public keys it pinned,
    whatever the rows now say) and adds only those whose ids are named in `add`: a key row a
    database writer inserts for an admin is not a root until the operator, having compared its
    fingerprint, names it (`left_out` lists the others).

    A revocation only takes trust away, so nothing here lapses: the replaced file's revoked ids
    are kept (rebuilt from the rows alone, a row a database writer deleted un-revoked its key at
    the next pin), and so are revocations by a root this pin retires (an admin's old key)."""
    path = Path(path or settings.DESK_TRUST_FILE)
    for key in keys:
        if not key.user.is_staff:
            raise ValueError(f"{key.user} is not an admin: only admin keys are roots")
    roots_before, revoked_before = _pinned_before(path)
    named = set(add)
    unknown = named - {k.key_id for k in keys}
    if unknown:
        raise ValueError(f"not a device key of this admin: {', '.join(sorted(unknown))}")
    if roots_before:
        chosen = [k for k in keys if k.key_id in roots_before or k.key_id in named]
    else:
        chosen = list(keys)
    left_out = [k for k in keys if k not in chosen]
    keys = chosen
    if not keys:
        raise ValueError(
            "none of these keys is pinned already or named to be added: compare a key's "
            "fingerprint, then name it with --add KEY_ID"
        )
    # A root keeps the public key it was pinned with: a row whose key was swapped cannot move it.
    roots = {k.key_id: roots_before.get(k.key_id) or public_key_from_b64(k.public_key) for k in keys}
    revokers = {**roots_before, **roots}
    revoked = revoked_before | {
        row.device_key.key_id
        for row in Revocation.objects.select_related("device_key")
        if signed_under_root(SignedRecord(record=row.record, signature=row.signature), revokers)
    }
    if revoked & roots.keys():
        raise ValueError(
            f"revoked keys cannot be roots: {', '.join(sorted(revoked & roots.keys()))} "
            "(its revocation row is gone: revoke it again with manage.py trust revoke)"
        )
    text = trust_file_text(
        [
            {
                "key_id": k.key_id,
                "public_key": public_key_b64(roots[k.key_id]),
                "user": k.user.get_username(),
                "label": k.label,
            }
            for k in keys
        ],
        revoked,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o444)
    # The file replaced last, in the audit row's transaction: the roots workers trust never
    # change without the row (a failed write leaves the old file; a failed replace, no row).
    try:
        _replace_audited(path, tmp, keys=keys, revoked=revoked)
    finally:
        tmp.unlink(missing_ok=True)  # read-only: a next pin could not write over it
    return Pinned(path=path, keys=keys, left_out=left_out)


def _replace_audited(path: Path, tmp: Path, *, keys: list[DeviceKey], revoked: frozenset[str]) -> None:
    with transaction.atomic():
        audit_record(
            actor=None,
            action="trust.pinned",
            subject_type="trust_file",
            subject_id=path.name,  # the whole path, in data, may be longer than a subject holds
            data={
                "path": str(path),
                "roots": [k.key_id for k in keys],
                "revoked": sorted(revoked),
                "via": "manage.py trust pin",
            },
        )
        if path.exists():
            path.chmod(0o644)
        tmp.replace(path)
