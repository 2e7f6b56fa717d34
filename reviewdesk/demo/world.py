"""The demo agent's world on Django: the email backend and the DemoRefund table."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage
from django.core.mail.utils import DNS_NAME
from django.db.models import Sum

from reviewdesk.demo.models import DemoRefund


class DjangoDemoWorld:
    def send_email(self, *, to: str, subject: str, body: str, idempotency_key: str) -> str:
        message_id = f"<{idempotency_key.replace(':', '.')}@{DNS_NAME}>"
        EmailMessage(
            subject=subject,
            body=body,
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=[to],
            headers={"Message-ID": message_id, "X-Idempotency-Key": idempotency_key},
        ).send(fail_silently=False)
        return message_id

    def refunded(self, order_id: str) -> Decimal:
        return DemoRefund.objects.filter(order_id=order_id).aggregate(total=Sum("amount"))[
            "total"
        ] or Decimal(0)

    def refund(self, *, order_id: str, amount: Decimal, idempotency_key: str) -> dict[str, Any]:
        refund = DemoRefund.objects.create(order_id=order_id, amount=amount, idempotency_key=idempotency_key)
        return {"refund_id": refund.id, "order_id": order_id, "amount": str(amount)}
