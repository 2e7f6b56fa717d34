from __future__ import annotations

from django.db import models


class DemoRefund(models.Model):
    """The demo ledger that `refund_payment` changes (a database effect)."""

    order_id = models.CharField(max_length=50)
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    idempotency_key = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
