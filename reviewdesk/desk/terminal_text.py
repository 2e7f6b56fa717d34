"""One approval as terminal text: what the approval page shows, from the same reads.

The context comes from `approval_context`, the preview from `approval_preview`, the
arguments as the page's `shown_json`; only the layout is the terminal's own. The text
returned here is not yet safe to print: the session escapes every line it writes
(`visible`), and the lines here only add the flags that say something was escaped.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.approvals.reads.context import approval_context, approval_preview
from reviewdesk.desk.templatetags.desk_json import exact, has_invisible, pretty_json, shown_json, visible
from reviewdesk.lib.times import rfc3339_sortable

INDENT = "    "
INVISIBLE_FLAG = "⚠ holds invisible characters, shown as \\uXXXX"
# A long message or result is cut here; the approval page has it whole.
MODEL_TEXT_SHOWN = 1200


def indented(text: str, prefix: str = INDENT) -> list[str]:
    return [prefix + line for line in text.splitlines()] or [prefix]


def flagged(value: Any) -> list[str]:
    """The flag under a value shown with `exact` or `shown_json` (its edge spaces escaped too)."""
    return [INDENT + INVISIBLE_FLAG] if has_invisible(value) else []


def flagged_prose(text: str) -> list[str]:
    """The flag under prose, shown with `visible`: its spaces are printed as typed."""
    return [INDENT + INVISIBLE_FLAG] if visible(text) != text else []


def in_words(seconds: float) -> str:
    """A countdown as the desk writes it, roughly: "in 42 min", "in 3 h", "expired"."""
    if seconds <= 0:
        return "expired"
    if seconds < 90:
        return f"in {int(seconds)} s"
    if seconds < 90 * 60:
        return f"in {round(seconds / 60)} min"
    return f"in {seconds / 3600:.1f} h"


def approval_text(approval: ApprovalRequest, *, position: str) -> list[str]:
    """The lines that present one approval: what it is, why it is asked, what it would do."""
    context = approval_context(approval)
    left = (approval.expires_at - timezone.now()).total_seconds()
    effect = context["effect"] + (", irreversible" if context["irreversible"] else "")
    lines = [
        "",
        f"── {position} · {approval.tool} · expires {in_words(left)} ({rfc3339_sortable(approval.expires_at)})",
        f"Agent       {context['agent']}",
        f"Submitted   {context['submitter']}",
        f"Run         {approval.run_id} ({context['run_status']})",
        f"Tool        {approval.tool}: {context['tool_description']}"
        + (f" (effect: {effect})" if effect else ""),
        f"Why asked   {context['policy_reason'] or '(the policy gave no reason)'}",
    ]
    if approval.assignees:
        lines.append(f"Assigned    {', '.join(approval.assignees)}")
    lines += ["Task:", *indented(context["task"]), *flagged_prose(context["task"])]
    if context["asking_text"]:
        asking = context["asking_text"]
        shown = asking if len(asking) <= MODEL_TEXT_SHOWN else asking[:MODEL_TEXT_SHOWN] + " …(cut)"
        lines += ["The model's message (model text, untrusted):", *indented(shown), *flagged_prose(asking)]
    lines += [f"Arguments (sha256 {approval.arguments_sha256}):", *arguments_text(approval.arguments)]
    lines += preview_text(approval_preview(approval, approval.arguments))
    lines += decisions_text(context["decisions"])
    return lines


def arguments_text(arguments: Any) -> list[str]:
    return [*indented(shown_json(arguments)), *flagged(arguments)]


def preview_text(result: dict[str, Any]) -> list[str]:
    """The tool's preview (title, warnings, rows, body), or why there is none."""
    preview = result["preview"]
    if preview is None:
        if result["errors"]:
            return ["What will happen:", *(f"{INDENT}⚠ {e}" for e in result["errors"])]
        return ["What will happen: this tool declares no preview; judge by the arguments."]
    lines = ["What will happen:", INDENT + str(preview.get("title", ""))]
    lines += [f"{INDENT}⚠ {w}" for w in preview.get("warnings") or []]
    rows = [(str(label), str(value)) for label, value in preview.get("rows") or []]
    width = max((len(label) for label, _ in rows), default=0)
    for label, value in rows:
        lines.append(
            f"{INDENT}{label.ljust(width)}  {exact(value)}"
            + ("  ⚠ invisible characters" if has_invisible(value) else "")
        )
    if preview.get("body") is not None:
        lines += [INDENT + "┌", *indented(exact(preview["body"]), INDENT + "│ "), INDENT + "└"]
        lines += flagged(preview["body"])
    return lines


def decisions_text(decisions: list[dict[str, Any]]) -> list[str]:
    if not decisions:
        return []
    lines = ["Earlier in this run:"]
    for d in decisions:
        who = f"{d['verdict']} by {d['reviewer']}" if d["verdict"] else d["status"]
        lines.append(f"{INDENT}{d['tool']}: {who}" + (f" — {d['reason']}" if d["reason"] else ""))
    return lines


def diff_text(before: Any, after: Any) -> list[str]:
    """What an edit changes, field by field (top-level keys), as `- old` and `+ new` lines."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return ["- " + pretty_json(before), "+ " + pretty_json(after)]
    lines = []
    for key in [*before, *(k for k in after if k not in before)]:
        if before.get(key, ...) == after.get(key, ...):
            continue
        if key in before:
            lines.append(f"- {key}: {pretty_json(before[key])}")
        if key in after:
            lines.append(f"+ {key}: {pretty_json(after[key])}")
    return lines or ["(no change)"]
