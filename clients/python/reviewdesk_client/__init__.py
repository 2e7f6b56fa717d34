"""Review Desk for agents built with any framework: submit gated tool calls, wait for the
reviewers, verify their signed decisions locally before the tool runs, consume once, report.

It imports nothing of the desk: it speaks the desk's HTTP API, hashes with the desk's own RFC 8785
canonicaliser and verifies Ed25519 signatures with keys pinned from configuration.
"""

from reviewdesk_client.canonical import args_sha256, jcs
from reviewdesk_client.client import AsyncDeskClient, DeskClient
from reviewdesk_client.errors import (
    AlreadyConsumed,
    DecisionExpired,
    DeskError,
    VerificationError,
    WebhookError,
)
from reviewdesk_client.models import Call, Outcome, Ticket, Verified
from reviewdesk_client.store import MemoryStore, SQLiteStore, Store
from reviewdesk_client.verify import KeyRing, verify_decision

__all__ = [
    "AlreadyConsumed",
    "AsyncDeskClient",
    "Call",
    "DecisionExpired",
    "DeskClient",
    "DeskError",
    "KeyRing",
    "MemoryStore",
    "Outcome",
    "SQLiteStore",
    "Store",
    "Ticket",
    "VerificationError",
    "Verified",
    "WebhookError",
    "args_sha256",
    "jcs",
    "verify_decision",
]
