from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from agents.tools import call_failed


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    INPUT_REQUIRED = "input_required"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ENDED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class RunKind(models.TextChoices):
    """Who executes the run: the desk's own workers, or an agent framework outside the desk
    (runs/external/) that submits its gated calls and reports their outcome. The Celery tasks,
    leases and the sweeper act on internal runs only."""

    INTERNAL = "internal"
    EXTERNAL = "external"


class ErrorKind(models.TextChoices):
    """Why a run failed (Run.error_kind): the runtime's `FailureKind`s, and the desk's own.
    Only transient failures are retried automatically."""

    TRANSIENT = "transient"  # the model's service or the database hiccuped: retried with backoff
    MODEL = "model"  # the model misbehaved or its request was refused for good
    TOOL = "tool"
    UNAVAILABLE = "unavailable"  # a tool's service stayed down through its retry budget
    APPROVAL = "approval"  # the gate refused a decision: a retry asks a human again
    APPROVAL_EXPIRED = "approval_expired"  # no decision in time, under the agent's `fail` policy
    INTERNAL = "internal"  # a bug, or workers that kept dying
    CANCELLED = "cancelled"


class AttemptStatus(models.TextChoices):
    RUNNING = "running"
    RELEASED = "released"  # stopped at an interrupt or the end
    FAILED = "failed"
    LOST = "lost"  # lease expired under it
    CANCELLED = "cancelled"  # the run was cancelled while it ran


class EffectStatus(models.TextChoices):
    """A ledger row's state: the runtime's `LedgerStatus` as database choices.
    `unknown`: cut between pending and confirmed; a human decides."""

    PENDING = "pending"
    CONFIRMED = "confirmed"
    UNKNOWN = "unknown"
    RETRYING = "retrying"  # the last try failed transiently and certainly did not take effect


class Run(models.Model):
    """One submitted task. The database row is the source of truth for its status."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=10, choices=RunKind.choices, default=RunKind.INTERNAL)
    # An external run's framework ("openai-agents", "langgraph", …) and its own identity for the
    # run, unique per submitting account; both empty for internal runs.
    framework = models.CharField(max_length=50, blank=True, default="")
    external_id = models.CharField(max_length=200, blank=True, default="")
    title = models.CharField(max_length=200, blank=True, default="")  # an external run's, as sent
    # An external run's context as its framework sent it (the last messages, untrusted, shown
    # as such): {"messages": [{"role", "content"}], "truncated": bool}. None for internal runs.
    context = models.JSONField(null=True, blank=True)
    agent = models.CharField(max_length=100)
    input = models.TextField()
    model = models.JSONField(null=True)  # None for an external run: its framework holds the model
    reviewers = models.JSONField(default=list, blank=True)  # usernames; empty: any reviewer
    approval_ttl_seconds = models.PositiveIntegerField()
    metadata = models.JSONField(default=dict, blank=True)
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs")
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    output = models.TextField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    error_kind = models.CharField(max_length=20, choices=ErrorKind.choices, blank=True)
    # Automatic retries of transient failures so far, and when the next may start.
    retries = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # Bumped when a retry restarts from an earlier checkpoint: new tool-call ids never
    # collide with the abandoned branch's (the ledger is keyed on them).
    branch = models.PositiveIntegerField(default=0)
    task_id = models.CharField(max_length=64, blank=True)  # the last task enqueued, for revoke
    cancel_epoch = models.PositiveIntegerField(default=0)
    lease_epoch = models.PositiveIntegerField(default=0)
    # The lease epoch when the run was last retried by hand: the attempts up to it died, if
    # they did, before that retry, and do not count towards DESK_MAX_LOST_ATTEMPTS after it.
    retried_at_epoch = models.PositiveIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    revision = models.PositiveIntegerField(default=0)
    # The agent's definition the run goes on under (agents/definition.py): the one it was
    # submitted with, until a resume under another found its waiting calls still hold. The
    # SHA-256 of its canonical description, and a short digest of each part (to say in words
    # what changed). Empty: a run from before definitions were recorded (unknown: checked).
    definition_sha256 = models.CharField(max_length=64, blank=True, default="")
    definition_digests = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(status__in=RunStatus.values), name="run_status_valid"),
            models.CheckConstraint(condition=models.Q(kind__in=RunKind.values), name="run_kind_valid"),
            # One external run per (submitting account, external id): a framework's submits for
            # the same thread meet the same run.
            models.UniqueConstraint(
                fields=["submitted_by", "external_id"],
                condition=models.Q(kind=RunKind.EXTERNAL),
                name="run_external_id_unique",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "updated_at"]),
            # Newest first (the runs page and the runs API's keyset pages): a page of a long
            # history without sorting all of it (`make bench` #9).
            models.Index(fields=["created_at", "id"], name="run_created_order"),
        ]

    def __str__(self) -> str:
        return f"run {self.id} ({self.agent}, {self.status})"

    @property
    def is_external(self) -> bool:
        return self.kind == RunKind.EXTERNAL


class Attempt(models.Model):
    """One execution of a run by a worker, holding the lease `lease_epoch`."""

    Status = AttemptStatus

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    lease_epoch = models.PositiveIntegerField()
    worker = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    started_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [
            models.UniqueConstraint(fields=["run", "number"], name="attempt_number_unique"),
            models.CheckConstraint(
                condition=models.Q(status__in=AttemptStatus.values),
                name="attempt_status_valid",
            ),
        ]


class Message(models.Model):
    """The run's append-only conversation log; checkpoints say how many rows they cover."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="messages")
    position = models.PositiveIntegerField()
    role = models.CharField(max_length=20)
    body = models.JSONField()  # the whole chat message as sent to the model
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when a retry restarts from an earlier checkpoint: kept for history, never sent again.
    superseded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "position"],
                condition=models.Q(superseded_at__isnull=True),
                name="message_position_unique_live",
            )
        ]


class Checkpoint(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    attempt = models.ForeignKey(Attempt, on_delete=models.SET_NULL, null=True, blank=True)
    number = models.PositiveIntegerField()  # 1, 2, … within the run, in commit order
    branch = models.PositiveIntegerField(default=0)  # Run.branch when written: its line of history
    schema_version = models.PositiveIntegerField()
    message_count = models.PositiveIntegerField()
    snapshot = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="checkpoint_number_unique")]


class SideEffect(models.Model):
    """The ledger: one row per world-changing tool call, keyed by run and call."""

    Status = EffectStatus

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="side_effects")
    idempotency_key = models.CharField(max_length=200, unique=True)
    tool_call_id = models.CharField(max_length=200)
    tool = models.CharField(max_length=100)
    status = models.CharField(max_length=20, choices=Status.choices)
    decision = models.ForeignKey("approvals.Decision", on_delete=models.PROTECT, null=True, blank=True)
    # The attempt that wrote `pending` (or reopened it for a re-run): only it may confirm.
    attempt = models.ForeignKey(Attempt, on_delete=models.SET_NULL, null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    external_ref = models.CharField(max_length=200, blank=True)
    # Transient failures of this call so far (each one certainly left the world unchanged),
    # and the last one's error: shown on the run page, counted against the retry budget.
    retries = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    # `retries` when the run was last retried by hand or followed up: the retry budgets count
    # the failures since (either is a new go at the tool), while `retries` keeps the call's history.
    retries_at_retry = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["run", "created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=EffectStatus.values),
                name="side_effect_status_valid",
            ),
        ]

    @property
    def outcome(self) -> str | None:
        """How the call ended: "failed" when its result says so (`agents.tools.call_failed`: a
        tool error, a command that exited non-zero), else "succeeded"; None until it is confirmed.
        `status` says whether the effect happened, this whether it did what was asked."""
        if self.status != EffectStatus.CONFIRMED:
            return None
        return "failed" if call_failed(self.result) else "succeeded"


class FollowUp(models.Model):
    """A message the submitter posted on a succeeded run: it opens the next turn of the run's
    thread (the submission is turn 0). The message itself is a `user` row of the log at
    `position`; this row says it came from the submitter, not from a reviewer's note."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="follow_ups")
    number = models.PositiveIntegerField()  # 1, 2, … within the run
    input = models.TextField()
    position = models.PositiveIntegerField()  # the user message's position in the log
    posted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="follow_up_number_unique")]
