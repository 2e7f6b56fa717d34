"""The signed record that makes a pin trusted: server, tool, accepted digest, by whom, when.

Two signers, for the two moments a pin is made:
- An admin's acceptance (the page, `manage.py mcp_tools --accept`) is signed with the desk's
  Ed25519 key, as a decision is (`approvals.signing.sign`); it runs on the web tier, which
  holds that key.
- A first sight happens where the server's tools are listed: on a worker, which must not hold
  the desk's signing key (`signing.worker_key_problems`). It is sealed there with the audit
  chain's key (HMAC-SHA256), which every web process and worker holds and the database does not
  (docs/audit.md).

Either way a database writer (who holds neither key) cannot make a row the worker trusts: the
record covers the digest, and the worker recomputes the digest from the row's definition. A row
whose record does not verify is treated as changed (`pins.DjangoPinStore`).
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agents.canonical import canonical_json
from agents.decisions import signature_valid
from agents.mcp import ToolDefinition
from reviewdesk.approvals import signing
from reviewdesk.audit.keys import audit_key

if TYPE_CHECKING:
    from reviewdesk.mcp.models import ToolPin

CHAIN_SEAL = "audit-chain"  # the key id of a first sight's seal
THE_DESK = "the desk"  # who accepted a first sight's definition


def pin_payload(
    *, server: str, tool: str, digest: str, accepted_by: str, accepted_at: datetime, key_id: str
) -> dict[str, Any]:
    return {
        "type": "mcp_tool_pin",
        "server": server,
        "tool": tool,
        "digest": digest,
        "accepted_by": accepted_by,
        "accepted_at": accepted_at.isoformat(),
        "key_id": key_id,
    }


def _chain_seal(payload: dict[str, Any]) -> str:
    return hmac.new(audit_key(), canonical_json(payload), hashlib.sha256).hexdigest()


def seal_first_sight(*, server: str, tool: str, digest: str, at: datetime) -> tuple[str, str]:
    """(key id, seal) for a definition pinned on first sight."""
    payload = pin_payload(
        server=server, tool=tool, digest=digest, accepted_by=THE_DESK, accepted_at=at, key_id=CHAIN_SEAL
    )
    return CHAIN_SEAL, _chain_seal(payload)


def sign_acceptance(*, server: str, tool: str, digest: str, admin: str, at: datetime) -> tuple[str, str]:
    """(key id, signature) of an admin's acceptance, with the desk's key (web tier only)."""
    key_id = signing.current_key_id()
    payload = pin_payload(
        server=server, tool=tool, digest=digest, accepted_by=admin, accepted_at=at, key_id=key_id
    )
    return key_id, signing.sign(payload)


def pin_verifies(pin: ToolPin) -> bool:
    """Whether the pin's record verifies over the digest of the definition the row holds."""
    try:
        digest = ToolDefinition.from_dict(pin.definition).digest
    except (KeyError, TypeError, ValueError, AttributeError):
        return False  # not a definition at all
    if digest != pin.digest:  # the column the store compares served definitions with
        return False
    payload = pin_payload(
        server=pin.server,
        tool=pin.tool,
        digest=digest,
        accepted_by=pin.accepted_by_name,
        accepted_at=pin.accepted_at,
        key_id=pin.key_id,
    )
    if pin.key_id == CHAIN_SEAL:
        return pin.accepted_by_name == THE_DESK and hmac.compare_digest(_chain_seal(payload), pin.signature)
    public_key = signing.FileKeyring().public_key(pin.key_id)
    return public_key is not None and signature_valid(public_key, payload, pin.signature)


def pending_payload(*, server: str, tool: str, state: str, digest: str) -> dict[str, Any]:
    return {"type": "mcp_tool_pending", "server": server, "tool": tool, "state": state, "digest": digest}


def seal_pending(*, server: str, tool: str, state: str, digest: str) -> str:
    """The worker's seal over a change it recorded (what it saw served: `digest`, "" for gone),
    with the audit chain's key: an accept signs only what a worker sealed."""
    return _chain_seal(pending_payload(server=server, tool=tool, state=state, digest=digest))


def pending_verifies(pin: ToolPin) -> bool:
    """Whether the pin's pending change is one a worker recorded: its seal verifies over the
    server, tool, state and the digest of the pending definition the row holds."""
    if not pin.pending_state:
        return False
    if pin.pending_definition is None:
        digest = ""
    else:
        try:
            digest = ToolDefinition.from_dict(pin.pending_definition).digest
        except (KeyError, TypeError, ValueError, AttributeError):
            return False
    if digest != pin.pending_digest:
        return False
    expected = seal_pending(server=pin.server, tool=pin.tool, state=pin.pending_state, digest=digest)
    return hmac.compare_digest(expected, pin.pending_seal)
