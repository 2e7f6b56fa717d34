"""The Pydantic AI adapter against the real desk (conftest.py's `desk`), with Pydantic AI's own
FunctionModel and TestModel as the only stand-ins. Reviewers decide through the desk's API.

Every pause and every resume runs in its own event loop with a new agent and model: only the
client's store carries a conversation from one to the next, as after a restart. One test pauses
in a separate process and resumes through the resumer.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is not installed")

from conftest import DESK_PYTHON, REPO, wait_until
from pydantic_ai import Agent
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import DeferredToolRequests

from reviewdesk_client import KeyRing, Outcome, SQLiteStore
from reviewdesk_client.adapters import pydantic_ai as pa
from reviewdesk_client.adapters.pydantic_ai import DeskGate
from reviewdesk_client.canonical import jcs

HERE = Path(__file__).resolve().parent
EMAIL = {"to": "ann@example.org", "body": "Your refund is on its way."}
OTHER = {"to": "bo@example.org", "body": "Your order shipped."}
# Only the grant tests send this: an exact-match grant on it must allow no other test's call.
GRANTED = {"to": "gail@example.org", "body": "Your standing order is confirmed."}
EDITED = {"to": "ann@example.org", "body": "Your refund of 25 EUR is on its way."}
PROMPT = "Tell Ann about her refund"


class Outbox:
    """The gated tool's side effect: every email it sends, in order."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def agent(self, model) -> Agent:
        agent = Agent(model, output_type=[str, DeferredToolRequests], name="mailer")

        @agent.tool_plain(requires_approval=True)
        def send_email(to: str, body: str) -> str:
            """Send an email."""
            self.sent.append({"to": to, "body": body})
            return f"sent to {to}"

        return agent


def calling(calls) -> FunctionModel:
    """A model whose one answer is these calls [(call_id, arguments)]."""

    def respond(messages, info):
        return ModelResponse(
            parts=[ToolCallPart("send_email", args, tool_call_id=cid) for cid, args in calls]
        )

    return FunctionModel(respond)


class Replier:
    """A model that answers "Done." (or first makes `then_calls`) and keeps what each call
    returned as the model saw it, and whether the call failed."""

    def __init__(self, then_calls=()) -> None:
        self.requests = 0
        self.returns: dict[str, str] = {}
        self.outcomes: dict[str, str] = {}
        self.then_calls = list(then_calls)
        self.model = FunctionModel(self.respond)

    def respond(self, messages, info):
        self.requests += 1
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart):
                self.returns[part.tool_call_id] = part.model_response_str(wrap_if_error=False)
                self.outcomes[part.tool_call_id] = part.outcome
        if self.then_calls:
            calls, self.then_calls = self.then_calls, []
            return ModelResponse(parts=[ToolCallPart("send_email", a, tool_call_id=c) for c, a in calls])
        return ModelResponse(parts=[TextPart("Done.")])


def pause(client, outbox: Outbox, calls, *, conversation: str | None = None, **gate_kwargs):
    conversation = conversation or f"c-{uuid.uuid4()}"
    gate = DeskGate(client, **gate_kwargs)
    result = asyncio.run(gate.run(outbox.agent(calling(calls)), conversation, PROMPT))
    assert result.status == "paused", result
    return conversation, result.tickets


def resume(client, outbox: Outbox, conversation: str, *, outcomes=None, then_calls=()):
    """Resume in a new event loop with a new agent and model; the result and the model."""
    replier = Replier(then_calls)
    gate = DeskGate(client)
    result = asyncio.run(gate.resume(outbox.agent(replier.model), conversation, outcomes=outcomes))
    return result, replier


def desk_python(desk, code: str) -> str:
    """`code` in the desk's own Python and settings, as an observer of its ledger."""
    done = subprocess.run(
        [str(DESK_PYTHON), "-c", "import django\ndjango.setup()\n" + code],
        env=desk.env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def ledger(desk, run_id: str) -> list[tuple[str, str]]:
    """The desk's ledger rows for the run: (tool call id, status)."""
    rows = desk_python(
        desk,
        "import json\nfrom reviewdesk.runs.models import SideEffect\n"
        f"rows = SideEffect.objects.filter(run_id='{run_id}').order_by('tool_call_id')\n"
        "print(json.dumps(list(rows.values_list('tool_call_id', 'status'))))",
    )
    return [tuple(row) for row in json.loads(rows.strip().splitlines()[-1])]


def page_as(desk, username: str, path: str) -> str:
    """A desk page as a reviewer sees it in a browser: logged in with the demo password."""
    password = (Path(desk.var_dir) / "demo_password").read_text().strip()
    with httpx.Client(base_url=desk.url, follow_redirects=True, timeout=30) as browser:
        login = browser.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        form = {"username": username, "password": password, "csrfmiddlewaretoken": token}
        browser.post("/accounts/login/", data=form, headers={"Referer": desk.url + "/accounts/login/"})
        page = browser.get(path)
    assert page.status_code == 200 and "csrfmiddlewaretoken" in page.text, page.status_code
    return page.text


def test_approve_runs_the_tool_once_after_a_restart(desk, client):
    outbox = Outbox()
    conversation, [ticket] = pause(client, outbox, [("c1", EMAIL)])
    assert ticket.verdicts == ("approve", "reject", "edit") and outbox.sent == []
    desk.decide(ticket.approval_id, "approve")

    result, replier = resume(client, outbox, conversation)

    assert (result.status, result.output) == ("finished", "Done.")
    assert outbox.sent == [EMAIL] and replier.returns == {"c1": "sent to ann@example.org"}
    _, run = desk.api("GET", f"/api/v1/runs/{ticket.run_id}")
    assert run["status"] == "succeeded"
    assert ledger(desk, ticket.run_id) == [("c1", "confirmed")]
    again, _ = resume(client, outbox, conversation)
    assert again.status == "finished" and outbox.sent == [EMAIL]


def test_edit_runs_with_override_args(desk, client):
    outbox = Outbox()
    conversation, [ticket] = pause(client, outbox, [("c1", EMAIL)])
    desk.decide(ticket.approval_id, "edit", arguments=EDITED)

    _, replier = resume(client, outbox, conversation)

    assert outbox.sent == [EDITED]
    assert replier.returns["c1"] == (
        pa.EDIT_NOTICE.format(arguments=json.dumps(EDITED)) + "sent to ann@example.org"
    )
    assert ledger(desk, ticket.run_id) == [("c1", "confirmed")]


def test_reject_sends_the_reviewers_reason_to_the_model(desk, client):
    outbox = Outbox()
    conversation, [ticket] = pause(client, outbox, [("c1", EMAIL)])
    desk.decide(ticket.approval_id, "reject", reason="Ann asked not to be emailed.")

    result, replier = resume(client, outbox, conversation)

    assert result.status == "finished" and outbox.sent == []
    assert replier.returns == {
        "c1": "A Review Desk reviewer rejected this call: Ann asked not to be emailed."
    }


def test_one_of_two_decided_does_not_resume_and_both_decided_resume_once(desk, client):
    outbox = Outbox()
    conversation, [first, second] = pause(client, outbox, [("c1", EMAIL), ("c2", OTHER)])
    _, approval = desk.api("GET", f"/api/v1/approvals/{first.approval_id}", as_="alice")
    assert approval["external"]["resume_policy"] == "all_or_nothing"
    page = page_as(desk, "alice", f"/approvals/{first.approval_id}/")
    assert 'id="all-or-nothing"' in page and "None of these calls runs until all are decided" in page
    assert 'id="edit-link"' in page  # override_args: Pydantic AI edits natively
    desk.decide(first.approval_id, "approve")

    result, replier = resume(client, outbox, conversation)

    assert result.status == "paused" and replier.requests == 0 and outbox.sent == []
    desk.decide(second.approval_id, "reject", reason="Not today.")
    result, replier = resume(client, outbox, conversation)
    assert result.status == "finished" and replier.requests == 1
    assert outbox.sent == [EMAIL]
    assert replier.returns["c2"] == "A Review Desk reviewer rejected this call: Not today."


APP = """
import asyncio, json, os, sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from reviewdesk_client import DeskClient, SQLiteStore
from reviewdesk_client.adapters.pydantic_ai import DeskGate, resumer_handler

CALLS = __CALLS__


def mailer(respond):
    agent = Agent(FunctionModel(respond), output_type=[str, DeferredToolRequests], name="mailer")

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str, body: str) -> str:
        \"\"\"Send an email.\"\"\"
        with open(os.environ["PA_APP_SENT"], "a") as sent:
            sent.write(json.dumps({"to": to, "body": body}) + "\\n")
        return f"sent to {to}"

    return agent


def calls(messages, info):
    return ModelResponse(parts=[ToolCallPart("send_email", a, tool_call_id=c) for c, a in CALLS])


handler = resumer_handler(lambda gate: mailer(lambda m, i: ModelResponse(parts=[TextPart("Done.")])))

if __name__ == "__main__":
    store, conversation = sys.argv[1:]
    gate = DeskGate(DeskClient(store=SQLiteStore(store)))
    assert asyncio.run(gate.run(mailer(calls), conversation, "Tell them")).status == "paused"
"""


def test_paused_process_exits_and_the_resumer_resumes_the_turn_once(desk, tmp_path):
    calls = [("c1", EMAIL), ("c2", OTHER)]
    (tmp_path / "pa_app.py").write_text(APP.replace("__CALLS__", repr(calls)))
    store_path, sent_path = tmp_path / "store.sqlite3", tmp_path / "sent.jsonl"
    conversation = f"c-{uuid.uuid4()}"
    env = {
        **os.environ,
        "REVIEWDESK_URL": desk.url,
        "REVIEWDESK_TOKEN": desk.tokens["svc"],
        "REVIEWDESK_KEYS": json.dumps(desk.keys),
        "PA_APP_SENT": str(sent_path),
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(tmp_path)]),
    }

    def python(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    def resumer() -> subprocess.CompletedProcess:
        return python(
            "-m",
            "reviewdesk_client.resumer",
            "--desk",
            desk.url,
            "--store",
            str(store_path),
            "--handler",
            "pa_app:handler",
            "--once",
        )

    python("pa_app.py", str(store_path), conversation)  # pauses, submits, exits
    with desk.client(store=SQLiteStore(store_path)) as client:
        first, second = client.store.tickets(pa.external_id_for(conversation))
    desk.decide(first.approval_id, "approve")
    resumer()
    assert not sent_path.exists()  # one of two decided: the turn waits
    desk.decide(second.approval_id, "approve")

    resumer()

    # Each once; in either order: Pydantic AI runs a turn's function tools in parallel.
    sent = [json.loads(line) for line in sent_path.read_text().splitlines()]
    assert sorted(sent, key=lambda e: e["to"]) == [EMAIL, OTHER]
    _, run = desk.api("GET", f"/api/v1/runs/{first.run_id}")
    assert run["status"] == "succeeded"


def forge(decision: dict, **changes) -> dict:
    """The decision with payload fields changed and the desk's signature left as it was."""
    payload = {**json.loads(base64.b64decode(decision["payload_b64"])), **changes}
    return {
        **decision,
        **changes,
        "payload": payload,
        "payload_b64": base64.b64encode(jcs(payload)).decode(),
    }


def test_forged_decision_is_refused_before_the_tool_runs(desk, client):
    outbox = Outbox()
    conversation, [ticket] = pause(client, outbox, [("c1", EMAIL)])
    desk.decide(ticket.approval_id, "reject", reason="No.")
    forged = forge(client.outcome(ticket).decision, verdict="approve")

    result, replier = resume(client, outbox, conversation, outcomes={"c1": Outcome("approved", forged)})

    assert result.status == "paused" and replier.requests == 0 and outbox.sent == []
    assert result.refused["c1"].startswith("signature")


def test_replayed_decision_is_refused_here_and_by_the_desk(desk, client, tmp_path):
    outbox = Outbox()
    conversation, [ticket] = pause(client, outbox, [("c1", EMAIL)])
    external_id = pa.external_id_for(conversation)
    paused_state = client.store.get_state(external_id)
    desk.decide(ticket.approval_id, "approve")
    outcome = client.outcome(ticket)
    # the model goes on to another gated call: the desk's run is still going
    result, _ = resume(client, outbox, conversation, then_calls=[("c2", OTHER)])
    assert result.status == "paused" and outbox.sent == [EMAIL]

    # the same process, its history rolled back to the pause: the nonce is spent here
    client.store.put_state(external_id, paused_state)
    result, _ = resume(client, outbox, conversation, outcomes={"c1": outcome})
    assert result.refused["c1"].startswith("replayed") and outbox.sent == [EMAIL]

    # another replica with the paused history and the ticket: the desk's consume refuses it
    with desk.client(store=SQLiteStore(tmp_path / "replica.sqlite3")) as replica:
        replica.store.put_tickets([ticket])
        replica.store.put_state(external_id, paused_state)
        _, replier = resume(
            replica, outbox, conversation, outcomes={"c1": outcome}, then_calls=[("c2", OTHER)]
        )
    assert outbox.sent == [EMAIL] and replier.outcomes["c1"] == "failed"
    assert replier.returns["c1"].startswith(
        pa.REFUSED.format(why="the decision cannot be used (409 consumed")
    ), replier.returns["c1"]


def test_decision_for_another_run_with_testmodels_constant_call_id_is_refused(desk, client):
    outbox = Outbox()
    gate = DeskGate(client)
    run_a = asyncio.run(gate.run(outbox.agent(TestModel()), f"c-{uuid.uuid4()}", PROMPT))
    conversation_b = f"c-{uuid.uuid4()}"
    run_b = asyncio.run(gate.run(outbox.agent(TestModel()), conversation_b, PROMPT))
    [ticket_a], [ticket_b] = run_a.tickets, run_b.tickets
    assert ticket_a.tool_call_id == ticket_b.tool_call_id == "pyd_ai_tool_call_id__send_email"
    desk.decide(ticket_a.approval_id, "approve")

    result, _ = resume(
        client, outbox, conversation_b, outcomes={ticket_b.tool_call_id: client.outcome(ticket_a)}
    )

    assert result.status == "paused" and outbox.sent == []
    assert result.refused[ticket_b.tool_call_id].startswith("binding")


def test_decision_signed_by_an_unpinned_key_is_refused(desk, client):
    outbox = Outbox()
    conversation, [ticket] = pause(client, outbox, [("c1", EMAIL)])
    desk.decide(ticket.approval_id, "approve")
    some_other_key = base64.b64encode(os.urandom(32)).decode()
    with desk.client(store=client.store, keys=KeyRing({"ed25519:someone-else": some_other_key})) as other:
        result, _ = resume(other, outbox, conversation)
    assert result.refused["c1"].startswith("unpinned_key") and outbox.sent == []


def test_tampered_history_is_refused(desk, client):
    outbox = Outbox()
    conversation, [ticket] = pause(client, outbox, [("c1", EMAIL)])
    external_id = pa.external_id_for(conversation)
    stored = client.store.get_state(external_id)
    client.store.put_state(external_id, stored.replace("ann@example.org", "eve@example.org"))
    desk.decide(ticket.approval_id, "approve")

    result, _ = resume(client, outbox, conversation)

    assert result.refused["c1"].startswith("arguments_changed") and outbox.sent == []


def test_approvals_made_without_the_desk_are_refused_by_the_guard(desk, client):
    """build_results(approve_all=True) inside a gate run: the guard finds no verified decision."""
    outbox = Outbox()
    gate = DeskGate(client)
    conversation = f"c-{uuid.uuid4()}"
    paused = asyncio.run(gate.run(outbox.agent(calling([("c1", EMAIL)])), conversation, PROMPT))
    replier = Replier()
    run_kwargs = {
        "message_history": paused.result.all_messages(),
        "deferred_tool_results": paused.output.build_results(approve_all=True),
    }

    asyncio.run(gate._run(outbox.agent(replier.model), pa.external_id_for(conversation), None, run_kwargs))

    assert outbox.sent == [] and replier.outcomes["c1"] == "failed"
    assert replier.returns["c1"] == pa.REFUSED.format(why="no verified reviewer decision for this call")


def test_a_decision_verified_for_another_call_is_refused_by_the_guard(desk, client):
    """Run A's verified decision for c1 left under run B's c1, which is approved without the
    desk: the guard sees the decision is not for B's call."""
    outbox = Outbox()
    _, [ticket_a] = pause(client, outbox, [("c1", EMAIL)])
    desk.decide(ticket_a.approval_id, "approve")
    verified_a = client.verify(client.outcome(ticket_a).decision, ticket_a, current_arguments=EMAIL)
    gate = DeskGate(client)
    conversation_b = f"c-{uuid.uuid4()}"
    paused = asyncio.run(gate.run(outbox.agent(calling([("c1", EMAIL)])), conversation_b, PROMPT))
    external_b = pa.external_id_for(conversation_b)
    client.store.put_verified(pa.verified_key(external_b, "c1"), verified_a)
    replier = Replier()
    run_kwargs = {
        "message_history": paused.result.all_messages(),
        "deferred_tool_results": paused.output.build_results(approve_all=True),
    }

    asyncio.run(gate._run(outbox.agent(replier.model), external_b, None, run_kwargs))

    assert outbox.sent == [] and replier.outcomes["c1"] == "failed"
    assert replier.returns["c1"] == pa.REFUSED.format(why="the decision is not for this call")


def test_cancelled_run_becomes_a_denial_the_model_reads(desk, client):
    outbox = Outbox()
    conversation, [ticket] = pause(client, outbox, [("c1", EMAIL)])
    client.cancel_run(ticket.run_id)

    result, replier = resume(client, outbox, conversation)

    assert result.status == "finished" and outbox.sent == []
    assert replier.returns == {"c1": pa.LAPSED.format(status="cancelled")}


def test_expired_call_is_denied_and_its_decided_sibling_proceeds(desk, client):
    outbox = Outbox()
    conversation, [first, second] = pause(
        client, outbox, [("c1", EMAIL), ("c2", OTHER)], approval_ttl_seconds=10
    )
    desk.decide(first.approval_id, "approve")

    # the desk's beat sweeps every second (conftest.py) and expires it
    wait_until(lambda: client.outcome(second) is not None, timeout=60, what="the expiry", interval=0.5)
    result, replier = resume(client, outbox, conversation)

    assert result.status == "finished" and outbox.sent == [EMAIL]
    assert replier.returns["c2"] == pa.LAPSED.format(status="expired")


def test_a_turn_standing_grants_cover_runs_at_once_without_pausing(desk, client):
    outbox = Outbox()
    conversation, [ticket] = pause(client, outbox, [("c1", GRANTED)])
    desk.decide(ticket.approval_id, "approve", grant={"match": "exact", "scope": "agent", "max_uses": 1})
    resume(client, outbox, conversation)
    assert outbox.sent == [GRANTED]

    def calls_then_done(messages, info):
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("send_email", GRANTED, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("Sent again.")])

    gate = DeskGate(client)
    agent = outbox.agent(FunctionModel(calls_then_done))
    result = asyncio.run(gate.run(agent, f"c-{uuid.uuid4()}", PROMPT))

    assert (result.status, result.output) == ("finished", "Sent again.")
    assert outbox.sent == [GRANTED, GRANTED]


def test_a_tool_that_asks_for_approval_itself_is_gated_the_same_way(desk, client):
    refunds: list[int] = []

    def agent(model) -> Agent:
        made = Agent(model, output_type=[str, DeferredToolRequests], name="refunds")

        @made.tool
        def refund(ctx, amount: int) -> str:
            """Refund an amount."""
            if amount > 100 and not ctx.tool_call_approved:
                raise ApprovalRequired()
            refunds.append(amount)
            return f"refunded {amount}"

        return made

    def big_refund(messages, info):
        return ModelResponse(parts=[ToolCallPart("refund", {"amount": 250}, tool_call_id="r1")])

    conversation = f"c-{uuid.uuid4()}"
    paused = asyncio.run(DeskGate(client).run(agent(FunctionModel(big_refund)), conversation, "Refund"))
    [ticket] = paused.tickets
    desk.decide(ticket.approval_id, "edit", arguments={"amount": 90})
    replier = Replier()

    result = asyncio.run(DeskGate(client).resume(agent(replier.model), conversation))

    assert result.status == "finished" and refunds == [90]
    assert ledger(desk, ticket.run_id) == [("r1", "confirmed")]  # the guard consumed it
