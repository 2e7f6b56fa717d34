"""The demo agent's world on Django: the email backend and the DemoRefund table.

It sorts its failures into the runtime's classes (agents/tools.py): a failure
that certainly left the world unchanged is `ToolUnavailable` (retried), and a
failure after the message may have reached the mail server propagates as is
(outcome unknown: a human reconciles it).
"""

from __future__ import annotations

import smtplib
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.smtp import EmailBackend as SMTPBackend
from django.core.mail.utils import DNS_NAME
from django.db import OperationalError, transaction
from django.db.models import Sum

from agents.tools import ToolError, ToolUnavailable
from reviewdesk.demo.models import DemoOrder, DemoRefund


class _PhaseTrackingSMTP(smtplib.SMTP):
    """smtplib.SMTP that remembers whether the DATA command was sent: until then nothing of
    the message has left, afterwards it may have been accepted without our hearing so."""

    data_sent = False

    def data(self, msg: Any) -> tuple[int, bytes]:
        self.data_sent = True
        return super().data(msg)


class _PhaseTrackingSMTPSSL(smtplib.SMTP_SSL):
    data_sent = False

    def data(self, msg: Any) -> tuple[int, bytes]:
        self.data_sent = True
        return super().data(msg)


class _PhaseTrackingBackend(SMTPBackend):
    """Django's SMTP backend, from the same EMAIL_* settings, on the phase-tracking client."""

    client: _PhaseTrackingSMTP | _PhaseTrackingSMTPSSL | None = None  # kept after close()

    @property
    def connection_class(self) -> type[smtplib.SMTP]:
        return _PhaseTrackingSMTPSSL if self.use_ssl else _PhaseTrackingSMTP

    def open(self) -> bool | None:
        created = super().open()
        self.client = self.connection
        return created

    @property
    def data_sent(self) -> bool:
        return bool(self.client is not None and self.client.data_sent)


def _transient_reply(code: int) -> bool:
    return 400 <= code < 500


class DjangoDemoWorld:
    def send_email(self, *, to: str, subject: str, body: str, idempotency_key: str) -> str:
        message_id = f"<{idempotency_key.replace(':', '.')}@{DNS_NAME}>"
        connection = get_connection(fail_silently=False)
        if isinstance(connection, SMTPBackend):
            connection = _PhaseTrackingBackend(fail_silently=False)
        message = EmailMessage(
            subject=subject,
            body=body,
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=[to],
            headers={"Message-ID": message_id, "X-Idempotency-Key": idempotency_key},
            connection=connection,
        )
        try:
            message.send(fail_silently=False)
        except Exception as exc:
            if not isinstance(connection, _PhaseTrackingBackend):
                raise  # another backend: it knows nothing of SMTP's phases
            raise _classify_smtp_failure(exc, data_sent=connection.data_sent) from exc
        return message_id

    def refunded(self, order_id: str) -> Decimal:
        try:
            total = DemoRefund.objects.filter(order_id=order_id).aggregate(total=Sum("amount"))["total"]
        except OperationalError as exc:  # a lock timeout, the database briefly away: nothing written
            raise ToolUnavailable(f"the refunds table is unavailable: {exc}") from exc
        return total or Decimal(0)

    def hold_order(self, order_id: str) -> None:
        """Lock the order's row to the end of the transaction (made the first time: a
        concurrent maker waits on the key, then locks the row the other committed). On SQLite
        the transaction's IMMEDIATE lock already holds every writer back."""
        if not transaction.get_connection().in_atomic_block:
            return  # nothing to hold it for: a policy asked outside the effect's transaction
        try:
            DemoOrder.objects.select_for_update().get_or_create(order_id=order_id)
        except OperationalError as exc:  # a lock timeout: nothing written, try again later
            raise ToolUnavailable(f"the order is busy: {exc}") from exc

    def refund(self, *, order_id: str, amount: Decimal, idempotency_key: str) -> dict[str, Any]:
        try:
            refund = DemoRefund.objects.create(
                order_id=order_id, amount=amount, idempotency_key=idempotency_key
            )
        except OperationalError as exc:  # rolls back with the ledger row: certainly not refunded
            raise ToolUnavailable(f"the refunds table is unavailable: {exc}") from exc
        return {"refund_id": refund.id, "order_id": order_id, "amount": str(amount)}


def _classify_smtp_failure(exc: Exception, *, data_sent: bool) -> Exception:
    """The class of an SMTP failure: ToolUnavailable when the message certainly was not
    accepted and a later try may pass (4xx, no connection); ToolError for a definite 5xx
    refusal; the exception itself (outcome unknown) when the line went quiet after DATA."""
    if isinstance(exc, smtplib.SMTPResponseException) and exc.smtp_code >= 400:
        # A definite reply: the server said no, so the message was not accepted, even after DATA.
        if _transient_reply(exc.smtp_code):
            return ToolUnavailable(f"the mail server answered {exc.smtp_code}: {exc.smtp_error!r}")
        return ToolError(f"the mail server refused the message: {exc.smtp_code} {exc.smtp_error!r}")
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in exc.recipients.values()]
        if codes and all(_transient_reply(code) for code in codes):
            return ToolUnavailable(f"the mail server deferred the recipients: {exc.recipients}")
        return ToolError(f"the mail server refused the recipients: {exc.recipients}")
    if data_sent:
        return exc  # the message may have been accepted before the line went quiet: unknown
    if isinstance(exc, OSError | smtplib.SMTPException):  # refused, reset, timed out, no greeting
        return ToolUnavailable(f"the mail server is unavailable: {type(exc).__name__}: {exc}")
    return exc
