"""The three classes of tool failure, in memory: ToolError goes to the model,
ToolUnavailable is retried under a budget (recorded on the ledger row), and anything
else raised by an external effect makes its outcome unknown and asks a human."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from agents.loop import Failed, FailureKind, Finished, Limits, Retrying, Waiting, advance
from agents.providers.scripted import ScriptedProvider
from agents.registry import Agent, get_agent
from agents.state import CallStatus
from agents.testing import InMemoryHost, RecordingWorld
from agents.tools import OnRetriesExhausted, ToolUnavailable

EMAIL = {"to": "ada@example.com", "subject": "Hi", "body": "x"}
SEND = [{"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}, {"content": "Done."}]
REFUND = [
    {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1002", "amount": 40}}]},
    {"content": "Done."},
]
FAST = Limits(tool_retries=3, tool_retries_per_run=10, tool_retry_backoff=1.0, tool_retry_inline=5.0)


class FlakyWorld(RecordingWorld):
    """The demo world whose email and refund fail `failures` times with `error`, then work.
    With `after_effect`, the failing call has done its work before it raises."""

    def __init__(self, *, failures: int, error: Exception, after_effect: bool = False) -> None:
        super().__init__()
        self.failures, self.error, self.after_effect, self.tries = failures, error, after_effect, 0

    def _maybe_fail(self) -> None:
        self.tries += 1
        if self.tries <= self.failures:
            raise self.error

    def send_email(self, **kwargs: Any) -> str:
        if self.after_effect:
            message_id = super().send_email(**kwargs)
            self._maybe_fail()
            return message_id
        self._maybe_fail()
        return super().send_email(**kwargs)

    def refund(self, **kwargs: Any) -> dict[str, Any]:
        result = super().refund(**kwargs)  # written first: the rollback must undo it
        self._maybe_fail()
        return result


def demo_with(**changes: Any) -> Agent:
    demo = get_agent("demo")
    return replace(
        demo, tools=tuple(replace(t, **changes) if t.name == "send_email" else t for t in demo.tools)
    )


def step(host: InMemoryHost, script=SEND, *, limits: Limits = FAST, agent: Agent | None = None, sleeps=None):
    return advance(
        agent=agent or get_agent("demo"),
        provider=ScriptedProvider(script),
        host=host,
        limits=limits,
        sleep=(sleeps.append if sleeps is not None else lambda s: None),
    )


def approved_email(world) -> InMemoryHost:
    host = InMemoryHost(world=world)
    assert isinstance(step(host), Waiting)
    host.approve("call_0_0")
    return host


def row(host: InMemoryHost, call: str = "call_0_0"):
    return host.ledger.rows[f"{host.run_id}:{call}"]


def test_an_unavailable_mail_server_is_retried_with_doubling_waits_and_the_email_sent_once():
    world = FlakyWorld(failures=2, error=ToolUnavailable("connection refused"))
    host, sleeps = approved_email(world), []

    assert step(host, sleeps=sleeps) == Finished("Done.")

    assert len(world.emails) == 1 and world.tries == 3
    assert sleeps == [1.0, 2.0]
    assert (row(host).status, row(host).retries, row(host).last_error) == (
        "confirmed",
        2,
        "ToolUnavailable: connection refused",
    )


def test_a_connection_refused_by_a_foreign_world_is_classified_transient_by_send_email():
    world = FlakyWorld(failures=1, error=ConnectionRefusedError(111, "Connection refused"))
    host = approved_email(world)

    assert step(host) == Finished("Done.")
    assert len(world.emails) == 1 and row(host).retries == 1


def test_a_wait_longer_than_the_inline_limit_releases_the_run_and_the_next_advance_sends_once():
    world = FlakyWorld(failures=1, error=ToolUnavailable("503"))
    host = approved_email(world)
    limits = replace(FAST, tool_retry_inline=0.5)

    outcome = step(host, limits=limits)

    assert outcome == Retrying(call_id="call_0_0", delay=1.0, error="ToolUnavailable: 503")
    assert (row(host).status, world.emails) == ("retrying", [])
    assert step(host, limits=limits) == Finished("Done.")
    assert len(world.emails) == 1


def test_a_failure_after_the_effect_may_have_happened_becomes_unknown_and_waits_for_a_human():
    world = FlakyWorld(failures=1, error=RuntimeError("connection dropped after DATA"), after_effect=True)
    host = approved_email(world)

    assert step(host) == Waiting(("call_0_0",))

    assert host.state().batch[0].status == CallStatus.UNKNOWN
    assert row(host).status == "unknown" and row(host).retries == 0
    assert host.approval("call_0_0").status == CallStatus.UNKNOWN  # a reconciliation was raised
    host.confirm_effect("call_0_0", result={"sent": True})
    assert step(host) == Finished("Done.")
    assert len(world.emails) == 1  # never sent again


def test_a_spent_per_call_budget_fails_the_run_under_the_default_policy():
    world = FlakyWorld(failures=99, error=ToolUnavailable("connection refused"))
    host, sleeps = approved_email(world), []

    outcome = step(host, sleeps=sleeps)

    assert isinstance(outcome, Failed) and outcome.kind == FailureKind.UNAVAILABLE
    assert "after 4 tries" in outcome.error
    assert world.tries == 4 and sleeps == [1.0, 2.0, 4.0]  # 3 retries
    assert (row(host).status, row(host).retries, world.emails) == ("retrying", 4, [])


def test_a_spent_budget_asks_a_reviewer_under_the_ask_policy_and_a_signed_rerun_tries_again():
    agent = demo_with(on_retries_exhausted=OnRetriesExhausted.ASK)
    world = FlakyWorld(failures=4, error=ToolUnavailable("connection refused"))
    host = InMemoryHost(world=world)
    step(host, agent=agent)
    host.approve("call_0_0")

    assert step(host, agent=agent) == Waiting(("call_0_0",))
    assert row(host).status == "unknown" and world.emails == []
    host.rerun("call_0_0")
    assert step(host, agent=agent) == Finished("Done.")
    assert len(world.emails) == 1 and world.tries == 5


def test_the_per_run_budget_counts_the_failures_of_every_call():
    script = [
        {"tool_calls": [{"name": "send_email", "arguments": EMAIL}]},
        {"tool_calls": [{"name": "send_email", "arguments": {**EMAIL, "subject": "Again"}}]},
        {"content": "Done."},
    ]
    world = FlakyWorld(failures=1, error=ToolUnavailable("busy"))
    host = InMemoryHost(world=world)
    limits = replace(FAST, tool_retries_per_run=1)
    step(host, script, limits=limits)
    host.approve("call_0_0")
    assert isinstance(step(host, script, limits=limits), Waiting)  # one retry, then sent
    host.approve("call_1_0")
    world.tries = 0  # the second email fails once too: the run's second retry

    outcome = step(host, script, limits=limits)

    assert isinstance(outcome, Failed) and outcome.kind == FailureKind.UNAVAILABLE
    assert len(world.emails) == 1


def test_a_failed_refund_rolls_back_with_its_ledger_row_and_is_retried_as_transient():
    world = FlakyWorld(failures=1, error=RuntimeError("lock timeout"))
    host = InMemoryHost(world=world)

    assert step(host, REFUND) == Finished("Done.")

    assert [r.amount for r in world.refunds] == [Decimal("40")]  # the failed try left nothing
    assert (row(host).status, row(host).retries) == ("confirmed", 1)


def test_a_tool_error_still_goes_to_the_model_and_is_never_retried():
    host = InMemoryHost()
    script = [
        {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "NOPE", "amount": 1}}]},
        {"content": "Done."},
    ]

    assert step(host, script) == Finished("Done.")

    result = json.loads(next(m["content"] for m in host.log if m["role"] == "tool"))
    assert result == {"error": "no order NOPE"}
    assert row(host).retries == 0


@pytest.mark.parametrize("retries,delay", [(1, 1.0), (2, 2.0), (5, 16.0), (9, 60.0)])
def test_the_backoff_doubles_up_to_its_cap(retries, delay):
    assert Limits(tool_retry_backoff=1.0, tool_retry_backoff_max=60.0).tool_retry_delay(retries) == delay
