"""What the desk shows of a pending call besides its payload: the tool's preview as a summary
(its key facts, the first lines of its body, its warnings), one risk line, what would make
approving it unusual (and so confirmed in a dialog, and never swept into a batch by "select
all similar"), and its place in the queue's order. The page's cards, the socket's snapshot and
the card endpoint for a live call all take it from here (`desk_view`), and desk_card.js only draws it:
the browser restates none of these rules.

Issue 38 adds two things a reviewer reads beside the call. Where each argument came from
(`provenance`: one row per argument, with its best source's words from
`agents.provenance.source_label`), whose flags are warnings like a preview's. And a model's
second opinion (`reading`), which is advice: it is drawn as model output, a pending or failed
one never reads as "low", and only a ready "high" makes approving ask first (stating its
concerns). Nothing here lets a reading decide anything.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from agents.provenance import leaves, source_label
from agents.registry import UnknownAgent, get_agent
from reviewdesk.approvals.models import ApprovalKind, ApprovalRequest
from reviewdesk.approvals.reads.context import approval_preview, external_preview
from reviewdesk.approvals.reads.queue import queue_sort_key
from reviewdesk.approvals.signing import device_decision_required, device_decisions_required_everywhere
from reviewdesk.desk.templatetags.desk_json import has_invisible

# The preview rows a reviewer decides by, by their label (any case): the recipient and subject
# of a mail, the amount and what is left of a refund, where a command runs. A preview that has
# none of these shows its first rows.
KEY_LABELS = (
    "to",
    "recipient",
    "subject",
    "this refund",
    "amount",
    "left after it",
    "order",
    "working directory",
)
FIRST_ROWS = 3
EXTERNAL_ROWS = 8  # an external call's arguments shown as facts (its top-level fields)
# The first lines of a preview's body (a mail's text, a command) shown in the queue.
BODY_LINES = 3
BODY_CHARS = 280
FACT_CHARS = 160
ARGUMENT_CHARS = 120  # an argument's value beside its source: enough to recognise it
# The reading levels a card draws, and the queue's "risk first" reads (approvals/reads/queue.py).
READING_RISKS = ("low", "medium", "high")
EXTERNAL_PROVENANCE = "Where the arguments came from is not known: the framework keeps its conversation."
UNKNOWN_PROVENANCE = "Where the arguments came from is not known for this call."


def desk_view(payload: dict[str, Any], *, username: str, sort: str = "") -> dict[str, Any]:
    """The desk's view of one approval's payload (`approval_data`), for `username` and the
    queue's `sort`: {"sort_key", "summary"}; `summary` is None for a call that is not a tool
    call (a question, a reconcile)."""
    view: dict[str, Any] = {"sort_key": queue_sort_key(payload, username, sort=sort), "summary": None}
    if payload["kind"] == ApprovalKind.TOOL_CALL:
        view["summary"] = call_summary(payload)
    return view


def with_desk_view(payloads: list[dict[str, Any]], *, username: str, sort: str = "") -> list[dict[str, Any]]:
    return [{**p, "desk": desk_view(p, username=username, sort=sort)} for p in payloads]


def call_summary(payload: dict[str, Any], *, preview: dict[str, Any] | None = None) -> dict[str, Any]:
    """The preview as the queue reads it: {"title", "facts": [[label, value]...], "body": first
    lines or None, "warnings", "invisible", "risk": one line or "", "unusual": [why approving
    it asks first], "device_key": the tool runs only on a device-signed decision, "provenance":
    rows for each argument (`provenance_rows`) or None, "provenance_note": why there are none,
    "reading" as stored, "reading_level", "reading_line", "reading_said" and "concerns" (`reading_view`)}. `preview`:
    `approval_preview` of the payload's arguments when the caller already has it (a preview may
    read the tool's world: once is enough)."""
    external = payload.get("external")
    if preview is not None:
        result = preview
    elif external:  # no desk code runs for a framework's call: its arguments, checked and shown
        result = external_preview(
            tool=payload["tool"], schema=external["schema"], arguments=payload["arguments"]
        )
    else:
        result = approval_preview(_stand_in(payload), payload["arguments"])
    preview = result["preview"] or {}
    rows = [(str(label), str(value)) for label, value in preview.get("rows") or []]
    # A framework's call has no desk preview to pick from: its arguments are its rows, all shown.
    keyed = [] if external else [row for row in rows if row[0].strip().lower() in KEY_LABELS]
    shown = rows[:EXTERNAL_ROWS] if external else (keyed or rows[:FIRST_ROWS])
    facts = [[label, _shortened(value, FACT_CHARS)] for label, value in shown]
    body = preview.get("body")
    warnings = [str(w) for w in (preview.get("warnings") or [])] + [str(e) for e in result["errors"]]
    # A value that came from where it should not (an untrusted tool's output aimed at the
    # effect, a lookalike) is a warning like the preview's: so it is unusual, kept out of "select
    # all similar", and named in the confirmation.
    flags = payload.get("provenance_flags") or []
    flagged = [str(flag.get("text") or flag.get("code") or "") for flag in flags]
    warnings += flagged
    invisible = has_invisible(payload["arguments"])
    irreversible = payload.get("effect") == "external"
    unusual = list(warnings)
    if invisible:
        unusual.append("the arguments contain invisible characters (shown escaped)")
    arguments = provenance_rows(payload)
    reading = reading_view(payload.get("reading"), arguments)
    if reading["level"] == "high":
        unusual.append(high_reading_line(payload["reading"]))
    quorum = payload.get("quorum") or {}
    if quorum.get("required", 1) > 1 and len(quorum.get("approved_by", [])) == quorum["required"] - 1:
        unusual.append(f"yours is the last of {quorum['required']} approvals: approving runs it")
    return {
        "title": str(preview.get("title", "")),
        "facts": facts,
        "body": _first_lines(str(body)) if body is not None else None,
        "warnings": warnings,
        "invisible": invisible,
        "risk": risk_line(irreversible, warnings, invisible),
        "unusual": unusual,
        "device_key": device_decisions_required_everywhere()
        if external
        else device_decision_required(agent=payload.get("agent") or "", tool=payload["tool"]),
        "provenance": arguments,
        "provenance_warnings": flagged,
        "provenance_note": provenance_note(arguments, external=bool(external)),
        "reading": payload.get("reading"),
        "reading_level": reading["level"],
        "reading_line": reading["line"],
        "reading_said": reading["said"],
        "concerns": reading["concerns"],
    }


def provenance_note(arguments: list[dict[str, Any]] | None, *, external: bool) -> str:
    """Why a call has no sources to draw: its framework keeps the conversation, or (an agent
    this process does not load) the desk could not trace it. "" when it has them."""
    if arguments is not None:
        return ""
    return EXTERNAL_PROVENANCE if external else UNKNOWN_PROVENANCE


def provenance_rows(payload: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Each argument (a string or number leaf, by JSON Pointer) as the card draws it beside its
    source: {"pointer", "name": how the card names it, "value": shortened,
    "label": its best source's words, "untrusted": the best source is an untrusted tool's
    output, "warning": a provenance flag names it}. None when where they came from is not known
    (an external run's call: its framework keeps the conversation)."""
    sources = payload.get("provenance")
    if sources is None:
        return None
    flagged = {flag.get("pointer") for flag in payload.get("provenance_flags") or []}
    rows = []
    for pointer, value in _in_declared_order(leaves(payload["arguments"]), payload):
        best = (sources.get(pointer) or [None])[0]
        rows.append(
            {
                "pointer": pointer,
                "name": pointer,  # as the flags and the reading's concerns name it
                "value": _shortened(str(value), ARGUMENT_CHARS),
                "label": source_label(best) if best else "not traced",
                "untrusted": bool(best and best.get("kind") == "tool_output" and not best.get("trusted")),
                "warning": pointer in flagged,
            }
        )
    return rows


def _in_declared_order(found, payload: dict[str, Any]) -> list[tuple[str, Any]]:
    """The arguments' leaves in the order the tool's schema declares its properties (to,
    subject, body): PostgreSQL's jsonb keeps an object's keys in its own order, not the call's,
    so the stored order would differ by database. Keys the schema does not name follow, as stored."""
    declared = list((_parameters(payload).get("properties") or {}).keys())
    rank = {name: index for index, name in enumerate(declared)}
    ordered = list(enumerate(found))
    ordered.sort(key=lambda item: (rank.get(_top_key(item[1][0]), len(rank)), item[0]))
    return [leaf for _, leaf in ordered]


def _top_key(pointer: str) -> str:
    return pointer.split("/")[1].replace("~1", "/").replace("~0", "~")


def _parameters(payload: dict[str, Any]) -> dict[str, Any]:
    external = payload.get("external")
    if external:
        return external.get("schema") or {}
    try:
        tool = get_agent(payload.get("agent") or "").tool(payload["tool"])
    except UnknownAgent:
        return {}
    return tool.parameters if tool is not None and isinstance(tool.parameters, dict) else {}


def reading_view(reading: dict[str, Any] | None, rows: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The second opinion as the card draws it: {"level": "" (none asked for) | "pending" |
    "unavailable" | "low" | "medium" | "high", "line": the queue row's words, "said": the
    detail's ("high risk", "being read…", "unavailable: why"), "concerns": each
    [{"about", "label": `about_label`, "text", "row": the index of the argument it names in `rows`, or None}]}. Only a
    ready reading with a known risk has a risk level: a pending, failed or malformed one is
    never "low"."""
    if not reading:
        return {"level": "", "line": "", "said": "", "concerns": []}
    status, risk = reading.get("status"), reading.get("risk")
    if status == "pending":
        level = "pending"
    elif status == "ready" and risk in READING_RISKS:
        level = risk
    else:
        level = "unavailable"
    words = {"pending": "being read…", "unavailable": "unavailable"}.get(level, f"{level} risk")
    said = f"unavailable: {reading.get('error') or 'no reason given'}" if level == "unavailable" else words
    index = {row["pointer"]: i for i, row in enumerate(rows or [])}
    concerns = [
        {
            "about": str(c.get("about", "")),
            "label": about_label(c.get("about")),
            "text": str(c.get("text", "")),
            "row": index.get(c.get("about")),
        }
        for c in (reading.get("concerns") or [] if level in READING_RISKS else [])
        if isinstance(c, dict)
    ]
    return {"level": level, "line": f"2nd opinion: {words}", "said": said, "concerns": concerns}


def about_label(about: Any) -> str:
    """What a concern points at, as a reviewer reads it: an argument's pointer ("/to") as it is,
    a message ("step:3") as "step 3"."""
    text = str(about or "")
    return f"step {text[5:]}" if text.startswith("step:") else text


def high_reading_line(reading: dict[str, Any]) -> str:
    """What approving a call read as high risk confirms first: the reading's concerns (or its
    summary when it names none), said to be a model's."""
    concerns = [c for c in reading.get("concerns") or [] if isinstance(c, dict)]
    said = "; ".join(
        f"{about_label(c.get('about'))}: {c.get('text', '')}" if c.get("about") else str(c.get("text", ""))
        for c in concerns
    )
    return f"A second opinion (model output) reads this as high risk: {said or reading.get('summary') or 'no concerns given'}"


def risk_line(irreversible: bool, warnings: list[str], invisible: bool) -> str:
    """One line, only when something is unusual: the first warning (and how many more), the
    invisible characters, and the effect beside them. An irreversible call with nothing unusual
    has its badge and no line: a red line on every email would mark nothing."""
    parts = []
    if warnings:
        more = f" (+{len(warnings) - 1} more)" if len(warnings) > 1 else ""
        parts.append(f"⚠ {warnings[0]}{more}")
    if invisible:
        parts.append("⚠ invisible characters")
    if parts and irreversible:
        parts.append("irreversible")
    return " · ".join(parts)


def _first_lines(text: str) -> str:
    lines = text.splitlines()
    shown = "\n".join(lines[:BODY_LINES])
    cut = len(lines) > BODY_LINES or len(shown) > BODY_CHARS
    return _shortened(shown, BODY_CHARS) if len(shown) > BODY_CHARS else shown + ("\n…" if cut else "")


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _stand_in(payload: dict[str, Any]) -> ApprovalRequest:
    """What `approval_preview` reads of an approval, from its payload: no database read for a
    call the desk already holds (the preview itself may read the tool's world)."""
    return cast(
        ApprovalRequest,
        SimpleNamespace(
            run=SimpleNamespace(agent=payload.get("agent") or "", is_external=False),
            run_id=payload["run"],
            tool_call_id=payload["tool_call_id"],
            tool=payload["tool"],
        ),
    )
