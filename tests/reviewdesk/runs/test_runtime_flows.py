"""The runtime under the desk: real model HTTP, parallel approvals, edit, reject, steering.

Runs advance in-process through `run_execute` on the real database; the model
is the local OpenAI-compatible server over real HTTP, or the scripted provider.
"""

from __future__ import annotations

import itertools
import json

import pytest

from agents.canonical import sha256_hex
from reviewdesk.approvals.models import ApprovalRequest
from reviewdesk.audit.models import AuditEvent
from reviewdesk.demo.models import DemoRefund
from reviewdesk.lib.errors import Conflict
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus, SideEffect
from reviewdesk.runs.services import run_submit
from tests.llm_server import calls, text
from tests.reviewdesk.conftest import decide

pytestmark = pytest.mark.django_db

EMAIL = {"to": "ada@example.com", "subject": "Your refund", "body": "It is on its way."}


@pytest.fixture
def openai_run(personas, llm_server, settings):
    settings.OPENAI_BASE_URL = llm_server.url
    settings.OPENAI_MAX_RETRIES = 0

    def submit(*, stream: bool = False) -> Run:
        return run_submit(
            submitter=personas.carol,
            agent="demo",
            input="Tell Ada her refund is on its way.",
            model={"provider": "openai", "name": "test-model", "stream": stream},
        )

    return submit


def advance(run: Run) -> Run:
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    return run


def tool_results(messages: list[dict]) -> dict[str, dict]:
    return {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_openai_model_calls_a_tool_pauses_for_approval_and_resumes(
    openai_run, llm_server, personas, mailoutbox, stream
):
    llm_server.script(
        calls(("lookup_customer", {"email": "ada@example.com"}), ("send_email", EMAIL)),
        text("Ada has been told."),
    )
    run = advance(openai_run(stream=stream))
    assert run.status == RunStatus.INPUT_REQUIRED
    approval = run.approvals.get()
    assert (approval.tool, approval.arguments) == ("send_email", EMAIL)
    assert len(llm_server.requests) == 1

    decide(approval, personas.alice)
    run = advance(run)

    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.output == "Ada has been told."
    assert [m.to for m in mailoutbox] == [["ada@example.com"]]
    second = llm_server.requests[1]["messages"]
    assistant = second[2]
    assert assistant["role"] == "assistant" and len(assistant["tool_calls"]) == 2
    # Every tool call has exactly one result, right after the assistant message.
    assert [m["tool_call_id"] for m in second[3:5]] == [c["id"] for c in assistant["tool_calls"]]
    results = tool_results(second)
    assert results[assistant["tool_calls"][0]["id"]]["name"] == "Ada Lovelace"
    assert results[assistant["tool_calls"][1]["id"]]["sent"] is True


def test_a_rejection_reason_reaches_the_model_and_it_carries_on(openai_run, llm_server, personas, mailoutbox):
    llm_server.script(calls(("send_email", EMAIL)), text("Understood, I will not email her."))
    run = advance(openai_run())
    decide(run.approvals.get(), personas.bob, "reject", reason="Ada asked not to be emailed")
    run = advance(run)
    assert run.status == RunStatus.SUCCEEDED
    assert mailoutbox == []
    (result,) = tool_results(llm_server.requests[1]["messages"]).values()
    assert "Ada asked not to be emailed" in result["error"]
    assert not SideEffect.objects.filter(run=run).exists()


def test_a_reviewers_note_reaches_the_model_as_a_user_message_before_its_next_call(
    openai_run, llm_server, personas
):
    llm_server.script(calls(("send_email", EMAIL)), text("Noted."))
    run = advance(openai_run())
    decide(run.approvals.get(), personas.alice, note="Next time, copy billing@example.com.")
    advance(run)
    messages = llm_server.requests[1]["messages"]
    assert messages[-2]["role"] == "tool"
    assert messages[-1]["role"] == "user"
    assert "alice" in messages[-1]["content"] and "copy billing@example.com" in messages[-1]["content"]


def test_a_run_resumed_after_a_long_wait_tells_the_model_how_long_it_waited(
    openai_run, llm_server, personas, settings
):
    settings.DESK_WAIT_NOTICE_SECONDS = 0  # any wait counts as long
    llm_server.script(calls(("send_email", EMAIL)), text("Rechecked."))
    run = advance(openai_run())
    decide(run.approvals.get(), personas.alice)
    advance(run)
    notice = llm_server.requests[1]["messages"][-1]
    assert (
        notice["role"] == "user" and "waited" in notice["content"] and "check them again" in notice["content"]
    )


def test_a_short_wait_adds_no_notice(openai_run, llm_server, personas):
    llm_server.script(calls(("send_email", EMAIL)), text("Done."))
    run = advance(openai_run())
    decide(run.approvals.get(), personas.alice)
    advance(run)
    assert llm_server.requests[1]["messages"][-1]["role"] == "tool"


def test_garbage_tool_calls_become_errors_the_model_can_correct(openai_run, llm_server):
    llm_server.script(
        calls(
            ("send_email", '{"to": "ada@'), ("launch_rocket", {}), ("send_email", {"to": "ada@example.com"})
        ),
        text("Sorry, fixed."),
    )
    run = advance(openai_run())
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert not ApprovalRequest.objects.filter(run=run).exists()
    errors = [r["error"] for r in tool_results(llm_server.requests[1]["messages"]).values()]
    assert "not valid JSON" in errors[0]
    assert "unknown tool" in errors[1]
    assert "invalid arguments" in errors[2] and "subject" in errors[2]


def test_too_many_garbage_tool_calls_fail_the_run(openai_run, llm_server, settings):
    settings.DESK_MAX_INVALID_CALLS = 1
    llm_server.script(calls(("nope", {}), ("nope", {})), text("never asked"))
    run = advance(openai_run())
    assert run.status == RunStatus.FAILED
    assert run.error_kind == "model" and "invalid tool calls" in run.error
    assert len(llm_server.requests) == 1


def test_a_permanent_model_error_fails_the_run_without_retrying(openai_run, llm_server):
    from tests.llm_server import error

    llm_server.script(error(400, "context too long"))
    run = advance(openai_run())
    assert (run.status, run.error_kind, run.retries) == (RunStatus.FAILED, "model", 0)


def due_now(run: Run) -> None:
    """Skip the backoff wait (the scheduled task would arrive then; here we call it ourselves)."""
    Run.objects.filter(pk=run.pk).update(next_attempt_at=None)


def test_a_transient_model_error_is_retried_with_backoff_and_then_succeeds(openai_run, llm_server, settings):
    from tests.llm_server import error

    settings.DESK_RETRY_BACKOFF_SECONDS = 7
    llm_server.script(error(503, "overloaded"), text("Back again."))
    run = advance(openai_run())
    assert (run.status, run.error_kind, run.retries) == (RunStatus.QUEUED, "transient", 1)
    assert 6 <= (run.next_attempt_at - run.updated_at).total_seconds() <= 8
    assert advance(run).status == RunStatus.QUEUED  # not due yet: a duplicate delivery is turned away
    due_now(run)
    run = advance(run)
    assert (run.status, run.output) == (RunStatus.SUCCEEDED, "Back again.")
    assert [a.status for a in run.attempts.all()] == ["failed", "released"]


def test_a_run_that_got_past_a_transient_error_no_longer_reports_it(openai_run, llm_server):
    """The error an automatic retry is queued with says why the run waits; once the retry
    succeeds the run has no error: not a succeeded run shown with one (and its run.updated)."""
    from reviewdesk.events.models import DeskEvent
    from tests.llm_server import error

    llm_server.script(error(503, "overloaded"), text("Back again."))
    run = advance(openai_run())
    assert run.error and run.error_kind == "transient"
    due_now(run)
    run = advance(run)
    assert (run.status, run.error, run.error_kind) == (RunStatus.SUCCEEDED, None, "")
    last = DeskEvent.objects.filter(type="run.updated", run_id=run.pk).order_by("-id").first()
    assert (last.data["status"], last.data["error"]) == ("succeeded", None)


def test_the_same_transient_error_twice_in_a_row_stops_automatic_retries(openai_run, llm_server):
    from tests.llm_server import error

    llm_server.script(error(503, "overloaded"), error(503, "overloaded"), text("never"))
    run = advance(openai_run())
    due_now(run)
    run = advance(run)
    assert (run.status, run.retries) == (RunStatus.FAILED, 1)
    assert len(llm_server.requests) == 2


def test_the_same_transient_error_after_the_run_got_further_is_retried_again(
    openai_run, llm_server, personas
):
    """'The same error twice in a row' is two attempts failing one after the other: a thread's
    next turn that meets the overload its first turn got past is retried like any first one."""
    from reviewdesk.runs.threads import run_follow_up
    from tests.llm_server import error

    llm_server.script(error(503, "overloaded"), text("Done."), error(503, "overloaded"), text("Again."))
    run = advance(openai_run())
    due_now(run)
    assert advance(run).status == RunStatus.SUCCEEDED
    run_follow_up(run_id=run.id, user=personas.carol, input="And once more?")
    run = advance(run)
    assert (run.status, run.error_kind) == (RunStatus.QUEUED, "transient")
    due_now(run)
    assert (advance(run).status, run.output) == (RunStatus.SUCCEEDED, "Again.")


def test_automatic_retries_stop_at_the_budget(openai_run, llm_server, settings):
    from tests.llm_server import error

    settings.DESK_AUTO_RETRIES = 2
    llm_server.script(error(503, "one"), error(502, "two"), error(500, "three"), text("never"))
    run = advance(openai_run())
    for _ in range(2):
        due_now(run)
        run = advance(run)
    assert (run.status, run.retries) == (RunStatus.FAILED, 2)
    assert [a.status for a in run.attempts.all()] == ["failed"] * 3


def test_a_retry_by_hand_gets_the_automatic_retry_budget_afresh(openai_run, llm_server, personas, settings):
    """The budget bounds one go at the run: after it ran out and the submitter retried, the
    first transient error is retried again, not the end of the run."""
    from reviewdesk.runs.services import run_retry
    from tests.llm_server import error

    settings.DESK_AUTO_RETRIES = 1
    llm_server.script(error(503, "one"), error(502, "two"), error(500, "three"), text("Done."))
    run = advance(openai_run())
    due_now(run)
    assert advance(run).status == RunStatus.FAILED  # the budget is spent
    run_retry(run_id=run.id, user=personas.carol)
    run = advance(run)
    assert (run.status, run.error_kind) == (RunStatus.QUEUED, "transient")
    due_now(run)
    assert (advance(run).status, run.output) == (RunStatus.SUCCEEDED, "Done.")


# --- edit ----------------------------------------------------------------------


def test_an_edit_runs_the_edited_arguments_and_keeps_both(interrupted_run, personas, mailoutbox):
    run, approval = interrupted_run()
    edited = {**approval.arguments, "subject": "Refund issued (order A-1001)"}
    decision = decide(approval, personas.alice, "edit", arguments=edited, reason="clearer subject")
    approval.refresh_from_db()
    assert approval.arguments["subject"] == "Your refund"  # the original is kept
    assert decision.arguments == edited
    assert decision.payload["arguments_sha256"] == sha256_hex(edited) != approval.arguments_sha256
    audit = AuditEvent.objects.get(action="decision.edit")
    assert audit.data["original_arguments_sha256"] == approval.arguments_sha256
    assert audit.data["policy_requires_approval"] is True

    run = advance(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert [m.subject for m in mailoutbox] == ["Refund issued (order A-1001)"]


def test_an_edit_under_the_policy_threshold_still_runs_as_edited(interrupted_run, personas):
    script = [
        {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 150}}]}
    ]
    run, approval = interrupted_run(script=script)
    decide(approval, personas.alice, "edit", arguments={"order_id": "A-1001", "amount": 90})
    audit = AuditEvent.objects.get(action="decision.edit")
    assert audit.data["policy_requires_approval"] is False
    run = advance(run)
    assert run.status == RunStatus.SUCCEEDED
    assert [(r.order_id, str(r.amount)) for r in DemoRefund.objects.all()] == [("A-1001", "90.00")]


# --- parallel approvals ------------------------------------------------------------

THREE_GATED = [
    {
        "tool_calls": [
            {"name": "send_email", "arguments": EMAIL},
            {"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 150}},
            {"name": "execute", "arguments": {"command": "echo refunded > note.txt && cat note.txt"}},
        ]
    },
    {"content": "All three handled."},
]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))), ids=lambda o: "-".join(map(str, o)))
def test_three_parallel_approvals_decided_in_any_order(interrupted_run, personas, mailoutbox, order):
    run, _ = interrupted_run(script=THREE_GATED)
    approvals = list(run.approvals.order_by("tool_call_id"))
    assert [a.tool for a in approvals] == ["send_email", "refund_payment", "execute"]
    assert len({a.checkpoint_id for a in approvals}) == 1

    for step, index in enumerate(order, start=1):
        decide(approvals[index], personas.alice)
        if approvals[index].tool == "execute":  # the demo's execute needs a second reviewer
            decide(approvals[index], personas.bob)
        run = advance(run)
        done = {approvals[i].tool_call_id for i in order[:step]}
        effects = {e.tool_call_id: e.status for e in SideEffect.objects.filter(run=run)}
        # The approved call ran as soon as its decision landed; the others still wait.
        assert effects == dict.fromkeys(done, "confirmed")
        if step < 3:
            assert run.status == RunStatus.INPUT_REQUIRED
            assert run.approvals.filter(status="pending").count() == 3 - step
        # Siblings' resumes never make the remaining approvals stale.

    assert run.status == RunStatus.SUCCEEDED, run.error
    assert len(mailoutbox) == 1 and DemoRefund.objects.count() == 1
    log = [m.body for m in run.messages.order_by("position")]
    assistant_at = next(i for i, m in enumerate(log) if m.get("tool_calls"))
    results = log[assistant_at + 1 : assistant_at + 4]
    assert [m["tool_call_id"] for m in results] == [a.tool_call_id for a in approvals]
    assert json.loads(results[2]["content"])["stdout"] == "refunded\n"


def test_a_decision_for_a_call_no_longer_awaiting_is_stale(interrupted_run, personas):
    run, _ = interrupted_run(script=THREE_GATED)
    first, second, _ = run.approvals.order_by("tool_call_id")
    decide(first, personas.alice)
    advance(run)
    # The sibling is still decidable with the checkpoint it was raised at...
    decide(second, personas.alice)
    # ...but a request whose call has left the open batch is not, whatever its row says.
    third = run.approvals.get(tool_call_id="call_0_2")
    from reviewdesk.runs.models import Checkpoint

    latest = Checkpoint.objects.filter(run=run).order_by("-number").first()
    latest.snapshot["batch"][2]["status"] = "rejected"
    latest.save()
    with pytest.raises(Conflict):
        decide(third, personas.bob)


def test_small_refunds_never_add_up_past_the_order_total(interrupted_run, personas):
    """Past 100 on an order the refunds need approval; approved, the tool still caps
    the total at the order's amount."""
    script = [
        {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": 100}}] * 3},
        {"content": "Refunded what I could."},
        {"content": "unused"},
    ]
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="refund",
        model={"provider": "scripted", "script": script},
    )
    run = advance(run)
    assert run.status == RunStatus.INPUT_REQUIRED
    waiting = list(run.approvals.filter(status="pending").order_by("tool_call_id"))
    assert [a.tool_call_id for a in waiting] == ["call_0_1", "call_0_2"]
    for approval in waiting:
        decide(approval, personas.alice)
    run = advance(run)
    assert run.status == RunStatus.SUCCEEDED
    assert sum(r.amount for r in DemoRefund.objects.all()) == 200
    errors = [e.result for e in SideEffect.objects.filter(run=run) if "error" in (e.result or {})]
    assert len(errors) == 1 and "exceeds what is left" in errors[0]["error"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_lone_surrogate_from_the_model_is_kept_as_a_replacement_character(
    openai_run, llm_server, personas, api_as, stream
):
    """The server's "\\ud800" escapes decode to characters no UTF-8 encodes: kept as they came,
    the run's first write failed on PostgreSQL and its API answered 500 on SQLite."""
    arguments = '{"to": "ada@example.com", "subject": "Hi \ud800", "body": "It is on its way."}'
    llm_server.script(calls(("send_email", arguments)), text("Done \udfff."))
    run = advance(openai_run(stream=stream))
    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    approval = run.approvals.get()
    assert approval.arguments["subject"] == "Hi \ufffd"
    decide(approval, personas.alice)
    run = advance(run)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.output == "Done \ufffd."
    response = api_as(personas.alice, "review").get(f"/api/v1/runs/{run.id}")
    assert response.status_code == 200 and response.json()["output"] == "Done \ufffd."
