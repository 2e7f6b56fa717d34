"""What the client raises: the desk's problem+json answers, and local refusals."""

from __future__ import annotations

from typing import Any


class DeskError(Exception):
    """The desk answered with an error (RFC 9457 problem+json), or could not be reached
    (`status` 0). `code` is the desk's machine-readable code ("conflict", "consumed", ...)."""

    def __init__(self, status: int, code: str, detail: str, body: Any = None) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail, self.body = status, code, detail, body


class AlreadyConsumed(DeskError):
    """The decision was consumed before (409 `consumed`, or this process's own record of it):
    the tool must not run again."""


class DecisionExpired(DeskError):
    """The decision is past its `not_after` (410 `expired`): ask for a new one."""


class VerificationError(Exception):
    """A decision was refused locally before any tool ran. `reason` names the failed check
    (`unpinned_key`, `signature`, `binding:audience`, `arguments_changed`, `expired`, ...)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


class WebhookError(Exception):
    """A webhook delivery whose `Desk-Signature` is missing, malformed, wrong or too old."""
