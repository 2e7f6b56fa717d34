from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class ApprovalKind(models.TextChoices):
    TOOL_CALL = "tool_call"
    # An effect cut between the ledger's pending and confirmed: did it happen?
    RECONCILE = "reconcile"
    # A later kind, `question`, shares this lifecycle: the answer becomes the tool result.


# What each kind may be answered with.
KIND_VERDICTS = {
    "tool_call": ("approve", "reject", "edit"),
    "reconcile": ("confirm", "rerun", "reject"),
}


class ApprovalRequest(models.Model):
    """An interrupt: a tool call waiting for a human, raised at `checkpoint`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=20, choices=ApprovalKind.choices, default=ApprovalKind.TOOL_CALL)
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="approvals")
    attempt = models.ForeignKey("runs.Attempt", on_delete=models.SET_NULL, null=True, blank=True)
    checkpoint = models.ForeignKey("runs.Checkpoint", on_delete=models.PROTECT, related_name="approvals")
    tool_call_id = models.CharField(max_length=200)
    tool = models.CharField(max_length=100)
    arguments = models.JSONField()
    arguments_sha256 = models.CharField(max_length=64)
    reason = models.TextField(blank=True)
    # Empty: any member of the reviewers group. Otherwise only these usernames.
    assignees = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField()
    status = models.CharField(max_length=20, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            # One pending request per call and kind. Answered or cancelled ones stay as history:
            # a retry raises a fresh approval, an interrupted re-run a fresh reconciliation.
            models.UniqueConstraint(
                fields=["run", "tool_call_id", "kind"],
                condition=models.Q(status="pending"),
                name="approval_one_pending_per_call_and_kind",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=ApprovalStatus.values), name="approval_status_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=ApprovalKind.values), name="approval_kind_valid"
            ),
        ]
        indexes = [models.Index(fields=["status", "expires_at"])]

    def __str__(self) -> str:
        return f"{self.tool} for run {self.run_id} ({self.status})"


class Verdict(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"
    EDIT = "edit"
    CONFIRM = "confirm"  # reconcile: the effect did happen (with its external reference)
    RERUN = "rerun"  # reconcile: it did not; run it again (signed, verified by the gate)


class Decision(models.Model):
    """The approval record: what the reviewer decided, signed with the desk's Ed25519 key."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    request = models.OneToOneField(ApprovalRequest, on_delete=models.PROTECT, related_name="decision")
    verdict = models.CharField(max_length=10, choices=Verdict.choices)
    reason = models.TextField(blank=True)
    # Steering: reaches the model as a user message before its next call.
    note = models.TextField(blank=True)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="decisions")
    arguments = models.JSONField()  # the arguments the tool will run with (edited ones for edit)
    arguments_sha256 = models.CharField(max_length=64)
    decided_at = models.DateTimeField()
    not_after = models.DateTimeField()
    nonce = models.CharField(max_length=64, unique=True)
    payload = models.JSONField()
    signature = models.TextField()  # base64 Ed25519 signature over RFC 8785 payload
    key_id = models.CharField(max_length=64)
    consumed_at = models.DateTimeField(null=True, blank=True)
    external_ref = models.CharField(max_length=200, blank=True)  # confirm: where the effect is recorded

    class Meta:
        ordering = ["decided_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(verdict__in=Verdict.values), name="decision_verdict_valid"
            ),
        ]
