from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.conf import settings
from django.db import models

from reviewdesk.lib.limits import EXTERNAL_REF_MAX


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


# Where `Prefetch("decisions", to_attr=...)` leaves a row's decisions (approvals/reads/representation.py).
DECISION_LIST = "decision_list"


class ApprovalKind(models.TextChoices):
    TOOL_CALL = "tool_call"
    # An effect cut between the ledger's pending and confirmed: did it happen?
    RECONCILE = "reconcile"
    # The agent asks (agents.questions): the validated, signed answer becomes the tool result.
    QUESTION = "question"


class Verdict(models.TextChoices):
    APPROVE = "approve"
    REJECT = "reject"
    EDIT = "edit"
    CONFIRM = "confirm"  # reconcile: the effect did happen (with its external reference)
    RERUN = "rerun"  # reconcile: it did not; run it again (signed, verified by the gate)
    ANSWER = "answer"  # question: the answer, checked against its options or JSON Schema


# What each kind may be answered with.
KIND_VERDICTS: dict[str, tuple[str, ...]] = {
    ApprovalKind.TOOL_CALL: (Verdict.APPROVE, Verdict.REJECT, Verdict.EDIT),
    ApprovalKind.RECONCILE: (Verdict.CONFIRM, Verdict.RERUN, Verdict.REJECT),
    ApprovalKind.QUESTION: (Verdict.ANSWER, Verdict.REJECT),
}
# The verdicts that count towards a request's quorum, by kind: those that make the call's
# effect happen. A re-run of an effect of unknown outcome makes it happen again, so it needs as
# many reviewers as the call did (DESIGN: Quorum). Any other verdict settles a request on one
# reviewer's word: a rejection, an answer, or a confirmation that the effect did happen (it
# records the reference the reviewer gives, and runs nothing).
QUORUM_VERDICTS: dict[str, tuple[str, ...]] = {
    ApprovalKind.TOOL_CALL: (Verdict.APPROVE, Verdict.EDIT),
    ApprovalKind.RECONCILE: (Verdict.RERUN,),
    ApprovalKind.QUESTION: (),
}
# The kinds raised for a call waiting on a human's say (CallStatus.AWAITING).
AWAITING_KINDS = (ApprovalKind.TOOL_CALL, ApprovalKind.QUESTION)
# The statuses a decision row settled (ApprovalRequest.decision); the others have none that counts.
SETTLED_BY_DECISION = (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED)


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
    # Empty: any member of the reviewers group. Otherwise only these targets: usernames and
    # "group:NAME" (agents.routing), set when raised and changed by a hand-over.
    assignees = models.JSONField(default=list, blank=True)
    # Quorum: how many different reviewers must approve, and (when not empty) the groups a
    # counted vote must come from. Copied from the tool when raised.
    required_approvals = models.PositiveSmallIntegerField(default=1)
    quorum_groups = models.JSONField(default=list, blank=True)
    # The latest hand-over: who handed the item on, when, and the note they left for the next.
    handed_over_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    handed_over_at = models.DateTimeField(null=True, blank=True)
    handover_note = models.TextField(blank=True)
    expires_at = models.DateTimeField()
    # Time and escalation (approvals/lifecycle/clock.py): the response-time target's deadline, when the
    # assignees were reminded at its half, and how many steps up the chain the item has gone.
    respond_by = models.DateTimeField(null=True, blank=True)
    reminded_at = models.DateTimeField(null=True, blank=True)
    escalation_level = models.PositiveSmallIntegerField(default=0)
    # Notifications (approvals/lifecycle/notify.py): when the assignees were emailed for this item's
    # current assignment (None: not yet; cleared again by an escalation).
    notified_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=20, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    # A call of an external run (runs/external/): the verdicts its framework can carry out
    # (empty: the kind's, KIND_VERDICTS), the JSON Schema an edit is checked against (None: no
    # edit), the tool's description, the adapter's rendering of the effect (untrusted, as the
    # model's `reason` is), and whether the framework resumes per call or only once all its
    # calls of the checkpoint are decided ("per_call", "all_or_nothing"; empty: internal).
    verdicts = models.JSONField(default=list, blank=True)
    arguments_schema = models.JSONField(null=True, blank=True)
    description = models.TextField(blank=True, default="")
    preview = models.TextField(blank=True, default="")
    resume_policy = models.CharField(max_length=20, blank=True, default="")
    # Where each argument came from (agents.provenance), computed when raised:
    # {"sources": {pointer: [source, ...]}, "flags": [{"pointer", "code", "text"}]}. None: not
    # known (an external run's framework does not share its conversation).
    provenance = models.JSONField(null=True, blank=True)
    # A model's advisory reading of the call (approvals/lifecycle/reading.py): advice shown to
    # the reviewer, never read by anything that decides. None: no reading asked for.
    reading = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            # One pending request per call and kind. Answered or cancelled ones stay as history:
            # a retry raises a fresh approval, an interrupted re-run a fresh reconciliation.
            models.UniqueConstraint(
                fields=["run", "tool_call_id", "kind"],
                condition=models.Q(status=ApprovalStatus.PENDING),
                name="approval_one_pending_per_call_and_kind",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=ApprovalStatus.values), name="approval_status_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=ApprovalKind.values), name="approval_kind_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["status", "expires_at"]),
            # The desk's queue order (approvals.reads.queue.in_queue_order): a page without sorting every row.
            models.Index(fields=["status", "expires_at", "created_at", "id"], name="approval_queue_order"),
            # The API's list, newest first (api.paging.keyset_page orders by created_at, then id,
            # both descending): one page of a status without sorting every row of it.
            models.Index(fields=["status", "-created_at", "-id"], name="approval_newest"),
            # The calls assigned to someone (the desk's tiers, approvals.reads.queue.queue_tiers,
            # looks for one naming the reviewer; in_queue_order reads those naming them, by
            # expiry): found without reading the many open to any reviewer. Keep it last: SQLite,
            # with no statistics, breaks a tie between indexes on `status` in favour of the one
            # created last (the migration creates it after approval_newest; so does Django's
            # table rebuild, in this order). tests/reviewdesk/approvals/test_query_plans.py checks.
            models.Index(
                fields=["status", "expires_at", "created_at", "id"],
                condition=~models.Q(assignees=[]),
                name="approval_targeted",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} for run {self.run_id} ({self.status})"

    @property
    def allowed_verdicts(self) -> tuple[str, ...]:
        """The verdicts this request may be answered with: its own list (an external call's,
        what its framework can carry out), else its kind's."""
        return tuple(self.verdicts) if self.verdicts else KIND_VERDICTS[self.kind]

    @property
    def decision(self) -> Decision | None:
        """The decision that settled the request: its rejection, or the approval that completed
        its quorum (the latest). None while it is pending, and once cancelled or expired."""
        return settling_decision(self.status, self._decision_rows())

    def approving_decisions(self) -> list[Decision]:
        """The quorum's votes so far (QUORUM_VERDICTS: approvals; re-runs on a reconciliation),
        oldest first."""
        return approving_votes(self.kind, self._decision_rows())

    def refresh_from_db(self, using=None, fields=None, from_queryset=None) -> None:
        # A full refresh drops what prefetch_related cached, but not the list a page put in
        # `to_attr` (approval_rows): drop that too. A deferred field's load names its fields.
        if fields is None:
            self.__dict__.pop(DECISION_LIST, None)
        super().refresh_from_db(using=using, fields=fields, from_queryset=from_queryset)

    def _decision_rows(self):
        """The decisions as a page prefetched them into a list (`DECISION_LIST`: no related
        manager built per row), else `decisions.all()`, itself prefetched or read."""
        prefetched = getattr(self, DECISION_LIST, None)
        return prefetched if prefetched is not None else self.decisions.all()


def settling_decision(status: str, decisions: Iterable[Decision]) -> Decision | None:
    """`ApprovalRequest.decision` for a request in `status` with these `decisions` (a page read
    as rows has no model to ask: approvals.reads.representation.approvals_page_data)."""
    if status not in SETTLED_BY_DECISION:
        return None
    ordered = sorted(decisions, key=_in_time_order)
    return ordered[-1] if ordered else None


def approving_votes(kind: str, decisions: Iterable[Decision]) -> list[Decision]:
    """`ApprovalRequest.approving_decisions` for a request of `kind` with these `decisions`."""
    votes = QUORUM_VERDICTS[kind]
    return sorted((d for d in decisions if d.verdict in votes), key=_in_time_order)


def _in_time_order(decision: Decision) -> tuple:
    """By when decided, votes at one instant by id: the order the worker reads them in
    (approvals.reads.decisions), whichever order the database returned them."""
    return decision.decided_at, decision.id


class Decision(models.Model):
    """The approval record: what the reviewer decided, signed with the desk's Ed25519 key."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # One per request, except under a quorum: one per voting reviewer (ApprovalRequest.decision).
    request = models.ForeignKey(ApprovalRequest, on_delete=models.PROTECT, related_name="decisions")
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
    external_ref = models.CharField(
        max_length=EXTERNAL_REF_MAX, blank=True
    )  # confirm: where the effect is recorded
    answer = models.JSONField(null=True, blank=True)  # answer: the question's answer (its hash is signed)
    # What the reviewer was told when deciding: the request's reading then (the audit keeps it).
    reading = models.JSONField(null=True, blank=True)
    # An edit's arguments, where each came from: the request's sources for a value it kept, the
    # reviewer for one they wrote. None for any other verdict.
    provenance = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["decided_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(verdict__in=Verdict.values), name="decision_verdict_valid"
            ),
            # A reviewer counts once towards a quorum, and decides a request at most once.
            models.UniqueConstraint(fields=["request", "reviewer"], name="decision_one_per_reviewer"),
        ]


class ApprovalLink(models.Model):
    """A one-time link, emailed to one assignee, that opens one approval's page (never decides).

    The emailed token is this row's id signed with django.core.signing (salted, with an
    expiry); `used_at` records the single use (set by compare-and-set)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    request = models.ForeignKey(ApprovalRequest, on_delete=models.CASCADE, related_name="links")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    used_at = models.DateTimeField(null=True, blank=True)


class NotificationSent(models.Model):
    """That a reviewer was told of an item, and how (approvals/lifecycle/notify.py): `occasion`
    is "digest", or the immediate mail's ("created", "escalated", "reminder", "expiring").

    A digest lists only items with no row for its reader, and writes theirs in the transaction
    that claims it, so an item goes in one digest once. The unique constraint makes an
    "expiring" warning a claim: the tick whose insert lands sends it."""

    request = models.ForeignKey(ApprovalRequest, on_delete=models.CASCADE, related_name="notifications")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    occasion = models.CharField(max_length=20)
    sent_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "request", "occasion"], name="notification_once_per_occasion"
            ),
        ]


class GrantScope(models.TextChoices):
    """Where a standing grant applies (agents.grants.GrantScope)."""

    RUN = "run"
    AGENT = "agent"
    GLOBAL = "global"


class Grant(models.Model):
    """A standing approval ("always allow"), signed with the desk's key like a decision.

    The signed `payload` is what the gate trusts; the columns repeat it for queries and
    pages. Its uses are its `GrantUse` rows, counted under the grant row's lock against the
    signed `max_uses` (approvals.grants.use.grant_use): no counter of its own to drift from them.
    Revoking sets `revoked_at` and stores the signed `revocation`, also pinned in
    DESK_GRANT_REVOCATIONS_FILE (approvals.grants.revocations): every use re-reads all three, so
    clearing the columns does not bring a revoked grant back.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    approval = models.ForeignKey(ApprovalRequest, on_delete=models.PROTECT, related_name="grants")
    decision = models.OneToOneField(Decision, on_delete=models.PROTECT, related_name="grant")
    tool = models.CharField(max_length=100)
    agent = models.CharField(max_length=100)
    scope = models.CharField(max_length=10, choices=GrantScope.choices)
    run = models.ForeignKey(
        "runs.Run", on_delete=models.CASCADE, null=True, blank=True, related_name="grants"
    )
    # Exactly one of: the exact call's argument hash (and its arguments, to show), or constraints.
    arguments_sha256 = models.CharField(max_length=64, blank=True)
    arguments = models.JSONField(null=True, blank=True)
    constraints = models.JSONField(null=True, blank=True)
    max_uses = models.PositiveIntegerField()
    expires_at = models.DateTimeField()
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="grants")
    created_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    payload = models.JSONField()
    signature = models.TextField()
    key_id = models.CharField(max_length=64)
    # The revocation's signed payload and signature (agents.grants.revocation_payload), or none.
    revocation = models.JSONField(null=True, blank=True)
    revocation_signature = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(scope__in=GrantScope.values), name="grant_scope_valid"),
            models.CheckConstraint(condition=models.Q(max_uses__gte=1), name="grant_max_uses_positive"),
        ]
        indexes = [models.Index(fields=["tool", "revoked_at", "expires_at"])]

    def __str__(self) -> str:
        return f"grant {self.pk} for {self.tool} ({self.scope})"

    @property
    def uses(self) -> int:
        """How many calls it allowed: its use rows, as counted for a list (`use_count`, see
        approvals.grants.access.grants_with_uses), else counted now."""
        counted = self.__dict__.get("use_count")
        return int(counted) if counted is not None else self.grant_uses.count()


class GrantUse(models.Model):
    """One call a grant allowed, written with its ledger row: one use per call, ever. The rows
    are the count of its uses, numbered 1 to max_uses: a second row with a number taken (two
    uses racing, or rows tampered with) is refused by the database, and the gate asks a human."""

    grant = models.ForeignKey(Grant, on_delete=models.PROTECT, related_name="grant_uses")
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="grant_uses")
    tool_call_id = models.CharField(max_length=200)
    idempotency_key = models.CharField(max_length=300, unique=True)  # the ledger row's key
    number = models.PositiveIntegerField()  # this use's number, 1 to max_uses
    used_at = models.DateTimeField()

    class Meta:
        ordering = ["used_at"]
        constraints = [
            models.UniqueConstraint(fields=["grant", "number"], name="grant_use_number_unique"),
        ]
