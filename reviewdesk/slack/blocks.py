"""What a Slack message about desk items says, in Block Kit: per item the call's preview in a
few lines (recipient and subject, amount and order, command and directory), its warnings and
risk line, the expiry, and either its buttons (Approve, Reject, Open on the desk) or, once it
is no longer pending, who decided what and when.

Everything the agent wrote goes in `plain_text` (no mrkdwn, no mentions, no links); the few
mrkdwn lines escape `& < >` (Slack's own escaping), so an argument cannot ping a channel or
dress itself as a link. The buttons carry the item's id and checkpoint, nothing else: a click
is judged on the server, as a desk button's post is (interactions.py)."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.urls import reverse

from reviewdesk.approvals.lifecycle.notify import shown
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest, ApprovalStatus, Verdict
from reviewdesk.approvals.reads.representation import approval_data
from reviewdesk.desk.cards import call_summary

APPROVE, REJECT, OPEN = "desk_approve", "desk_reject", "desk_open"
REJECT_VIEW = "desk_reject_reason"  # the reject dialog's callback_id
REASON_BLOCK, REASON_INPUT = "reason", "reason_input"
FACTS_MAX = 4  # label and value pairs in one item (Slack allows 10 fields)
WARNINGS_MAX = 3
PLAIN_MAX = 1900  # Slack refuses a text object past 2,000 (3,000 in a section)


def escaped(text: Any) -> str:
    """`text` for mrkdwn: Slack's three escapes, so `<!channel>` is text, not a ping."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plain(text: Any, limit: int = PLAIN_MAX) -> dict[str, Any]:
    line = str(text)
    return {
        "type": "plain_text",
        "text": line if len(line) <= limit else line[: limit - 1] + "…",
        "emoji": False,
    }


def desk_url(approval: ApprovalRequest) -> str:
    return settings.DESK_PUBLIC_URL + reverse("approval", args=[approval.pk])


def button_value(approval: ApprovalRequest) -> str:
    """What a button sends back: the item and the checkpoint it was raised at (a button drawn
    before the call was raised again is refused as a stale page is)."""
    return json.dumps({"approval": str(approval.pk), "checkpoint": str(approval.checkpoint_id)})


def decides_in_slack(approval: ApprovalRequest, summary: dict[str, Any] | None) -> str:
    """Empty when Approve may be offered in Slack; else why the desk must open."""
    if approval.kind == ApprovalKind.QUESTION:
        return "The agent asks a question: answer it on the desk."
    if approval.kind != ApprovalKind.TOOL_CALL:
        return "Reconcile this call on the desk."
    if Verdict.APPROVE not in approval.allowed_verdicts:
        return "This call is answered on the desk."
    if summary is not None and summary.get("device_key"):
        return "Approving it needs your device key: open it on the desk (you can reject here)."
    return ""


def one_line(text: Any, limit: int = 100) -> str:
    """Agent-written text (a tool's or an agent's name from a framework) for mrkdwn: on one
    line, invisible characters escaped, Slack's markup escaped."""
    return escaped(shown(text, limit))


def _settled_line(approval: ApprovalRequest) -> str:
    """Who decided what and when, for an item no longer pending."""
    decisions = list(approval.decisions.select_related("reviewer").order_by("decided_at"))
    settling = approval.decision
    at = ""
    if approval.status == ApprovalStatus.APPROVED:
        votes = approval.approving_decisions()
        names = ", ".join(d.reviewer.get_username() for d in votes)
        at = f"{settling.decided_at:%Y-%m-%d %H:%M} UTC" if settling else ""
        return f"✅ Approved by {names} at {at}"
    if approval.status == ApprovalStatus.REJECTED:
        rejection = settling or next((d for d in decisions if d.verdict == Verdict.REJECT), None)
        if rejection is None:
            return "❌ Rejected"
        reason = f": {shown(rejection.reason, 200)}" if rejection.reason else ""
        return f"❌ Rejected by {rejection.reviewer.get_username()} at {rejection.decided_at:%Y-%m-%d %H:%M} UTC{reason}"
    if approval.status == ApprovalStatus.EXPIRED:
        return f"⌛ Expired undecided at {approval.expires_at:%Y-%m-%d %H:%M} UTC"
    if approval.status == ApprovalStatus.CANCELLED:
        return "⊘ Cancelled with its run: nothing to decide"
    return f"{approval.status}"


def item_blocks(approval: ApprovalRequest) -> list[dict[str, Any]]:
    """One item: its header, preview, warnings, risk, expiry, and its buttons or its outcome."""
    payload = approval_data(approval)
    summary = call_summary(payload) if approval.kind == ApprovalKind.TOOL_CALL else None
    run = approval.run
    what = "A question" if approval.kind == ApprovalKind.QUESTION else f"*{one_line(approval.tool)}*"
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "block_id": f"head:{approval.pk}",
            "text": {"type": "mrkdwn", "text": f"{what} · {one_line(run.agent)} · run {str(run.pk)[:8]}"},
        }
    ]
    if summary is not None:
        fields = []
        for label, value in summary["facts"][:FACTS_MAX]:
            fields += [{"type": "mrkdwn", "text": f"*{one_line(label)}*"}, plain(shown(value, 300))]
        if fields:
            blocks.append({"type": "section", "fields": fields})
        if summary["body"] and not any(label == "To" for label, _ in summary["facts"]):
            first = str(summary["body"]).strip().splitlines()[0] if str(summary["body"]).strip() else ""
            if first:
                blocks.append({"type": "section", "text": plain(shown(first, 300))})
        warnings = [f"⚠ {shown(w, 300)}" for w in summary["unusual"][:WARNINGS_MAX]]
        if len(summary["unusual"]) > WARNINGS_MAX:
            warnings.append(f"… and {len(summary['unusual']) - WARNINGS_MAX} more on the desk")
        notes = warnings + ([summary["risk"]] if summary["risk"] else [])
        if summary.get("reading_line"):
            notes.append(f"{summary['reading_line']} (model output, advisory)")
        if notes:
            blocks.append({"type": "context", "elements": [plain(n) for n in notes[:9]]})
    else:
        question = approval.arguments.get("question", "") if approval.kind == ApprovalKind.QUESTION else ""
        if question:
            blocks.append({"type": "section", "text": plain(shown(question, 500))})
    if approval.status == ApprovalStatus.PENDING:
        blocks += _pending_blocks(approval, payload, summary)
    else:
        blocks.append(
            {"type": "section", "block_id": f"outcome:{approval.pk}", "text": plain(_settled_line(approval))}
        )
    return blocks


def _pending_blocks(
    approval: ApprovalRequest, payload: dict[str, Any], summary: dict[str, Any] | None
) -> list[dict[str, Any]]:
    expires = int(approval.expires_at.timestamp())
    fallback = f"{approval.expires_at:%Y-%m-%d %H:%M} UTC"
    lines = [f"Expires <!date^{expires}^{{date_short_pretty}} at {{time}}|{fallback}>"]
    quorum = payload.get("quorum") or {}
    if quorum.get("required", 1) > 1:
        by = ", ".join(escaped(n) for n in quorum.get("approved_by", [])) or "nobody yet"
        lines.append(f"{len(quorum.get('approved_by', []))} of {quorum['required']} approvals ({by})")
    why_not = decides_in_slack(approval, summary)
    if why_not:
        lines.append(escaped(why_not))
    blocks: list[dict[str, Any]] = [
        {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(lines)}]}
    ]
    value = button_value(approval)
    buttons: list[dict[str, Any]] = []
    if not why_not:
        approve: dict[str, Any] = {
            "type": "button",
            "action_id": APPROVE,
            "text": plain("Approve"),
            "style": "primary",
            "value": value,
        }
        if summary is not None and summary["unusual"]:
            # As the desk's card asks first for what is unusual, so does the button.
            approve["confirm"] = {
                "title": plain("Approve this call?"),
                "text": plain("\n".join(f"⚠ {shown(u, 200)}" for u in summary["unusual"][:5]), 290),
                "confirm": plain("Approve"),
                "deny": plain("Back"),
                "style": "danger",
            }
        buttons.append(approve)
    if approval.kind == ApprovalKind.TOOL_CALL and Verdict.REJECT in approval.allowed_verdicts:
        buttons.append(
            {
                "type": "button",
                "action_id": REJECT,
                "text": plain("Reject…"),
                "style": "danger",
                "value": value,
            }
        )
    buttons.append(
        {"type": "button", "action_id": OPEN, "text": plain("Open on the desk"), "url": desk_url(approval)}
    )
    blocks.append({"type": "actions", "block_id": f"act:{approval.pk}", "elements": buttons})
    return blocks


def message_blocks(
    approvals: list[ApprovalRequest], *, digest: bool, more: bool = False
) -> tuple[str, list[dict[str, Any]]]:
    """The notification text (what Slack shows in a notice, read as mrkdwn: escaped) and the
    blocks of a message about `approvals`, each as it stands now."""
    pending = [a for a in approvals if a.status == ApprovalStatus.PENDING]
    if digest:
        noun = "item" if len(approvals) == 1 else "items"
        text = f"{len(approvals)} {noun} for your review ({len(pending)} still waiting)"
    elif approvals and approvals[0].kind == ApprovalKind.QUESTION:
        text = f"A question from {one_line(approvals[0].run.agent)}"
    elif approvals:
        text = f"{one_line(approvals[0].tool)} ({one_line(approvals[0].run.agent)}) waits for a review"
    else:
        text = "Review Desk"
    blocks: list[dict[str, Any]] = []
    if digest:
        blocks.append({"type": "section", "text": plain(text)})
    for index, approval in enumerate(approvals):
        if index or digest:
            blocks.append({"type": "divider"})
        blocks += item_blocks(approval)
    if more:
        blocks += [
            {"type": "divider"},
            {"type": "context", "elements": [plain("More wait on the desk; the next digest lists them.")]},
        ]
    return text, blocks


def reject_view(value: str, approval: ApprovalRequest) -> dict[str, Any]:
    """The dialog a Reject click opens: the reason, required, as on the desk."""
    return {
        "type": "modal",
        "callback_id": REJECT_VIEW,
        "private_metadata": value,
        "title": plain("Reject this call"),
        "submit": plain("Reject"),
        "close": plain("Cancel"),
        "blocks": [
            {
                "type": "section",
                "text": plain(
                    f"{shown(approval.tool)} ({shown(approval.run.agent)}), run {str(approval.run_id)[:8]}"
                ),
            },
            {
                "type": "input",
                "block_id": REASON_BLOCK,
                "label": plain("Why (the agent reads this)"),
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON_INPUT,
                    "multiline": True,
                    "max_length": 2000,
                },
            },
        ],
    }
