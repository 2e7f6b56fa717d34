"""What a verified Slack request does (views.py has checked signature, age and replay).

A click is a decision made on the server, exactly as a desk button's post is: the clicking
Slack user is resolved through their link (never by name or email), and `approval_decide`
checks, signs, stores and audits it (with where it came from), and the resume follows. Every
refusal (unlinked, the run's submitter, not theirs to decide, decided, expired, cancelled, a
stale button, a tool that needs a device key) is told to the clicker and changes nothing."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from reviewdesk.approvals.access import approval_get_visible, may_decide
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import ApprovalRequest, ApprovalStatus, Verdict
from reviewdesk.lib.errors import DeskError, Invalid, NotFound, explain
from reviewdesk.slack.blocks import (
    APPROVE,
    REASON_BLOCK,
    REASON_INPUT,
    REJECT,
    REJECT_VIEW,
    desk_url,
    escaped,
    one_line,
    reject_view,
)
from reviewdesk.slack.client import web_client
from reviewdesk.slack.linking import link_complete, link_of
from reviewdesk.slack.models import SlackLink

logger = logging.getLogger(__name__)

DONE = {Verdict.APPROVE: "Approved", Verdict.REJECT: "Rejected"}


def unlinked_text() -> str:
    return (
        "Your Slack user is not linked to a desk account, so this click did nothing. To link it: "
        f"open {settings.DESK_PUBLIC_URL}{reverse('settings')}, choose “Link Slack”, and send "
        "the code it shows here as `/desk link CODE`."
    )


def _who(payload: dict[str, Any]) -> tuple[str, str]:
    """(workspace, Slack user) of the clicker: the workspace the request comes from, as a
    command's `team_id` names it (a link made there is found here)."""
    user = payload.get("user") or {}
    team = (payload.get("team") or {}).get("id") or user.get("team_id") or ""
    return str(team), str(user.get("id") or "")


def workspace_refused(team: str) -> bool:
    """SLACK_TEAM_IDS, when set, names the only workspaces whose requests are read."""
    return bool(settings.SLACK_TEAM_IDS) and team not in settings.SLACK_TEAM_IDS


def _target(value: Any) -> tuple[str, str]:
    try:
        found = json.loads(value)
        return str(found["approval"]), str(found["checkpoint"])
    except (TypeError, ValueError, KeyError):
        raise Invalid("this button is not one the desk drew") from None


def _via(link: SlackLink) -> dict[str, Any]:
    return {"channel": "slack", "slack_team": link.team_id, "slack_user": link.slack_user_id, "link": link.pk}


def _tell(payload: dict[str, Any], text: str) -> None:
    """An ephemeral reply to the clicker, where they clicked (best effort: the message itself is
    redrawn by delivery.py, and a refusal changed nothing)."""
    channel = (payload.get("channel") or {}).get("id") or (payload.get("container") or {}).get("channel_id")
    _, user = _who(payload)
    if not channel or not user:
        return
    try:
        web_client().chat_postEphemeral(channel=channel, user=user, text=text)
    except Exception as exc:
        logger.warning("slack: could not reply to %s in %s: %s", user, channel, type(exc).__name__)


def decide(link: SlackLink, value: Any, verdict: str, *, reason: str = "") -> str:
    """Decide through `link` as the desk would; what to tell the clicker. Raises DeskError."""
    approval_id, checkpoint_id = _target(value)
    decision = approval_decide(
        approval_id=approval_id,
        reviewer=link.user,
        verdict=verdict,
        checkpoint_id=checkpoint_id,
        reason=reason,
        via=_via(link),
    )
    approval = decision.request
    done = f"{DONE[verdict]} {one_line(approval.tool)} for run {str(approval.run_id)[:8]}."
    if approval.status == ApprovalStatus.PENDING:
        votes = len(approval.approving_decisions())
        done = f"{done[:-1]}: {votes} of {approval.required_approvals}, waiting for another reviewer."
    return done


def refusal(exc: DeskError, value: Any = None) -> str:
    text = f"Not decided: {escaped(explain(exc))}"
    if exc.code == "device_signature_required" and value is not None:
        try:
            approval = ApprovalRequest.objects.get(pk=_target(value)[0])
            text += f". Open it on the desk: {desk_url(approval)}"
        except (ApprovalRequest.DoesNotExist, DeskError, ValueError):
            pass
    return text


def block_action(payload: dict[str, Any]) -> dict[str, Any] | None:
    """A button: Approve decides at once; Reject opens the reason dialog; Open is a link."""
    actions = payload.get("actions") or []
    if not actions:
        return None
    action = actions[0]
    action_id, value = action.get("action_id"), action.get("value")
    if action_id not in (APPROVE, REJECT) or workspace_refused(_who(payload)[0]):
        return None  # "Open on the desk" is a link: Slack tells us of it, there is nothing to do
    link = link_of(team_id=_who(payload)[0], slack_user_id=_who(payload)[1])
    if link is None:
        _tell(payload, unlinked_text())
        return None
    if action_id == APPROVE:
        try:
            _tell(payload, decide(link, value, Verdict.APPROVE))
        except DeskError as exc:
            _tell(payload, refusal(exc, value))
        return None
    try:
        approval = approval_get_visible(approval_id=_target(value)[0], user=link.user)
    except (DeskError, ValueError) as exc:
        _tell(payload, refusal(exc if isinstance(exc, DeskError) else NotFound("no such approval")))
        return None
    if approval.status != ApprovalStatus.PENDING:
        _tell(payload, f"Not decided: this approval was already {approval.status}.")
        return None
    if approval.expires_at <= timezone.now():
        _tell(payload, "Not decided: this approval has expired.")
        return None
    if not may_decide(link.user, approval) or link.user.pk == approval.run.submitted_by_id:
        # Before the dialog: a reason typed for nothing is a reviewer's time lost.
        _tell(payload, "Not decided: this approval is not yours to decide.")
        return None
    try:
        web_client().views_open(trigger_id=payload.get("trigger_id", ""), view=reject_view(value, approval))
    except Exception:
        logger.warning("slack: could not open the reject dialog", exc_info=True)
        _tell(payload, f"The reject dialog did not open: reject it on the desk, {desk_url(approval)}")
    return None


def view_submission(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The reject dialog's submit: the reason, then the decision. A refusal is shown in the
    dialog, under the reason."""
    view = payload.get("view") or {}
    if view.get("callback_id") != REJECT_VIEW or workspace_refused(_who(payload)[0]):
        return None
    link = link_of(team_id=_who(payload)[0], slack_user_id=_who(payload)[1])
    if link is None:
        return {"response_action": "errors", "errors": {REASON_BLOCK: unlinked_text()[:150]}}
    values = ((view.get("state") or {}).get("values") or {}).get(REASON_BLOCK) or {}
    reason = str((values.get(REASON_INPUT) or {}).get("value") or "").strip()
    try:
        decide(link, view.get("private_metadata"), Verdict.REJECT, reason=reason)
    except DeskError as exc:
        return {"response_action": "errors", "errors": {REASON_BLOCK: refusal(exc)[:150]}}
    return {"response_action": "clear"}


def interaction_handle(payload: dict[str, Any]) -> dict[str, Any] | None:
    """A verified interaction: the JSON to answer with, or None for an empty 200."""
    kind = payload.get("type")
    if kind == "block_actions":
        return block_action(payload)
    if kind == "view_submission":
        return view_submission(payload)
    return None


def command_handle(form: dict[str, str]) -> dict[str, Any]:
    """`/desk link CODE` (and `/desk help`): the answer, shown to the sender only."""
    words = (form.get("text") or "").split()
    team, user = form.get("team_id", ""), form.get("user_id", "")
    if workspace_refused(team):
        return _ephemeral("This desk does not take requests from this workspace.")
    if len(words) >= 2 and words[0].lower() == "link" and team and user:
        try:
            # "ABCD EFGH JKMN" as typed from the page is the code too.
            link = link_complete(code="".join(words[1:]), team_id=team, slack_user_id=user)
        except DeskError as exc:
            return _ephemeral(f"Not linked: {explain(exc)}.")
        return _ephemeral(
            f"Linked: this Slack user is now desk account {link.user.get_username()}. What the desk "
            "would mail you now comes here (change it on your settings page); your clicks here decide "
            "as you, with the desk's rules."
        )
    linked = link_of(team_id=team, slack_user_id=user)
    who = (
        f"You are linked to desk account {linked.user.get_username()}."
        if linked
        else "You are not linked yet."
    )
    return _ephemeral(
        f"{who} To link: open {settings.DESK_PUBLIC_URL}{reverse('settings')}, choose “Link Slack”, "
        "and send `/desk link CODE` with the code it shows."
    )


def _ephemeral(text: str) -> dict[str, Any]:
    return {"response_type": "ephemeral", "text": text}
