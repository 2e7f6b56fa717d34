"""The desk form and the API refuse the same bad decisions, in the same words, and change nothing.

Each bad input goes in through both entry points: the approval page's form (a session,
Django's test client) and `POST /api/v1/approvals/{id}/decision` (a bearer token, DRF's
APIClient). The API must answer the 422 it always gave, the page must show the same
words, and neither may touch the approval, its run, the decisions, the audit trail,
the desk events or the task queue.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.test import Client
from django.utils.html import escape

from reviewdesk.approvals.models import ApprovalRequest, Decision
from reviewdesk.audit.models import AuditEvent
from reviewdesk.events.models import DeskEvent
from reviewdesk.runs.models import RunStatus

pytestmark = pytest.mark.django_db

FIELD_DETAIL = "the request body does not match what this endpoint accepts"


@dataclass(frozen=True)
class Bad:
    name: str
    decision: dict[str, Any]  # as the API's JSON body has it; the form sends arguments as JSON text
    says: str  # the words both entry points refuse it with
    code: str  # the API's problem+json code
    errors: dict[str, list[str]] | None = None  # the API's field errors, exactly
    kind: str = "tool_call"
    detail: str = field(default=FIELD_DETAIL)


NUL = "Null characters are not allowed."


def too_long(limit: int) -> str:
    return f"Ensure this field has no more than {limit} characters."


BAD = [
    Bad(
        "reason over 10000 characters",
        {"verdict": "approve", "reason": "x" * 10_001},
        too_long(10_000),
        "invalid",
        {"reason": [too_long(10_000)]},
    ),
    Bad(
        "note over 10000 characters",
        {"verdict": "reject", "note": "x" * 10_001},
        too_long(10_000),
        "invalid",
        {"note": [too_long(10_000)]},
    ),
    Bad(
        "external reference over 200 characters",
        {"verdict": "confirm", "external_ref": "x" * 201},
        too_long(200),
        "invalid",
        {"external_ref": [too_long(200)]},
        kind="reconcile",
    ),
    Bad(
        "unknown verdict",
        {"verdict": "maybe"},
        '"maybe" is not a valid choice.',
        "invalid",
        {"verdict": ['"maybe" is not a valid choice.']},
    ),
    Bad(
        "edit whose arguments are not an object",
        {"verdict": "edit", "arguments": ["ada@example.com"]},
        "an edit needs the changed arguments as an object",
        "invalid",
        {"arguments": ["an edit needs the changed arguments as an object"]},
    ),
    Bad(
        "arguments without an edit",
        {"verdict": "approve", "arguments": {"to": "eve@example.com"}},
        "only an edit carries arguments",
        "invalid",
        {"arguments": ["only an edit carries arguments"]},
    ),
    Bad(
        "a re-run answering a tool call",
        {"verdict": "rerun"},
        "a tool_call request is answered with approve, reject, edit",
        "verdict",
        detail="a tool_call request is answered with approve, reject, edit",
    ),
    Bad(
        "an approval answering a reconciliation",
        {"verdict": "approve"},
        "a reconcile request is answered with confirm, rerun, reject",
        "verdict",
        kind="reconcile",
        detail="a reconcile request is answered with confirm, rerun, reject",
    ),
    Bad(
        "marking done without a reference",
        {"verdict": "confirm", "external_ref": "   "},
        "marking an effect done needs its external reference (where it is recorded)",
        "invalid",  # every code is lowercase
        kind="reconcile",
        detail="marking an effect done needs its external reference (where it is recorded)",
    ),
]


def through_the_api(api_as, reviewer, approval: ApprovalRequest, decision: dict[str, Any]):
    body = {"checkpoint_id": str(approval.checkpoint_id), **decision}
    return api_as(reviewer, "review").post(f"/api/v1/approvals/{approval.id}/decision", body, format="json")


def through_the_form(reviewer, approval: ApprovalRequest, decision: dict[str, Any]):
    """Post the decision as the page's form would: every field a string, arguments as JSON text."""
    form = {"checkpoint_id": str(approval.checkpoint_id), "next": "/"}
    for name, value in decision.items():
        form[name] = json.dumps(value) if name == "arguments" else value
    client = Client()
    client.force_login(reviewer)
    return client.post(f"/approvals/{approval.id}/", form, follow=True)


# A NUL (U+0000): PostgreSQL text cannot hold it, and the form stored it as typed (a 500).
# The API's JSON parser refuses any string holding one, with 400 malformed_json, before the
# validator sees it (tests/reviewdesk/api/test_errors.py); the form is refused by the validator.
FORM_ONLY = [
    Bad(
        "a NUL in the reason",
        {"verdict": "reject", "reason": "no\x00"},
        NUL,
        "invalid",
        {"reason": [NUL]},
    ),
    Bad(
        "a NUL in the note",
        {"verdict": "approve", "note": "\x00"},
        NUL,
        "invalid",
        {"note": [NUL]},
    ),
    Bad(
        "a NUL in the external reference",
        {"verdict": "confirm", "external_ref": "ticket\x00 7"},
        NUL,
        "invalid",
        {"external_ref": [NUL]},
        kind="reconcile",
    ),
    # The edit's JSON is text in the form: \u0000 in it decoded to a NUL that jsonb refused (a 500).
    Bad(
        "a NUL in the edited arguments",
        {"verdict": "edit", "arguments": {"to": "ada@example.com", "subject": "Hi\x00", "body": "x"}},
        NUL,
        "invalid",
        {"arguments": [NUL]},
    ),
]


class Unchanged:
    """What a refused decision must leave as it was; `task_queue` after the on-commit callbacks ran."""

    def __init__(self, approval: ApprovalRequest, task_queue) -> None:
        self.approval, self.task_queue = approval, task_queue
        self.before = self.state()

    def state(self) -> tuple:
        self.approval.refresh_from_db()
        run = self.approval.run
        run.refresh_from_db()
        return (
            self.approval.status,
            run.status,
            run.revision,
            Decision.objects.count(),
            AuditEvent.objects.exclude(action="token.created").count(),  # the client's own token is audited
            DeskEvent.objects.count(),
            self.task_queue.length(),
        )

    def holds(self) -> bool:
        return self.state() == self.before


@pytest.mark.parametrize("bad", BAD, ids=[bad.name for bad in BAD])
def test_the_api_refuses_it_with_the_422_it_always_gave(
    bad, pending, personas, api_as, task_queue, django_capture_on_commit_callbacks
):
    approval = pending(bad.kind)
    unchanged = Unchanged(approval, task_queue)
    with django_capture_on_commit_callbacks(execute=True):
        response = through_the_api(api_as, personas.bob, approval, bad.decision)
    assert response.status_code == 422
    expected = {
        "type": "about:blank",
        "title": "Invalid input",
        "status": 422,
        "detail": bad.detail,
        "code": bad.code,
    }
    if bad.errors:
        expected["errors"] = bad.errors
    assert response.json() == expected
    assert unchanged.holds()


@pytest.mark.parametrize("bad", BAD + FORM_ONLY, ids=[bad.name for bad in BAD + FORM_ONLY])
def test_the_desk_form_refuses_it_in_the_same_words(
    bad, pending, personas, task_queue, django_capture_on_commit_callbacks
):
    approval = pending(bad.kind)
    unchanged = Unchanged(approval, task_queue)
    with django_capture_on_commit_callbacks(execute=True):
        response = through_the_form(personas.bob, approval, bad.decision)
    assert response.redirect_chain == [(f"/approvals/{approval.id}/", 302)]
    page = response.content.decode()
    assert 'class="flash error"' in page
    assert escape(bad.says) in page
    assert unchanged.holds()


@pytest.mark.parametrize("entry", ["api", "form"])
def test_a_good_decision_through_either_entry_changes_what_the_others_keep(
    entry, pending, personas, api_as, task_queue, django_capture_on_commit_callbacks
):
    """The control for the two tests above: the same snapshot does see a decision."""
    approval = pending("tool_call")
    unchanged = Unchanged(approval, task_queue)
    decision = {"verdict": "approve", "reason": "x" * 10_000}  # at the limit, not over it
    with django_capture_on_commit_callbacks(execute=True):
        if entry == "api":
            assert through_the_api(api_as, personas.bob, approval, decision).status_code == 201
        else:
            through_the_form(personas.bob, approval, decision)
    assert not unchanged.holds()
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.decision.reason == "x" * 10_000
    assert approval.run.status == RunStatus.QUEUED and task_queue.length() == 1


@pytest.mark.parametrize(
    "levels",
    [64, 80, 5000],
    ids=["the first refused depth", "past the documented depth", "past the decoder's own"],
)
def test_the_desk_form_refuses_arguments_nested_too_deep_and_decides_nothing(
    levels, pending, personas, task_queue, django_capture_on_commit_callbacks
):
    approval = pending("tool_call")
    unchanged = Unchanged(approval, task_queue)
    form = {
        "checkpoint_id": str(approval.checkpoint_id),
        "next": "/",
        "verdict": "edit",
        "arguments": '{"to": ' + "[" * levels + "]" * levels + "}",
    }
    client = Client()
    client.force_login(personas.bob)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/approvals/{approval.id}/", form, follow=True)
    assert response.status_code == 200
    page = response.content.decode()
    assert 'class="flash error"' in page and ("nest deeper than" in page or "nest too deeply" in page)
    assert unchanged.holds()


@pytest.mark.parametrize(
    "size", [1024 * 1024 + 1, 3 * 1024 * 1024], ids=["just over 1 MiB", "over Django's own 2.5 MiB"]
)
def test_a_desk_form_over_the_documented_size_is_413_and_decides_nothing(
    size, pending, personas, task_queue, django_capture_on_commit_callbacks
):
    approval = pending("tool_call")
    unchanged = Unchanged(approval, task_queue)
    client = Client()
    client.force_login(personas.bob)
    form = {"checkpoint_id": str(approval.checkpoint_id), "verdict": "reject", "reason": "x" * size}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/approvals/{approval.id}/", form)
    assert response.status_code == 413 and "the limit is 1048576" in response.content.decode()
    assert unchanged.holds()


def test_a_desk_form_whose_content_length_is_no_number_decides_nothing_and_is_no_500(
    pending, personas, task_queue, django_capture_on_commit_callbacks
):
    """ "²" is isdigit() to Python and a 500 from int(): the header is not trusted, the form
    reads as empty, and an empty form decides nothing."""
    approval = pending("tool_call")
    unchanged = Unchanged(approval, task_queue)
    client = Client()
    client.force_login(personas.bob)
    form = {"checkpoint_id": str(approval.checkpoint_id), "verdict": "reject", "reason": "no"}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/approvals/{approval.id}/", form, CONTENT_LENGTH="²")
    assert response.status_code < 500
    assert unchanged.holds()
