"""`python manage.py review --as USER`: the desk's queue, one approval at a time, in a terminal.

An interface like the desk's pages, and as thin: it reads with the approvals' own reads (the
queue in its order, who may decide, the context, the preview: `approvals.reads`, `approvals.access`) and decides through the one
decide service (`approval_decide`), so a decision made here is checked, signed, stored and
audited as any other, and the same resume is enqueued when it commits.

Everything it prints goes through `visible` first, as the pages do: a terminal would obey
an escape sequence or a bidi override that a submitter or a model wrote into a task, an
argument or a message, so such characters are written out as \\uXXXX.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agents.decisions import key_id_for, sign_payload
from agents.tools import Effect
from reviewdesk.accounts.roles import is_reviewer
from reviewdesk.approvals.access import may_decide
from reviewdesk.approvals.deciding.device import approval_device_payload
from reviewdesk.approvals.deciding.input import DecisionInput, DeviceSignature
from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.approvals.models import KIND_VERDICTS, ApprovalRequest, Verdict
from reviewdesk.approvals.reads.context import approval_preview, approval_tool
from reviewdesk.approvals.reads.queue import QueueFilters, approvals_queue_for
from reviewdesk.desk.templatetags.desk_json import visible
from reviewdesk.desk.terminal_text import approval_text, arguments_text, diff_text, preview_text
from reviewdesk.desk.views.base import DONE  # what a decision is called once made, as the pages say it
from reviewdesk.lib.errors import DeskError, Forbidden, explain
from reviewdesk.lib.numbers import whole_number

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class Quit(Exception):
    """The reviewer typed q, or closed the input (Ctrl-D)."""


@dataclass
class Session:
    """The terminal: lines out (always escaped), answers in."""

    stdin: TextIO
    stdout: TextIO

    def say(self, *lines: str) -> None:
        for line in lines:
            self.stdout.write(visible(line) + "\n")
        self.stdout.flush()

    def ask(self, prompt: str) -> str:
        self.stdout.write(visible(prompt))
        self.stdout.flush()
        answer = self.stdin.readline()
        if not answer:  # end of input: nothing more will be typed
            self.stdout.write("\n")
            raise Quit
        return answer.strip()

    def yes(self, question: str) -> bool:
        return self.ask(f"{question} [y/N] ").lower() in ("y", "yes")


# --- the choices: one per verdict, so a new verdict is one more entry ----------------------
# What a verdict needs from the reviewer, as keyword arguments for approval_decide; None when
# they backed out (nothing is decided then, and the same approval is offered again).
Ask = Callable[[Session, ApprovalRequest], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Choice:
    key: str
    label: str
    ask: Ask


def _irreversible(approval: ApprovalRequest) -> bool:
    tool = approval_tool(approval)
    return bool(tool and tool.effect == Effect.EXTERNAL)


def _confirmed(session: Session, approval: ApprovalRequest, what: str) -> bool:
    """Irreversible effects ask once more, as the desk's buttons do."""
    if not _irreversible(approval):
        return True
    return session.yes(f"{approval.tool} acts outside the desk and cannot be undone. {what}?")


def ask_approve(session: Session, approval: ApprovalRequest) -> dict[str, Any] | None:
    if not _confirmed(session, approval, "Approve"):
        return None
    return {"reason": session.ask("Reason (optional, Enter for none): ")}


def ask_reject(session: Session, approval: ApprovalRequest) -> dict[str, Any] | None:
    reason = session.ask("Reason (the model reads it; Enter to go back): ")
    return {"reason": reason} if reason else None


def ask_edit(session: Session, approval: ApprovalRequest) -> dict[str, Any] | None:
    """New arguments as JSON on one line, checked against the tool's schema (and previewed)
    until they pass or the reviewer backs out; then the diff, then a confirmation."""
    session.say("Now:", *arguments_text(approval.arguments))
    while True:
        text = session.ask("New arguments as JSON on one line (Enter to go back): ")
        if not text:
            return None
        try:
            arguments = json.loads(text)
        except json.JSONDecodeError as exc:
            session.say(f"Not JSON: {exc.msg} at column {exc.colno}.")
            continue
        except RecursionError:
            session.say("Not accepted: the JSON nests too deeply.")
            continue
        result = approval_preview(approval, arguments)
        if result["errors"] and result["preview"] is None and approval_tool(approval) is not None:
            session.say(
                "These arguments do not match the tool's schema:", *(f"  {e}" for e in result["errors"])
            )
            continue
        session.say("The edit changes:", *diff_text(approval.arguments, arguments), *preview_text(result))
        if not session.yes("Sign these arguments?") or not _confirmed(session, approval, "Approve the edit"):
            return None
        return {"arguments": arguments, "reason": session.ask("Reason (optional, Enter for none): ")}


def ask_confirm(session: Session, approval: ApprovalRequest) -> dict[str, Any] | None:
    ref = session.ask("Where is the effect recorded (external reference; Enter to go back): ")
    return {"external_ref": ref} if ref else None


def ask_rerun(session: Session, approval: ApprovalRequest) -> dict[str, Any] | None:
    if not session.yes(f"Run {approval.tool} again? Only if it surely did not happen"):
        return None
    return {"reason": session.ask("Reason (optional, Enter for none): ")}


def ask_answer(session: Session, approval: ApprovalRequest) -> dict[str, Any] | None:
    """An option by name or number (an exact name first), a text, or JSON for a schema; the decide service checks
    that it fits (a 422 asks again)."""
    arguments = approval.arguments
    session.say("Question:", *(f"  {line}" for line in str(arguments.get("question", "")).splitlines()))
    if "options" in arguments:
        options = [str(option) for option in arguments["options"]]
        session.say(*(f"  {number}. {option}" for number, option in enumerate(options, 1)))
        text = session.ask("Answer (number or text; Enter to go back): ")
        # An option typed as itself wins over a position: with options "3", "2", "1", typing 1 is "1".
        number = whole_number(text)
        if number is not None and text not in options and 1 <= number <= len(options):
            return {"answer": options[number - 1]}
        return {"answer": text} if text else None
    if arguments.get("schema") is None:
        text = session.ask("Answer (Enter to go back): ")
        return {"answer": text} if text else None
    session.say("The answer must match this JSON Schema:", *arguments_text(arguments["schema"]))
    while True:
        text = session.ask("Answer as JSON on one line (Enter to go back): ")
        if not text:
            return None
        try:
            return {"answer": json.loads(text)}
        except (json.JSONDecodeError, RecursionError):
            session.say("Not JSON: type the answer as JSON, a string in double quotes.")


# The verdicts a kind offers come from KIND_VERDICTS; how each is asked for, from here.
CHOICES: dict[str, Choice] = {
    Verdict.APPROVE: Choice("a", "approve", ask_approve),
    Verdict.REJECT: Choice("r", "reject", ask_reject),
    Verdict.EDIT: Choice("e", "edit", ask_edit),
    Verdict.CONFIRM: Choice("c", "confirm it happened", ask_confirm),
    Verdict.RERUN: Choice("x", "re-run", ask_rerun),
    Verdict.ANSWER: Choice("n", "answer", ask_answer),
}
SKIP, QUIT = "s", "q"


def choices_for(approval: ApprovalRequest) -> dict[str, tuple[str, Choice]]:
    """key -> (verdict, choice), for the verdicts this kind of request is answered with."""
    return {CHOICES[v].key: (v, CHOICES[v]) for v in KIND_VERDICTS[approval.kind] if v in CHOICES}


# --- the queue -----------------------------------------------------------------------------
def decidable(user: User, passed: set[Any]) -> Iterator[tuple[ApprovalRequest, str]]:
    """The user's queue in the desk's order (mine, my groups', the rest; by expiry), page by page, without
    what they may see but not decide (runs they submitted) or already passed; with the count
    as the desk shows it ("1000+" past the cap)."""
    offset: int | None = 0
    while offset is not None:
        page = approvals_queue_for(user, QueueFilters(), offset=offset)
        for approval in page.approvals:
            if approval.id not in passed and may_decide(user, approval):
                yield approval, f"{page.total}+" if page.total_capped else str(page.total)
        offset = page.next_offset


@dataclass
class Tally:
    decided: int = 0
    skipped: int = 0
    passed: set[Any] = field(default_factory=set)


def review(*, user: User, stdin: TextIO, stdout: TextIO, key: Ed25519PrivateKey | None = None) -> Tally:
    """Offer the user's decidable approvals one by one until none is left or they quit.
    With `key` (the reviewer's device key file), each decision is signed with it here."""
    if not is_reviewer(user):
        raise Forbidden(f"{user.get_username()} is not a reviewer: only reviewers decide approvals")
    session = Session(stdin, stdout)
    tally = Tally()
    session.say(f"Reviewing as {user.get_username()}. Keys: letter then Enter; q quits, Ctrl-D too.")
    try:
        while True:
            # Read afresh each time: a colleague may have decided what was next meanwhile.
            found = next(decidable(user, tally.passed), None)
            if found is None:
                session.say("", "Nothing more waits for you to decide.")
                break
            approval, total = found
            position = f"#{tally.decided + tally.skipped + 1} · {total} pending for you"
            session.say(*approval_text(approval, position=position))
            _offer(session, user, approval, tally, key)
    except Quit:
        pass
    session.say(f"Decided {tally.decided}, skipped {tally.skipped}.")
    return tally


def _decide(
    user: User, approval: ApprovalRequest, verdict: str, fields: dict[str, Any], key: Ed25519PrivateKey | None
):
    """Decide through the one service: server-signed, or signed here with the device key over
    the payload the desk builds for this decision (`/payload`'s, without the HTTP)."""
    common = {
        "approval_id": approval.id,
        "reviewer": user,
        "verdict": verdict,
        "checkpoint_id": str(approval.checkpoint_id),
    }
    if key is None:
        return approval_decide(**common, **fields)
    key_id = key_id_for(key.public_key())
    asked = DecisionInput(verdict=verdict, checkpoint_id=common["checkpoint_id"], **fields)
    payload = approval_device_payload(approval_id=approval.id, reviewer=user, decision=asked, key_id=key_id)
    device = DeviceSignature(payload=payload, signature=sign_payload(key, payload), key_id=key_id)
    return approval_decide(**common, **fields, device=device)


def _offer(
    session: Session,
    user: User,
    approval: ApprovalRequest,
    tally: Tally,
    device_key: Ed25519PrivateKey | None,
) -> None:
    """Ask until the approval is decided, skipped or gone; raise Quit to stop."""
    choices = choices_for(approval)
    menu = "  ".join(f"[{key}] {choice.label}" for key, (_, choice) in choices.items())
    while True:
        key = session.ask(f"{menu}  [{SKIP}] skip  [{QUIT}] quit > ").lower()
        if key == QUIT:
            raise Quit
        if key == SKIP:
            tally.skipped += 1
            tally.passed.add(approval.id)
            return
        if key not in choices:
            session.say(f"Type one of {', '.join([*choices, SKIP, QUIT])}.")
            continue
        verdict, choice = choices[key]
        fields = choice.ask(session, approval)
        if fields is None:
            session.say("Not decided.")
            continue
        try:
            decision = _decide(user, approval, verdict, fields, device_key)
        except DeskError as exc:
            session.say(f"Not decided: {explain(exc)}")
            if exc.status == 422:  # the input: ask again
                continue
            tally.passed.add(approval.id)  # decided elsewhere, expired, stale, not yours: move on
            return
        tally.decided += 1
        tally.passed.add(approval.id)
        session.say(
            f"{DONE.get(Verdict(verdict), verdict)} {approval.tool} for run {approval.run_id}: "
            f"decision {decision.id}, signed with {decision.key_id}."
        )
        return
