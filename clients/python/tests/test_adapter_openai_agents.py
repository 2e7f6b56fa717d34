"""The OpenAI Agents SDK adapter against the real desk (conftest.py's `desk`), with the SDK's own
scripted model as the only stand-in. Reviewers decide through the desk's API.

Every pause and every resume runs in its own event loop with SDK objects built afresh (agent,
model, tools): only the client's store carries a run from one to the next, as after a restart.
One test pauses in a separate process and resumes through the resumer.
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

pytest.importorskip("agents.testing", reason="openai-agents is not installed")

from agents.exceptions import ModelBehaviorError
from conftest import DESK_PYTHON, REPO, wait_until
from openai.types.responses.response_output_item import McpApprovalRequest

from agents import Agent, HostedMCPTool, RunState, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from reviewdesk_client import KeyRing, Outcome, SQLiteStore
from reviewdesk_client.adapters import openai_agents as oa
from reviewdesk_client.adapters.openai_agents import DeskGate
from reviewdesk_client.canonical import jcs

HERE = Path(__file__).resolve().parent
EMAIL = {"to": "ann@example.org", "body": "Your refund is on its way."}
OTHER = {"to": "bo@example.org", "body": "Your order shipped."}
# Only the grant tests send this: an exact-match grant on it must allow no other test's call.
GRANTED = {"to": "gail@example.org", "body": "Your standing order is confirmed."}
EDITED = {"to": "ann@example.org", "body": "Your refund of 25 EUR is on its way."}
PROMPT = "Tell Ann about her refund"


@pytest.fixture(autouse=True)
def _no_trace_export():
    set_tracing_disabled(True)


class Outbox:
    """The gated tool's side effect: every email it sends, in order."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def tool(self):
        @function_tool
        def send_email(to: str, body: str) -> str:
            """Send an email."""
            self.sent.append({"to": to, "body": body})
            return f"sent to {to}"

        return send_email


def mailer(gate: DeskGate, outbox: Outbox, model: ScriptedModel, *extra_tools) -> Agent:
    return Agent(name="mailer", model=model, tools=[gate.gated(outbox.tool()), *extra_tools])


def pause(client, outbox: Outbox, calls, *, thread: str | None = None, **gate_kwargs):
    """Run until the gate pauses on `calls` [(call_id, arguments)]; the thread and its tickets."""
    thread = thread or f"t-{uuid.uuid4()}"
    gate = DeskGate(client, **gate_kwargs)
    model = ScriptedModel([[function_call("send_email", args, call_id=cid) for cid, args in calls]])
    result = asyncio.run(gate.run(mailer(gate, outbox, model), thread, PROMPT))
    assert result.status == "paused", result
    return thread, result.tickets


def resume(client, outbox: Outbox, thread: str, *, outcomes=None, final: str = "Done."):
    """Resume in a new event loop with new SDK objects; the result and the model it used."""
    gate = DeskGate(client)
    model = ScriptedModel([[assistant_message(final)]])
    result = asyncio.run(gate.resume(mailer(gate, outbox, model), thread, outcomes=outcomes))
    return result, model


def tool_outputs(model: ScriptedModel) -> dict[str, str]:
    """What the model was told each call returned, by call id (its last request)."""
    items = model.last_call.input
    return {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}


def run_status(desk, run_id: str) -> str:
    status, run = desk.api("GET", f"/api/v1/runs/{run_id}")
    assert status == 200, run
    return run["status"]


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
    thread, [ticket] = pause(client, outbox, [("call_1", EMAIL)])
    assert ticket.verdicts == ("approve", "reject", "edit") and outbox.sent == []
    page = page_as(desk, "alice", f"/approvals/{ticket.approval_id}/")
    assert 'id="edit-link"' in page and 'id="no-edit"' not in page  # a wrapped tool can edit
    desk.decide(ticket.approval_id, "approve")

    result, model = resume(client, outbox, thread)

    assert (result.status, result.final_output) == ("finished", "Done.")
    assert outbox.sent == [EMAIL]
    assert tool_outputs(model) == {"call_1": "sent to ann@example.org"}
    assert run_status(desk, ticket.run_id) == "succeeded"
    assert ledger(desk, ticket.run_id) == [("call_1", "confirmed")]
    _, approval = desk.api("GET", f"/api/v1/approvals/{ticket.approval_id}")
    assert approval["decision"]["consumed_at"]
    again, _ = resume(client, outbox, thread)
    assert again.status == "finished" and outbox.sent == [EMAIL]


def test_edit_runs_the_reviewers_arguments_through_the_wrapper(desk, client):
    outbox = Outbox()
    thread, [ticket] = pause(client, outbox, [("call_1", EMAIL)])
    desk.decide(ticket.approval_id, "edit", arguments=EDITED)

    result, model = resume(client, outbox, thread)

    assert result.status == "finished"
    assert outbox.sent == [EDITED]
    told = tool_outputs(model)["call_1"]
    assert told == oa.EDIT_NOTICE.format(arguments=json.dumps(EDITED)) + "sent to ann@example.org"
    assert ledger(desk, ticket.run_id) == [("call_1", "confirmed")]


def test_reject_sends_the_reviewers_reason_to_the_model(desk, client):
    outbox = Outbox()
    thread, [ticket] = pause(client, outbox, [("call_1", EMAIL)])
    desk.decide(ticket.approval_id, "reject", reason="Ann asked not to be emailed.")

    result, model = resume(client, outbox, thread)

    assert result.status == "finished" and outbox.sent == []
    assert tool_outputs(model) == {
        "call_1": "A Review Desk reviewer rejected this call: Ann asked not to be emailed."
    }
    _, approval = desk.api("GET", f"/api/v1/approvals/{ticket.approval_id}")
    assert approval["decision"]["consumed_at"]  # spent once the resumed state was stored
    assert ledger(desk, ticket.run_id) == []  # a reject opens no ledger row


def test_one_of_two_decided_runs_that_one_and_the_other_waits_without_a_model_call(desk, client):
    outbox = Outbox()
    thread, [first, second] = pause(client, outbox, [("call_1", EMAIL), ("call_2", OTHER)])
    desk.decide(first.approval_id, "approve")

    result, model = resume(client, outbox, thread)

    assert result.status == "paused" and [t.approval_id for t in result.tickets] == [second.approval_id]
    assert outbox.sent == [EMAIL] and model.calls == ()
    desk.decide(second.approval_id, "reject", reason="Not today.")
    result, model = resume(client, outbox, thread)
    assert result.status == "finished" and outbox.sent == [EMAIL] and len(model.calls) == 1


APP = """
import asyncio, json, os, sys

from agents import Agent, function_tool, set_tracing_disabled
from agents.exceptions import ModelBehaviorError
from agents.testing import ScriptedModel, assistant_message, function_call

from reviewdesk_client import DeskClient, SQLiteStore
from reviewdesk_client.adapters.openai_agents import DeskGate, resumer_handler

set_tracing_disabled(True)
EMAIL = __EMAIL__


@function_tool
def send_email(to: str, body: str) -> str:
    \"\"\"Send an email.\"\"\"
    with open(os.environ["OA_APP_SENT"], "a") as sent:
        sent.write(json.dumps({"to": to, "body": body}) + "\\n")
    return f"sent to {to}"


def mailer(gate, steps):
    return Agent(name="mailer", model=ScriptedModel(steps), tools=[gate.gated(send_email)])


handler = resumer_handler(lambda gate: mailer(gate, [[assistant_message("Done.")]]))

if __name__ == "__main__":
    store, thread = sys.argv[1:]
    gate = DeskGate(DeskClient(store=SQLiteStore(store)))
    steps = [[function_call("send_email", EMAIL, call_id="call_1")]]
    assert asyncio.run(gate.run(mailer(gate, steps), thread, "Tell Ann")).status == "paused"
""".replace("__EMAIL__", repr(EMAIL))


def test_paused_process_exits_and_the_resumer_picks_the_decision_up(desk, tmp_path):
    (tmp_path / "oa_app.py").write_text(APP)
    store_path, sent_path = tmp_path / "store.sqlite3", tmp_path / "sent.jsonl"
    thread = f"t-{uuid.uuid4()}"
    env = {
        **os.environ,
        "REVIEWDESK_URL": desk.url,
        "REVIEWDESK_TOKEN": desk.tokens["svc"],
        "REVIEWDESK_KEYS": json.dumps(desk.keys),
        "OA_APP_SENT": str(sent_path),
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(tmp_path)]),
    }

    def python(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    python("oa_app.py", str(store_path), thread)  # pauses, submits, exits
    with desk.client(store=SQLiteStore(store_path)) as client:
        [ticket] = client.store.tickets(oa.external_id_for(thread))
    assert not sent_path.exists()
    desk.decide(ticket.approval_id, "approve")

    resumer = python(
        "-m",
        "reviewdesk_client.resumer",
        "--desk",
        desk.url,
        "--store",
        str(store_path),
        "--handler",
        "oa_app:handler",
        "--once",
    )

    assert "handled 1 decision" in resumer.stderr, resumer.stderr[-3000:]
    assert [json.loads(line) for line in sent_path.read_text().splitlines()] == [EMAIL]
    assert run_status(desk, ticket.run_id) == "succeeded"
    again = python(
        "-m",
        "reviewdesk_client.resumer",
        "--desk",
        desk.url,
        "--store",
        str(store_path),
        "--handler",
        "oa_app:handler",
        "--once",
    )
    assert "handled 0 decision" in again.stderr and len(sent_path.read_text().splitlines()) == 1


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
    thread, [ticket] = pause(client, outbox, [("call_1", EMAIL)])
    desk.decide(ticket.approval_id, "reject", reason="No.")
    rejected = client.outcome(ticket)
    forged = forge(rejected.decision, verdict="approve")

    result, _ = resume(client, outbox, thread, outcomes={"call_1": Outcome("approved", forged)})

    assert result.status == "paused" and outbox.sent == []
    assert result.refused["call_1"].startswith("signature")
    # the genuine decision still applies afterwards
    result, model = resume(client, outbox, thread)
    assert outbox.sent == [] and tool_outputs(model)["call_1"].endswith("No.")


def test_replayed_decision_is_refused_here_and_by_the_desk(desk, client, tmp_path):
    outbox = Outbox()
    thread, tickets = pause(client, outbox, [("call_1", EMAIL), ("call_2", OTHER)])
    external_id = oa.external_id_for(thread)
    paused_state = client.store.get_state(external_id)
    desk.decide(tickets[0].approval_id, "approve")
    outcome = client.outcome(tickets[0])
    result, _ = resume(client, outbox, thread)
    assert result.status == "paused" and outbox.sent == [EMAIL]  # call_2 still waits: the run goes on

    # the same process, its state rolled back to the pause: the nonce is spent here
    client.store.put_state(external_id, paused_state)
    result, _ = resume(client, outbox, thread, outcomes={"call_1": outcome})
    assert result.refused["call_1"].startswith("replayed") and outbox.sent == [EMAIL]

    # another replica with the paused state and the tickets: the desk's consume refuses it
    with desk.client(store=SQLiteStore(tmp_path / "replica.sqlite3")) as replica:
        replica.store.put_tickets(tickets)
        replica.store.put_state(external_id, paused_state)
        result, _ = resume(replica, outbox, thread, outcomes={"call_1": outcome})
    assert outbox.sent == [EMAIL] and result.status == "paused"
    [told] = [i.output for i in result.result.new_items if i.type == "tool_call_output_item"]
    assert told.startswith(oa.REFUSED.format(why="the decision cannot be used (409 consumed")), told


def test_decision_for_another_run_with_the_same_call_id_is_refused(desk, client):
    outbox = Outbox()
    _, [ticket_a] = pause(client, outbox, [("call_1", EMAIL)])
    thread_b, [ticket_b] = pause(client, outbox, [("call_1", EMAIL)])
    assert ticket_a.run_id != ticket_b.run_id
    desk.decide(ticket_a.approval_id, "approve")

    result, _ = resume(client, outbox, thread_b, outcomes={"call_1": client.outcome(ticket_a)})

    assert result.status == "paused" and outbox.sent == []
    assert result.refused["call_1"].startswith("binding")


def test_decision_signed_by_an_unpinned_key_is_refused(desk, client):
    outbox = Outbox()
    thread, [ticket] = pause(client, outbox, [("call_1", EMAIL)])
    desk.decide(ticket.approval_id, "approve")
    some_other_key = base64.b64encode(os.urandom(32)).decode()
    with desk.client(store=client.store, keys=KeyRing({"ed25519:someone-else": some_other_key})) as other:
        result, _ = resume(other, outbox, thread)
    assert result.refused["call_1"].startswith("unpinned_key") and outbox.sent == []


def test_tampered_run_state_is_refused(desk, client):
    outbox = Outbox()
    thread, [ticket] = pause(client, outbox, [("call_1", EMAIL)])
    external_id = oa.external_id_for(thread)
    state = client.store.get_state(external_id)
    assert "ann@example.org" in state
    client.store.put_state(external_id, state.replace("ann@example.org", "eve@example.org"))
    desk.decide(ticket.approval_id, "approve")

    result, _ = resume(client, outbox, thread)

    assert result.refused["call_1"].startswith("arguments_changed") and outbox.sent == []


def test_arguments_changed_only_where_the_sdk_runs_them_fail_closed(desk, client):
    """The RunState holds a call's arguments in several places; changing only the copy the SDK
    executes (not the interruption's, which the decision is verified against) is caught by the
    SDK's own call fingerprint before the wrapper is reached: the run fails, nothing is sent."""
    outbox = Outbox()
    thread, [ticket] = pause(client, outbox, [("call_1", EMAIL)])
    external_id = oa.external_id_for(thread)
    state = json.loads(client.store.get_state(external_id))
    [planned] = state["last_processed_response"]["functions"]
    planned["tool_call"]["arguments"] = json.dumps({**EMAIL, "to": "eve@example.org"})
    client.store.put_state(external_id, json.dumps(state))
    desk.decide(ticket.approval_id, "approve")

    with pytest.raises(ModelBehaviorError):
        resume(client, outbox, thread)

    assert outbox.sent == []


def test_a_call_approved_only_inside_the_stored_state_is_refused_by_the_wrapper(desk, client):
    outbox = Outbox()
    thread, [first, _second] = pause(client, outbox, [("call_1", EMAIL), ("call_2", OTHER)])
    external_id = oa.external_id_for(thread)

    async def approve_call_2_without_the_desk():
        gate = DeskGate(client)
        state = await RunState.from_string(
            mailer(gate, outbox, ScriptedModel()), client.store.get_state(external_id)
        )
        state.approve(next(i for i in state.get_interruptions() if i.call_id == "call_2"))
        client.store.put_state(external_id, state.to_string())

    asyncio.run(approve_call_2_without_the_desk())
    desk.decide(first.approval_id, "approve")

    _, model = resume(client, outbox, thread)

    assert outbox.sent == [EMAIL]
    assert tool_outputs(model)["call_2"] == oa.REFUSED.format(
        why="no verified reviewer decision for this call"
    )


def test_a_decision_verified_for_another_call_is_refused_by_the_wrapper(desk, client):
    """Run A's verified decision for call_1 left under run B's call_1, which B's stored state
    approves by itself: the wrapper sees the decision is not for B's call."""
    outbox = Outbox()
    _, [ticket_a] = pause(client, outbox, [("call_1", EMAIL)])
    desk.decide(ticket_a.approval_id, "approve")
    verified_a = client.verify(client.outcome(ticket_a).decision, ticket_a, current_arguments=EMAIL)
    thread_b, [_, ticket_b2] = pause(client, outbox, [("call_1", EMAIL), ("call_2", OTHER)])
    external_b = oa.external_id_for(thread_b)

    async def approve_call_1_without_the_desk():
        state = await RunState.from_string(
            mailer(DeskGate(client), outbox, ScriptedModel()), client.store.get_state(external_b)
        )
        state.approve(next(i for i in state.get_interruptions() if i.call_id == "call_1"))
        client.store.put_state(external_b, state.to_string())

    asyncio.run(approve_call_1_without_the_desk())
    client.store.put_verified(oa.verified_key(external_b, "call_1"), verified_a)
    desk.decide(ticket_b2.approval_id, "approve")

    _, model = resume(client, outbox, thread_b)

    assert outbox.sent == [OTHER]
    assert tool_outputs(model)["call_1"] == oa.REFUSED.format(why="the decision is not for this call")


def test_cancelled_run_becomes_a_rejection_the_model_reads(desk, client):
    outbox = Outbox()
    thread, [ticket] = pause(client, outbox, [("call_1", EMAIL)])
    client.cancel_run(ticket.run_id)

    result, model = resume(client, outbox, thread)

    assert result.status == "finished" and outbox.sent == []
    assert tool_outputs(model) == {"call_1": oa.LAPSED.format(status="cancelled")}


def test_expired_approval_becomes_a_rejection_the_model_reads(desk, client):
    outbox = Outbox()
    thread, [ticket] = pause(client, outbox, [("call_1", EMAIL)], approval_ttl_seconds=10)

    # the desk's beat sweeps every second (conftest.py) and expires it
    wait_until(lambda: client.outcome(ticket) is not None, timeout=60, what="the expiry", interval=0.5)
    result, model = resume(client, outbox, thread)

    assert result.status == "finished" and outbox.sent == []
    assert tool_outputs(model) == {"call_1": oa.LAPSED.format(status="expired")}


def test_a_call_a_standing_grant_covers_runs_at_once_without_pausing(desk, client):
    outbox = Outbox()
    thread, [ticket] = pause(client, outbox, [("call_1", GRANTED)])
    desk.decide(ticket.approval_id, "approve", grant={"match": "exact", "scope": "agent", "max_uses": 1})
    resume(client, outbox, thread)
    assert outbox.sent == [GRANTED]

    gate = DeskGate(client)
    model = ScriptedModel(
        [[function_call("send_email", GRANTED, call_id="call_1")], [assistant_message("Sent again.")]]
    )
    result = asyncio.run(gate.run(mailer(gate, outbox, model), f"t-{uuid.uuid4()}", PROMPT))

    assert (result.status, result.final_output) == ("finished", "Sent again.")
    assert outbox.sent == [GRANTED, GRANTED]


def test_hosted_tool_is_offered_without_edit_and_the_desk_refuses_one(desk, client):
    gate = DeskGate(client)
    hosted = HostedMCPTool(
        tool_config={
            "type": "mcp",
            "server_label": "billing",
            "server_url": "https://mcp.example.org/",
            "require_approval": "always",
        }
    )
    request = McpApprovalRequest(
        id="mcpr_1",
        type="mcp_approval_request",
        server_label="billing",
        name="refund",
        arguments='{"order_id": "1234"}',
    )
    thread = f"t-{uuid.uuid4()}"
    model = ScriptedModel([[request]])
    paused = asyncio.run(gate.run(Agent(name="billing", model=model, tools=[hosted]), thread, PROMPT))
    [ticket] = paused.tickets
    assert ticket.verdicts == ("approve", "reject")
    _, approval = desk.api("GET", f"/api/v1/approvals/{ticket.approval_id}", as_="alice")
    assert "edit" not in approval["verdicts"]

    page = page_as(desk, "alice", f"/approvals/{ticket.approval_id}/")
    assert 'id="no-edit"' in page and "openai-agents cannot edit this call" in page
    assert 'id="edit-link"' not in page and 'id="edit-form"' not in page
    status, problem = desk.try_decide(ticket.approval_id, "edit", arguments={"order_id": "9999"})
    assert status == 422 and problem["code"] == "verdict", problem

    desk.decide(ticket.approval_id, "reject", reason="Refunds go through finance.")
    model = ScriptedModel([[assistant_message("ok")]])
    resumed = asyncio.run(DeskGate(client).resume(Agent(name="billing", model=model, tools=[hosted]), thread))
    assert resumed.status == "finished"
    [response] = [i for i in model.last_call.input if i.get("type") == "mcp_approval_response"]
    assert response["approve"] is False
    assert response["reason"] == "A Review Desk reviewer rejected this call: Refunds go through finance."
