#!/usr/bin/env python3
"""Decide an approval with your own device key: the server never holds it.

    python manage.py trust keygen ~/.config/reviewdesk/alice.pem      # once: a key file, 0600
    python manage.py trust enroll --user alice --key ~/.config/reviewdesk/alice.pem --signer admin.pem
    export DESK_TOKEN=...    # python manage.py create_token alice --scope review
    python examples/sign_decision.py --url http://127.0.0.1:8000 --key ~/.config/reviewdesk/alice.pem \\
        APPROVAL_ID approve --reason "checked with Ada"

It reads the approval (GET /api/v1/approvals/{id}) for its checkpoint, asks for the exact
bytes to sign (GET /api/v1/approvals/{id}/payload: the RFC 8785 canonical JSON of the
decision), shows what it signs, signs the bytes with the key file (Ed25519), and POSTs the
decision with `signature`, `key_id` and the `payload`. The server checks the signature
before storing (422 `bad_signature` otherwise); the worker checks it again, with the admin's
endorsement of your key, before the tool runs.

It does not take the server's word for what it signs: the bytes must be the payload it was
given, and the payload must name this approval, the call shown here (its tool, run, checkpoint
and tool call), this verdict, this key, the SHA-256 of the arguments shown here (computed here,
over their RFC 8785 form) and of the reason and note given here. A web tier that swaps the call
or the words gets no signature (exit 3).

Exit status: 0 decided, 1 when the key file cannot be read, 2 on a usage or API error, 3 when
the payload is not what was asked for.
Needs httpx, cryptography and rfc8785 (all in requirements.txt).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sys
from pathlib import Path

import httpx
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def load_key(path: str) -> tuple[Ed25519PrivateKey, str]:
    """The key file's private key and its key id ("ed25519:" + 16 hex of the raw public key's SHA-256)."""
    try:
        key = serialization.load_pem_private_key(Path(path).expanduser().read_bytes(), password=None)
    except OSError as exc:
        raise SystemExit(f"cannot read the key file {path}: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:  # not PEM, or a key that needs a password
        raise SystemExit(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SystemExit(f"{path} is not an Ed25519 private key")
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return key, "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def fail(response: httpx.Response) -> None:
    problem = response.json() if response.headers.get("content-type", "").endswith("json") else {}
    print(
        f"{response.status_code} {problem.get('code', '')}: {problem.get('detail', response.text)}",
        file=sys.stderr,
    )
    raise SystemExit(2)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def payload_mismatches(
    *,
    signed: bytes,
    payload: dict,
    approval_id: str,
    verdict: str,
    key_id: str,
    to_run: object,
    shown: dict,
    reason: str = "",
    note: str = "",
) -> list[str]:
    """What about the bytes to sign differs from the decision asked for (empty: sign them).

    `shown` is the approval as GET /api/v1/approvals/{id} returned it and this script shows it:
    the bytes must be for that call (tool, run, checkpoint, tool call), not another one with the
    same arguments, and carry the reason and note typed here, which reach the model in your name."""
    try:
        parsed = json.loads(signed)
    except ValueError:
        return ["the bytes to sign are not JSON"]
    wrong = [] if parsed == payload else ["the bytes to sign are not the payload shown"]
    expected = {
        "request_id": approval_id,
        "run_id": shown.get("run"),
        "checkpoint_id": shown.get("checkpoint_id"),
        "tool_call_id": shown.get("tool_call_id"),
        "tool": shown.get("tool"),
        "verdict": verdict,
        "key_id": key_id,
        "signer": "device",
        "arguments_sha256": hashlib.sha256(rfc8785.dumps(to_run)).hexdigest(),
        # As the API reads them (it trims a text's surrounding whitespace) and signs them.
        "reason_sha256": text_sha256(reason.strip()),
        "note_sha256": text_sha256(note.strip()),
    }
    for field, value in expected.items():
        if parsed.get(field) != value:
            wrong.append(f"{field} is {parsed.get(field)!r}, expected {value!r}")
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("approval_id")
    parser.add_argument("verdict", choices=["approve", "reject", "edit"])
    parser.add_argument("--url", default=os.environ.get("DESK_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("DESK_TOKEN"), help="or DESK_TOKEN")
    parser.add_argument("--key", required=True, help="your Ed25519 key file (PEM)")
    parser.add_argument("--reason", default="")
    parser.add_argument("--note", default="")
    parser.add_argument("--arguments", help="edited arguments, as JSON (for edit)")
    args = parser.parse_args()
    if not args.token:
        parser.error("a token is needed: --token or DESK_TOKEN (manage.py create_token USER --scope review)")
    edited = None
    if args.arguments:
        try:
            edited = json.loads(args.arguments)
        except ValueError as exc:
            parser.error(f"--arguments is not JSON: {exc}")
    key, key_id = load_key(args.key)
    headers = {"Authorization": f"Bearer {args.token}", "Accept": "application/json"}
    with httpx.Client(base_url=args.url, headers=headers, timeout=30) as client:
        approval = client.get(f"/api/v1/approvals/{args.approval_id}")
        if approval.status_code != 200:
            fail(approval)
        decision = {
            "verdict": args.verdict,
            "checkpoint_id": approval.json()["checkpoint_id"],
            "reason": args.reason,
            "note": args.note,
        }
        query = {**decision, "key_id": key_id}
        if args.arguments:
            decision["arguments"] = edited
            query["arguments"] = args.arguments
        signable = client.get(f"/api/v1/approvals/{args.approval_id}/payload", params=query)
        if signable.status_code != 200:
            fail(signable)
        body = signable.json()
        to_run = decision.get("arguments", approval.json()["arguments"])
        print(f"tool: {approval.json()['tool']}\narguments: {json.dumps(to_run, indent=2)}")
        wrong = payload_mismatches(
            signed=base64.b64decode(body["bytes"]),
            payload=body["payload"],
            approval_id=args.approval_id,
            verdict=args.verdict,
            key_id=key_id,
            to_run=to_run,
            shown=approval.json(),
            reason=args.reason,
            note=args.note,
        )
        if wrong:
            print("refusing to sign:", "; ".join(wrong), file=sys.stderr)
            return 3
        print("signing:", body["canonical"])
        signature = base64.b64encode(key.sign(base64.b64decode(body["bytes"]))).decode()
        posted = client.post(
            f"/api/v1/approvals/{args.approval_id}/decision",
            json={**decision, "signature": signature, "key_id": key_id, "payload": body["payload"]},
        )
        if posted.status_code != 201:
            fail(posted)
        print(f"decided: {posted.json()['verdict']}, {posted.json()['signer']}-signed by {key_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
