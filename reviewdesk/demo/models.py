from __future__ import annotations

from django.db import models


class DemoRefund(models.Model):
    """The demo ledger that `refund_payment` changes (a database effect)."""

    order_id = models.CharField(max_length=50)
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    idempotency_key = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)


class DemoOrder(models.Model):
    """An order a refund was asked on: the row a refund's policy locks, so that the policy's
    "what is left" and the refund commit with no other refund of the order in between."""

    order_id = models.CharField(max_length=50, primary_key=True)
