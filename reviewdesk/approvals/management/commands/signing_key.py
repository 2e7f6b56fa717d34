"""The web tier's decision signing key, made and rotated by the operator (docs/running.md,
"Production"):

    manage.py signing_key create        the key at DESK_SIGNING_KEY_FILE (0600), its public half
                                        in the keyring at DESK_VERIFY_KEYS_FILE (0444); refuses
                                        when the key file exists
    manage.py signing_key rotate        a new key beside the old: the keyring keeps both, the
                                        new one signs (restart the web tier)
    manage.py signing_key retire ID     drop an old key's public half from the keyring
    manage.py signing_key show          the key id that signs now and the keyring's ids

Workers need only the keyring; give them a copy, never the key file.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reviewdesk.approvals.signing import (
    SigningKeyError,
    current_key_id,
    read_keyring,
    signing_key_create,
    signing_key_retire,
    signing_key_rotate,
)


class Command(BaseCommand):
    help = "Create, rotate or retire the desk's decision signing key and its public keyring."
    requires_system_checks: list[str] = []  # no database or audit key needed to make a key file

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        actions.add_parser("create", help="make the signing key and write the keyring; refuses to overwrite")
        actions.add_parser(
            "rotate", help="a new key beside the old: the keyring keeps both, the new one signs"
        )
        retire = actions.add_parser("retire", help="remove an old key's public half from the keyring")
        retire.add_argument("key_id")
        actions.add_parser("show", help="the signing key's id and the keyring's ids")

    def handle(self, *args: object, action: str, **options: object) -> None:
        key_file, keyring = Path(settings.DESK_SIGNING_KEY_FILE), Path(settings.DESK_VERIFY_KEYS_FILE)
        try:
            if action == "create":
                key_id = signing_key_create()
                self.stdout.write(f"signing key {key_id} written to {key_file} (0600)")
                self.stdout.write(
                    f"keyring written to {keyring} (0444): give workers this file, never the key"
                )
            elif action == "rotate":
                old, new = signing_key_rotate()
                self.stdout.write(f"signing key {new} written to {key_file} (0600), replacing {old}")
                self.stdout.write(
                    f"keyring {keyring} holds both: copy it to every worker, then restart the web tier. "
                    f"Once no decision signed by {old} waits, `signing_key retire {old}`."
                )
            elif action == "retire":
                signing_key_retire(str(options["key_id"]))
                self.stdout.write(f"{options['key_id']} removed from {keyring}")
            else:
                signer = current_key_id() if key_file.exists() else "none"
                self.stdout.write(f"signs with: {signer} ({key_file})")
                self.stdout.write(f"keyring {keyring}: {', '.join(sorted(read_keyring(keyring))) or 'empty'}")
        except SigningKeyError as exc:
            raise CommandError(str(exc)) from None
