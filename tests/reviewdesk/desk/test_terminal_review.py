"""`manage.py review --as USER`, in-process: the session fed typed lines, on the database.

Decisions go through the decide service: signed, audited, and the resume enqueued on the
real Redis queue once the transaction commits. tests/e2e/test_terminal_review.py drives the
command itself through a pseudo-terminal, with a real worker resuming the run.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from agents.decisions import signature_valid
from reviewdesk.approvals.models import ApprovalStatus, Decision
from reviewdesk.approvals.signing import FileKeyring
from reviewdesk.audit.models import AuditEvent
from reviewdesk.desk.terminal import CHOICES, review
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.reviewdesk.desk.test_review_context import BIDI_SCRIPT

pytestmark = pytest.mark.django_db

EMAIL = SEND_EMAIL_SCRIPT[0]["tool_calls"][1]["arguments"]


def session(user, *typed: str, capture=None) -> str:
    """Run a review session as `user` with these lines typed; what it printed."""
    out = io.StringIO()
    if capture is None:
        review(user=user, stdin=io.StringIO("".join(line + "\n" for line in typed)), stdout=out)
    else:
        with capture(execute=True):
            review(user=user, stdin=io.StringIO("".join(line + "\n" for line in typed)), stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("username", ["olivia", "carol", "nobody"])
def test_a_user_who_may_not_review_is_refused(personas, username):
    with pytest.raises(CommandError):
        call_command("review", "--as", username, stdin=io.StringIO("q\n"))


def test_the_reviewer_sees_the_context_and_the_preview(personas, interrupted_run):
    run, approval = interrupted_run()
    shown = session(personas.alice, "q")
    assert f"Run         {run.id} (input_required)" in shown
    assert "Agent       demo" in shown and "Submitted   carol" in shown
    assert "Tell Ada her refund is on its way." in shown  # the task
    assert "send_email: Send an email to a customer. (effect: external, irreversible)" in shown
    assert f"Why asked   {approval.reason}" in shown
    assert '"to": "ada@example.com",' in shown  # arguments pretty-printed
    assert "What will happen:" in shown and "It is on its way." in shown  # the email as it will be sent
    assert "[a] approve  [r] reject  [e] edit  [s] skip  [q] quit >" in shown
    assert "Decided 0, skipped 0." in shown


def test_an_approval_is_signed_audited_and_its_resume_enqueued_on_commit(
    personas, interrupted_run, task_queue, django_capture_on_commit_callbacks
):
    run, approval = interrupted_run()
    queued = task_queue.length()
    shown = session(personas.alice, "a", "y", "right customer", capture=django_capture_on_commit_callbacks)
    decision = Decision.objects.get(request=approval)
    assert (decision.verdict, decision.reviewer, decision.reason) == (
        "approve",
        personas.alice,
        "right customer",
    )
    assert signature_valid(FileKeyring().public_key(decision.key_id), decision.payload, decision.signature)
    assert decision.payload["arguments_sha256"] == approval.arguments_sha256
    audit = AuditEvent.objects.get(action="decision.approve", subject_id=str(approval.id))
    assert audit.actor == personas.alice and audit.data["decision"] == str(decision.id)
    approval.refresh_from_db()
    run.refresh_from_db()
    assert approval.status == ApprovalStatus.APPROVED and run.status == "queued"
    assert task_queue.length() == queued + 1
    assert f"Approved send_email for run {run.id}: decision {decision.id}" in shown
    assert "Nothing more waits for you to decide." in shown


def test_an_irreversible_approval_not_confirmed_is_not_decided(personas, interrupted_run):
    _, approval = interrupted_run()
    shown = session(personas.alice, "a", "n", "q")
    assert "acts outside the desk and cannot be undone. Approve? [y/N]" in shown
    assert "Not decided." in shown
    assert not Decision.objects.filter(request=approval).exists()


def test_a_rejection_needs_its_reason_and_carries_it(personas, interrupted_run):
    _, approval = interrupted_run()
    session(personas.alice, "r", "", "r", "wrong customer")
    decision = Decision.objects.get(request=approval)
    assert (decision.verdict, decision.reason) == ("reject", "wrong customer")


def test_an_edit_is_checked_against_the_schema_then_shown_as_a_diff_and_signed(personas, interrupted_run):
    _, approval = interrupted_run()
    edited = {**EMAIL, "subject": "Your refund, sent today"}
    shown = session(
        personas.alice,
        "e",
        "{not json",
        '{"to": "ada@example.com"}',
        '{"to": "ada@example.com", "subject": "Your refund, sent today", "body": "It is on its way."}',
        "y",
        "y",
        "clearer subject",
    )
    assert "Not JSON:" in shown
    assert (
        "These arguments do not match the tool's schema:" in shown
        and "'subject' is a required property" in shown
    )
    assert '- subject: "Your refund"' in shown and '+ subject: "Your refund, sent today"' in shown
    decision = Decision.objects.get(request=approval)
    assert (decision.verdict, decision.arguments, decision.reason) == ("edit", edited, "clearer subject")
    assert decision.arguments_sha256 != approval.arguments_sha256


def test_the_submitters_own_run_is_not_offered_and_skip_moves_on(personas, interrupted_run):
    personas.alice.groups.add(*personas.carol.groups.all())  # alice may submit too
    _, carols = interrupted_run()
    _, also_carols = interrupted_run()
    own = interrupted_run()[0]
    own.submitted_by = personas.alice
    own.save(update_fields=["submitted_by"])
    shown = session(personas.alice, "s", "s")
    assert shown.count("── ") == 2 and str(own.id) not in shown
    assert "Nothing more waits for you to decide." in shown and "Decided 0, skipped 2." in shown
    assert not Decision.objects.exists() and {carols.run_id, also_carols.run_id} != set()


def test_an_approval_decided_meanwhile_is_reported_and_passed(personas, interrupted_run, monkeypatch):
    _, approval = interrupted_run()
    from reviewdesk.desk import terminal

    def bob_first(session, approval_):
        from reviewdesk.approvals.deciding.record import approval_decide

        approval_decide(
            approval_id=approval_.id,
            reviewer=personas.bob,
            verdict="approve",
            checkpoint_id=str(approval_.checkpoint_id),
        )
        return {"reason": ""}

    monkeypatch.setitem(terminal.CHOICES, "approve", terminal.Choice("a", "approve", bob_first))
    shown = session(personas.alice, "a")
    assert "Not decided: this approval was already approved" in shown
    assert Decision.objects.get(request=approval).reviewer == personas.bob


def test_invisible_and_control_characters_are_escaped_never_printed(personas, interrupted_run):
    run, _ = interrupted_run(BIDI_SCRIPT)
    run.input = "Refund Ada\x1b[2J\x1b]0;owned\x07 now\u202e"
    run.save(update_fields=["input"])
    shown = session(personas.alice, "q")
    for raw in ("\x1b", "\x07", "\u202e", "\u200b"):
        assert raw not in shown
    assert "Refund Ada\\u001b[2J\\u001b]0;owned\\u0007 now\\u202e" in shown
    assert "ada@example.com\\u202egro.live" in shown
    assert "⚠ holds invisible characters, shown as \\uXXXX" in shown


def test_lookalike_characters_and_a_trailing_space_in_the_arguments_are_escaped_as_on_the_page(
    personas, interrupted_run
):
    subject = "Your\u00a0refund\ufe0f is\u3164here "
    script = [
        {"tool_calls": [{"name": "send_email", "arguments": {**EMAIL, "subject": subject}}]},
        {"content": "sent"},
    ]
    interrupted_run(script)
    shown = session(personas.alice, "q")
    # The arguments (without the comma after: PostgreSQL's jsonb puts the key last, SQLite keeps order).
    assert '"subject": "Your\\u00a0refund\\ufe0f is\\u3164here\\u0020"' in shown
    assert "Subject            Your\\u00a0refund\\ufe0f is\\u3164here\\u0020  ⚠" in shown  # the preview
    assert subject not in shown


def test_every_verdict_a_kind_takes_has_a_choice_with_its_own_key():
    from reviewdesk.approvals.models import KIND_VERDICTS

    assert {v for verdicts in KIND_VERDICTS.values() for v in verdicts} <= set(CHOICES)
    keys = [choice.key for choice in CHOICES.values()]
    assert len(keys) == len(set(keys)) and not {"s", "q"} & set(keys)


def test_with_a_key_file_the_terminal_signs_with_the_device_key_and_the_gate_runs_it(
    personas, interrupted_run, device_keys, settings, mailoutbox
):
    """`manage.py review --as alice --key alice.pem` where device keys are required: the
    decision is device-signed here, stored, and the in-process worker's gate verifies it."""
    from reviewdesk.runs.execution import run_execute

    settings.DESK_REQUIRE_DEVICE_KEYS = True
    run, approval = interrupted_run()
    out = io.StringIO()
    call_command(
        "review",
        "--as",
        "alice",
        "--key",
        str(device_keys.alice_file),
        stdin=io.StringIO("a\ny\nchecked\n"),
        stdout=out,
    )
    decision = Decision.objects.get(request=approval)
    assert decision.payload["signer"] == "device" and decision.key_id == device_keys.alice_key_id
    assert f"signed with {device_keys.alice_key_id}" in out.getvalue()
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == "succeeded", run.error
    assert [m.to for m in mailoutbox] == [["ada@example.com"]]


def test_without_a_key_file_a_device_required_approval_is_not_decided(personas, interrupted_run, settings):
    settings.DESK_REQUIRE_DEVICE_KEYS = True
    interrupted_run()
    shown = session(personas.alice, "a", "y", "checked", "q")
    assert "Not decided:" in shown and "device key" in shown
    assert not Decision.objects.exists()


def test_a_question_is_answered_from_the_terminal_by_option_number_and_the_answer_is_signed(
    personas, interrupted_run, django_capture_on_commit_callbacks
):
    from tests.reviewdesk.approvals.test_questions import COLOUR, SIZE, asking

    _, question = interrupted_run(asking(**COLOUR))
    shown = session(personas.alice, "n", "3", "n", "2", capture=django_capture_on_commit_callbacks)

    assert "[n] answer  [r] reject" in shown and "1. red" in shown and "2. blue" in shown
    assert "Not decided: the answer must be one of the options" in shown  # "3" is no option
    decision = Decision.objects.get(request=question)
    assert (decision.verdict, decision.answer) == ("answer", "blue")
    assert signature_valid(FileKeyring().public_key(decision.key_id), decision.payload, decision.signature)

    _, sized = interrupted_run(asking(**SIZE))
    shown = session(personas.alice, "n", "{size: 2}", '{"size": 0}', "n", '{"size": 2}', "q")
    assert "Not JSON" in shown and "Not decided:" in shown
    assert Decision.objects.get(request=sized).answer == {"size": 2}


def test_an_option_typed_as_itself_wins_over_a_position(personas, interrupted_run):
    from tests.reviewdesk.approvals.test_questions import asking

    _, question = interrupted_run(asking(question="How many replicas?", options=["3", "2", "1"]))
    session(personas.alice, "n", "1", "q")

    assert Decision.objects.get(request=question).answer == "1"  # the option "1", not the first option "3"


def test_a_digit_that_is_no_number_is_read_as_text_not_a_position(personas, interrupted_run):
    """ "²" is isdigit() to Python, and int() refuses it: it is an answer typed, which is no option."""
    from tests.reviewdesk.approvals.test_questions import asking

    _, question = interrupted_run(asking(question="How many replicas?", options=["3", "2", "1"]))
    shown = session(personas.alice, "n", "²", "q")

    assert "Not decided: the answer must be one of the options" in shown
    assert not Decision.objects.filter(request=question).exists()


def test_with_a_key_file_a_question_is_answered_device_signed(
    personas, interrupted_run, device_keys, settings
):
    """The terminal's device-signed answer: the answer's hash is in the payload the key signed."""
    from agents.canonical import sha256_hex
    from tests.reviewdesk.approvals.test_questions import COLOUR, asking

    settings.DESK_REQUIRE_DEVICE_KEYS = True
    _, question = interrupted_run(asking(**COLOUR))
    out = io.StringIO()
    call_command(
        "review",
        "--as",
        "alice",
        "--key",
        str(device_keys.alice_file),
        stdin=io.StringIO("n\n2\n"),
        stdout=out,
    )
    decision = Decision.objects.get(request=question)
    assert (decision.verdict, decision.answer) == ("answer", "blue"), out.getvalue()
    assert decision.payload["signer"] == "device" and decision.key_id == device_keys.alice_key_id
    assert decision.payload["answer_sha256"] == sha256_hex("blue")
