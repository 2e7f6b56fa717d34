"""Device keys from the command line: key files for API clients and the terminal, and the
roots workers pin.

    manage.py trust keygen PATH                      a new Ed25519 key file (0600), prints its fingerprint
    manage.py trust register --user U --key PATH     register PATH's public key as U's device key
    manage.py trust pin --user ADMIN [--out FILE] [--add KEY_ID ...]
                                                     pin ADMIN's device keys as the roots (read-only file):
                                                     the first pin takes them all; a later one keeps the
                                                     pinned ones and adds only the keys named
    manage.py trust enroll --user U --key PATH --signer ADMIN_KEY
                                                     register U's key if needed and endorse it,
                                                     signed with the admin's key file
    manage.py trust revoke --key-id ID --signer ADMIN_KEY

Bootstrap: the first root is pinned by whoever runs `trust pin` on the server, after
comparing the admin key's fingerprint with the one the admin's browser (or `keygen`) shows.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.decisions import key_id_for
from agents.trust import fingerprint, public_key_b64, sign_record
from reviewdesk.accounts.devicekeys import (
    device_key_register,
    endorsement_draft,
    revocation_draft,
    signed_record_store,
    trust_pin,
)
from reviewdesk.accounts.models import DeviceKey
from reviewdesk.lib.errors import DeskError


def load_key_file(path: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise CommandError(f"{path}: not a readable PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CommandError(f"{path} is not an Ed25519 private key")
    return key


def write_key_file(path: str) -> Ed25519PrivateKey:
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CommandError(f"{path} exists: not overwriting a key") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    return key


class Command(BaseCommand):
    help = "Device keys: keygen, register, pin (the workers' trust file), enroll (endorse), revoke."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        keygen = sub.add_parser("keygen")
        keygen.add_argument("path")
        register = sub.add_parser("register")
        register.add_argument("--user", required=True)
        register.add_argument("--key", required=True)
        register.add_argument("--label", default="key file")
        pin = sub.add_parser("pin")
        pin.add_argument("--user", required=True, help="the admin whose device keys become the roots")
        pin.add_argument("--out", default=None, help="default: DESK_TRUST_FILE")
        pin.add_argument(
            "--add",
            action="append",
            default=[],
            metavar="KEY_ID",
            help="a key to pin beside those pinned already, once its fingerprint is compared (repeatable)",
        )
        enroll = sub.add_parser("enroll")
        enroll.add_argument("--user", required=True)
        enroll.add_argument("--key", required=True, help="the user's key file")
        enroll.add_argument("--signer", required=True, help="an admin's key file (a pinned root)")
        enroll.add_argument("--label", default="key file")
        enroll.add_argument("--days", type=int, default=None)
        revoke = sub.add_parser("revoke")
        revoke.add_argument("--key-id", required=True)
        revoke.add_argument("--signer", required=True)

    def handle(self, *args, action, **options):
        try:
            getattr(self, f"do_{action}")(**options)
        except DeskError as exc:
            raise CommandError(exc.detail) from None

    def _user(self, username: str):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        return user

    def do_keygen(self, *, path, **_):
        key = write_key_file(path)
        self.stdout.write(f"{key_id_for(key.public_key())}  {fingerprint(key.public_key())}")

    def _registered(self, user, key: Ed25519PrivateKey, label: str, via: str) -> DeviceKey:
        existing = DeviceKey.objects.filter(key_id=key_id_for(key.public_key())).first()
        if existing is not None:
            if existing.user_id != user.pk:
                raise CommandError(f"{existing.key_id} is registered to {existing.user}, not {user}")
            return existing
        # Audited as the command's, like create_token's and seed_demo's: the operator who ran it
        # on the server is no user of the desk (actor "system"); the key's owner is in the data.
        return device_key_register(
            user=user, label=label, public_key=public_key_b64(key.public_key()), by=None, via=via
        )

    def do_register(self, *, user, key, label, **_):
        device_key = self._registered(self._user(user), load_key_file(key), label, "manage.py trust register")
        self.stdout.write(f"{device_key.key_id}  {device_key.fingerprint}")

    def do_pin(self, *, user, out, add, **_):
        admin = self._user(user)
        keys = list(DeviceKey.objects.filter(user=admin).exclude(revocation__isnull=False))
        if not keys:
            raise CommandError(f"{user} has no device key: create one on /keys/ or with trust register")
        try:
            pinned = trust_pin(keys=keys, path=Path(out) if out else None, add=add)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        for key in pinned.keys:
            self.stdout.write(f"pinned {key.key_id}  {key.fingerprint}  ({key.label})")
        for key in pinned.left_out:
            self.stdout.write(
                f"not pinned {key.key_id}  {key.fingerprint}  ({key.label}): compare its fingerprint "
                f"with {user}'s, then pin again with --add {key.key_id}"
            )
        self.stdout.write(f"wrote {pinned.path} (read-only); give it to every worker as DESK_TRUST_FILE")

    def _signer(self, path: str):
        signer_key = load_key_file(path)
        signer = (
            DeviceKey.objects.filter(key_id=key_id_for(signer_key.public_key()))
            .select_related("user")
            .first()
        )
        if signer is None:
            raise CommandError(f"{path} is not a registered device key: register and pin it first")
        return signer_key, signer

    def do_enroll(self, *, user, key, signer, label, days, **_):
        signer_key, signer_row = self._signer(signer)
        device_key = self._registered(self._user(user), load_key_file(key), label, "manage.py trust enroll")
        record = endorsement_draft(
            admin=signer_row.user, device_key=device_key, signer_key_id=signer_row.key_id, days=days
        )
        signed = sign_record(signer_key, record)
        signed_record_store(
            admin=signer_row.user,
            device_key=device_key,
            record=signed.record,
            signature=signed.signature,
            by=None,
            via="manage.py trust enroll",
        )
        self.stdout.write(f"endorsed {device_key.key_id} for {user} until {record['not_after']}")

    def do_revoke(self, *, key_id, signer, **_):
        signer_key, signer_row = self._signer(signer)
        device_key = DeviceKey.objects.filter(key_id=key_id).first()
        if device_key is None:
            raise CommandError(f"no device key {key_id}")
        record = revocation_draft(
            admin=signer_row.user, device_key=device_key, signer_key_id=signer_row.key_id
        )
        signed = sign_record(signer_key, record)
        signed_record_store(
            admin=signer_row.user,
            device_key=device_key,
            record=signed.record,
            signature=signed.signature,
            by=None,
            via="manage.py trust revoke",
        )
        self.stdout.write(f"revoked {key_id}")
