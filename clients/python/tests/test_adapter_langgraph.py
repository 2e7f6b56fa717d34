"""The LangGraph adapter against a real desk: LangChain's `create_agent` with a scripted chat
model, `HumanInTheLoopMiddleware` per call and a SQLite checkpointer on a file; every reviewer
decision goes through the desk's API. The tool writes one line per run to a file, so "ran once"
is counted where it happened, in this process or another.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("langchain")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from reviewdesk_client import DeskClient, KeyRing, SQLiteStore
from reviewdesk_client.adapters.langgraph import (
    LangGraphDesk,
    UnsupportedInterrupt,
    external_id_for,
    resumer_handler,
    verified_key,
)

HERE = Path(__file__).resolve().parent
CLIENT_ROOT = HERE.parent
EDIT_NOTICE_START = "Note: a human reviewer replaced this tool call"


class ScriptedChat(GenericFakeChatModel):
    """LangChain's fake chat model; `create_agent` binds tools, which the fake ignores."""

    def bind_tools(self, tools, **kwargs):
        return self


def scripted(*messages: AIMessage) -> ScriptedChat:
    return ScriptedChat(messages=iter(messages))


def refund_calls(*calls: tuple[str, dict]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "refund", "args": a, "id": i} for i, a in calls])


DONE = AIMessage(content="All done.")


def make_refund_tool(log_path: Path):
    @tool
    def refund(order_id: str, amount: int) -> str:
        """Refund an order."""
        with log_path.open("a") as f:
            f.write(json.dumps({"order_id": order_id, "amount": amount}) + "\n")
        return f"refunded {amount} on {order_id}"

    return refund


def runs_of(log_path: Path) -> list[dict]:
    return [json.loads(line) for line in log_path.read_text().splitlines()] if log_path.exists() else []


def build(desk: DeskClient, graph_db: Path, tool_log: Path, model, *, interrupt_on=None, agent="support-bot"):
    refund = make_refund_tool(tool_log)
    gate = LangGraphDesk(
        desk,
        interrupt_on=interrupt_on or {"refund": ["approve", "edit", "reject"]},
        tools=[refund],
        agent=agent,
    )
    saver = SqliteSaver(sqlite3.connect(str(graph_db), check_same_thread=False))
    return gate, gate.create_agent(model, checkpointer=saver)


def ask(text: str = "Refund order 1 please.") -> dict:
    return {"messages": [{"role": "user", "content": text}]}


class Thread:
    """One test's thread files, a desk client over a SQLite store (as across restarts) and the
    running desk (the session's `desk` fixture) for reviewer decisions and reads."""

    def __init__(self, tmp_path: Path, desk) -> None:
        self.graph_db = tmp_path / "graph.sqlite"
        self.store_path = tmp_path / "desk.sqlite"
        self.tool_log = tmp_path / "tool.jsonl"
        self.running = desk
        # The desk outlives a test session when it runs on DATABASE_URL: thread ids are fresh.
        self.suffix = uuid.uuid4().hex[:8]

    def t(self, name: str) -> str:
        return f"t-{name}-{self.suffix}"

    def client(self, *, keys: KeyRing | None = None, store=None) -> DeskClient:
        return self.running.client(store=store or SQLiteStore(str(self.store_path)), keys=keys)

    def build(self, desk: DeskClient, *messages: AIMessage, **kw):
        return build(desk, self.graph_db, self.tool_log, scripted(*messages), **kw)

    def decide(self, desk: DeskClient, thread_id: str, call_id: str, verdict: str, **fields) -> dict:
        """alice decides through the desk's API; the decision as the client is served it."""
        ticket = desk.store.ticket(external_id_for(thread_id), call_id)
        self.running.decide(ticket.approval_id, verdict, **fields)
        return desk.approval(ticket)["decision"]

    def run(self, run_id: str) -> dict:
        status, body = self.running.api("GET", f"/api/v1/runs/{run_id}")
        assert status == 200, body
        return body

    def client_env(self) -> dict[str, str]:
        return {
            "REVIEWDESK_URL": self.running.url,
            "REVIEWDESK_TOKEN": self.running.tokens["svc"],
            "REVIEWDESK_KEYS": json.dumps(self.running.keys),
        }


@pytest.fixture
def lg(tmp_path, desk) -> Thread:
    return Thread(tmp_path, desk)


def tool_messages(output) -> list[ToolMessage]:
    return [m for m in output.value["messages"] if isinstance(m, ToolMessage)]


def test_approve_runs_the_call_once_and_the_desk_run_succeeds(lg):
    desk = lg.client()
    gate, graph = lg.build(desk, refund_calls(("call_1", {"order_id": "1", "amount": 5})), DONE)
    out = gate.invoke(graph, ask(), thread_id=lg.t("approve"))
    assert [i.value["tool_call_id"] for i in out.interrupts] == ["call_1"]
    assert runs_of(lg.tool_log) == []

    lg.decide(desk, lg.t("approve"), "call_1", "approve")
    result = gate.resume(graph, lg.t("approve"))

    assert result.answered == {"call_1": "approve"}
    assert runs_of(lg.tool_log) == [{"order_id": "1", "amount": 5}]
    (message,) = tool_messages(result.output)
    assert message.status == "success" and message.content == "refunded 5 on 1"
    ticket = desk.store.ticket(external_id_for(lg.t("approve")), "call_1")
    assert desk.approval(ticket)["decision"]["consumed_at"]
    run = lg.run(ticket.run_id)
    assert run["status"] == "succeeded"
    assert [(e["tool_call_id"], e["status"]) for e in run["side_effects"]] == [("call_1", "confirmed")]


def test_edit_runs_the_edited_arguments_once_with_langchains_notice(lg):
    desk = lg.client()
    gate, graph = lg.build(desk, refund_calls(("call_1", {"order_id": "1", "amount": 500})), DONE)
    gate.invoke(graph, ask(), thread_id=lg.t("edit"))

    lg.decide(desk, lg.t("edit"), "call_1", "edit", arguments={"order_id": "1", "amount": 50})
    result = gate.resume(graph, lg.t("edit"))

    assert result.answered == {"call_1": "edit"}
    assert runs_of(lg.tool_log) == [{"order_id": "1", "amount": 50}]
    (message,) = tool_messages(result.output)
    assert message.content.startswith(EDIT_NOTICE_START)
    assert message.content.endswith("refunded 50 on 1")


def test_reject_gives_the_model_an_error_tool_message_with_the_reason(lg):
    desk = lg.client()
    gate, graph = lg.build(desk, refund_calls(("call_1", {"order_id": "1", "amount": 5})), DONE)
    gate.invoke(graph, ask(), thread_id=lg.t("reject"))

    lg.decide(desk, lg.t("reject"), "call_1", "reject", reason="Order 1 was never paid.")
    result = gate.resume(graph, lg.t("reject"))

    assert result.answered == {"call_1": "reject"}
    assert runs_of(lg.tool_log) == []
    (message,) = tool_messages(result.output)
    assert message.status == "error"
    assert message.content == "User rejected the tool call for `refund` with reason: Order 1 was never paid."
    ticket = desk.store.ticket(external_id_for(lg.t("reject")), "call_1")
    assert desk.approval(ticket)["decision"]["consumed_at"]  # spent, so no resumer picks it up again


def test_a_call_a_standing_grant_covers_runs_without_a_pause(lg):
    desk = lg.client()
    agent = f"granted-{lg.suffix}"  # the grant is for this agent only: no other test's call
    interrupt_on = {"refund": ["approve", "edit", "reject"]}
    same = ("call_1", {"order_id": "1", "amount": 5})
    first, graph = build(
        desk,
        lg.graph_db,
        lg.tool_log,
        scripted(refund_calls(same), DONE),
        interrupt_on=interrupt_on,
        agent=agent,
    )
    first.invoke(graph, ask(), thread_id=lg.t("grant-1"))
    lg.decide(
        desk, lg.t("grant-1"), "call_1", "approve", grant={"match": "exact", "scope": "agent", "max_uses": 2}
    )
    first.resume(graph, lg.t("grant-1"))

    second, graph = build(
        desk,
        lg.graph_db,
        lg.tool_log,
        scripted(refund_calls(same), DONE),
        interrupt_on=interrupt_on,
        agent=agent,
    )
    out = second.invoke(graph, ask(), thread_id=lg.t("grant-2"))

    assert out.interrupts == ()
    assert runs_of(lg.tool_log) == [same[1], same[1]]
    ticket = desk.store.ticket(external_id_for(lg.t("grant-2")), "call_1")
    assert ticket.status == "approved"  # at submit, by the grant
    assert lg.run(ticket.run_id)["status"] == "succeeded"


def test_a_per_call_resume_leaves_the_sibling_paused_under_the_same_interrupt_id(lg):
    desk = lg.client()
    calls = refund_calls(
        ("call_1", {"order_id": "1", "amount": 5}), ("call_2", {"order_id": "2", "amount": 7})
    )
    gate, graph = lg.build(desk, calls, DONE)
    out = gate.invoke(graph, ask(), thread_id=lg.t("partial"))
    ids = {i.value["tool_call_id"]: i.id for i in out.interrupts}
    assert set(ids) == {"call_1", "call_2"}
    assert len(desk.store.tickets(external_id_for(lg.t("partial")))) == 2  # one submit, both calls

    lg.decide(desk, lg.t("partial"), "call_1", "approve")
    first = gate.resume(graph, lg.t("partial"))

    assert first.answered == {"call_1": "approve"} and first.pending == ["call_2"]
    assert runs_of(lg.tool_log) == [{"order_id": "1", "amount": 5}]
    still = graph.get_state({"configurable": {"thread_id": lg.t("partial")}}).interrupts
    assert [(i.id, i.value["tool_call_id"]) for i in still] == [(ids["call_2"], "call_2")]

    lg.decide(desk, lg.t("partial"), "call_2", "approve")
    second = gate.resume(graph, lg.t("partial"))
    assert second.answered == {"call_2": "approve"}
    assert runs_of(lg.tool_log) == [{"order_id": "1", "amount": 5}, {"order_id": "2", "amount": 7}]


def test_a_stale_decision_for_an_answered_interrupt_is_harmless(lg):
    desk = lg.client()
    calls = refund_calls(
        ("call_1", {"order_id": "1", "amount": 5}), ("call_2", {"order_id": "2", "amount": 7})
    )
    gate, graph = lg.build(desk, calls, DONE)
    out = gate.invoke(graph, ask(), thread_id=lg.t("stale"))
    first_id = next(i.id for i in out.interrupts if i.value["tool_call_id"] == "call_1")
    decision = lg.decide(desk, lg.t("stale"), "call_1", "approve")
    gate.resume(graph, lg.t("stale"))
    assert len(runs_of(lg.tool_log)) == 1

    # The same decision delivered again: the adapter answers only interrupts still pending.
    again = gate.resume(graph, lg.t("stale"), decisions={"call_1": decision})
    assert again.answered == {} and again.output is None
    # And by hand, the answered interrupt's id again: LangGraph ignores it, the sibling stays.
    cfg = {"configurable": {"thread_id": lg.t("stale")}}
    graph.invoke(Command(resume={first_id: {"type": "approve"}}), cfg, version="v2")
    assert runs_of(lg.tool_log) == [{"order_id": "1", "amount": 5}]
    assert [i.value["tool_call_id"] for i in graph.get_state(cfg).interrupts] == ["call_2"]


def test_a_when_predicate_that_flips_on_resume_cannot_run_a_rejected_call(lg):
    desk = lg.client()
    review = {"on": True}
    config = {"refund": {"allowed_decisions": ["approve", "reject"], "when": lambda request: review["on"]}}
    gate, graph = lg.build(
        desk, refund_calls(("call_1", {"order_id": "1", "amount": 5})), DONE, interrupt_on=config
    )
    gate.invoke(graph, ask(), thread_id=lg.t("when"))
    lg.decide(desk, lg.t("when"), "call_1", "reject", reason="No refunds today.")

    review["on"] = False  # LangChain now skips the reviewer's answer and calls the tool
    result = gate.resume(graph, lg.t("when"))

    assert runs_of(lg.tool_log) == []
    (message,) = tool_messages(result.output)
    assert message.status == "error"
    assert "Refused by Review Desk" in message.content and "No refunds today." in message.content


def test_a_when_predicate_that_says_no_review_lets_the_call_run_without_the_desk(lg):
    desk = lg.client()
    thread = lg.t("when-no")
    config = {"refund": {"allowed_decisions": ["approve", "reject"], "when": lambda request: False}}
    gate, graph = lg.build(
        desk, refund_calls(("call_1", {"order_id": "1", "amount": 5})), DONE, interrupt_on=config
    )

    out = gate.invoke(graph, ask(), thread_id=thread)

    assert out.interrupts == () and desk.store.tickets(external_id_for(thread)) == []
    assert runs_of(lg.tool_log) == [{"order_id": "1", "amount": 5}]


def test_a_gated_call_that_never_reached_the_desk_is_refused_by_the_guard(lg):
    from langchain.agents import create_agent

    desk = lg.client()
    gate = LangGraphDesk(
        desk, interrupt_on={"refund": ["approve", "reject"]}, tools=[make_refund_tool(lg.tool_log)]
    )
    _hitl, guard = gate.middleware()
    # A middleware list without HITL in front of the guard: nothing asks, the guard still refuses.
    graph = create_agent(
        scripted(refund_calls(("call_1", {"order_id": "1", "amount": 5})), DONE),
        tools=gate.tools,
        checkpointer=SqliteSaver(sqlite3.connect(str(lg.graph_db), check_same_thread=False)),
        middleware=[guard],
    )

    out = gate.invoke(graph, ask(), thread_id=lg.t("no-hitl"))

    assert runs_of(lg.tool_log) == []
    (message,) = tool_messages(out)
    assert message.status == "error" and "no verified Review Desk decision" in message.content


def test_a_hand_made_approve_without_a_desk_decision_is_refused_by_the_guard(lg):
    desk = lg.client()
    gate, graph = lg.build(desk, refund_calls(("call_1", {"order_id": "1", "amount": 5})), DONE)
    out = gate.invoke(graph, ask(), thread_id=lg.t("bypass"))
    cfg = {"configurable": {"thread_id": lg.t("bypass")}}

    after = graph.invoke(Command(resume={out.interrupts[0].id: {"type": "approve"}}), cfg, version="v2")

    assert runs_of(lg.tool_log) == []
    (message,) = tool_messages(after)
    assert message.status == "error" and "no verified Review Desk decision" in message.content


def test_arguments_changed_between_verification_and_the_tool_are_refused_by_the_guard(lg):
    desk = lg.client()
    thread = lg.t("swap")
    gate, graph = lg.build(desk, refund_calls(("call_1", {"order_id": "1", "amount": 5})), DONE)
    out = gate.invoke(graph, ask(), thread_id=thread)
    decision = lg.decide(desk, thread, "call_1", "approve")
    # What `resume` does, then a resume that answers with other arguments than those verified.
    ticket = desk.store.ticket(external_id_for(thread), "call_1")
    verified = desk.verify(decision, ticket, current_arguments={"order_id": "1", "amount": 5})
    desk.store.put_verified(verified_key(thread, "call_1"), verified)
    swapped = {"type": "edit", "edited_action": {"name": "refund", "args": {"order_id": "1", "amount": 5000}}}
    after = graph.invoke(
        Command(resume={out.interrupts[0].id: swapped}), {"configurable": {"thread_id": thread}}, version="v2"
    )

    assert runs_of(lg.tool_log) == []
    (message,) = tool_messages(after)
    assert message.status == "error" and "arguments_changed" in message.content
    assert desk.approval(ticket)["decision"]["consumed_at"] is None  # refused before the consume


def test_a_verified_decision_filed_under_another_call_is_refused_by_the_guard(lg):
    desk = lg.client()
    thread = lg.t("misfiled")
    same_args = {"order_id": "1", "amount": 5}
    gate, graph = lg.build(desk, refund_calls(("call_1", same_args), ("call_2", same_args)), DONE)
    out = gate.invoke(graph, ask(), thread_id=thread)
    decision = lg.decide(desk, thread, "call_1", "approve")
    ticket = desk.store.ticket(external_id_for(thread), "call_1")
    verified = desk.verify(decision, ticket, current_arguments=same_args)
    desk.store.put_verified(verified_key(thread, "call_2"), verified)  # call_1's decision, call_2's slot
    call_2 = next(i.id for i in out.interrupts if i.value["tool_call_id"] == "call_2")
    after = graph.invoke(
        Command(resume={call_2: {"type": "approve"}}), {"configurable": {"thread_id": thread}}, version="v2"
    )

    assert runs_of(lg.tool_log) == []
    (message,) = [m for m in tool_messages(after) if m.tool_call_id == "call_2"]
    assert message.status == "error" and "for another call" in message.content


def test_a_forged_decision_is_refused_before_the_tool_runs(lg):
    desk = lg.client()
    gate, graph = lg.build(desk, refund_calls(("call_1", {"order_id": "1", "amount": 5})), DONE)
    gate.invoke(graph, ask(), thread_id=lg.t("forged"))
    decision = lg.decide(desk, lg.t("forged"), "call_1", "edit", arguments={"order_id": "1", "amount": 4})

    forged = {**decision, "arguments": {"order_id": "1", "amount": 5000}}
    result = gate.resume(graph, lg.t("forged"), decisions={"call_1": forged})

    assert "binding:arguments_sha256" in result.refused["call_1"]
    assert result.output is None and runs_of(lg.tool_log) == []
    # The genuine decision still works afterwards: the refusal spent nothing.
    assert gate.resume(graph, lg.t("forged")).answered == {"call_1": "edit"}
    assert runs_of(lg.tool_log) == [{"order_id": "1", "amount": 4}]


def test_a_decision_for_another_thread_with_the_same_call_id_is_refused(lg):
    desk = lg.client()
    same = refund_calls(("call_1", {"order_id": "1", "amount": 5}))
    gate_a, graph_a = lg.build(desk, same, DONE)
    gate_a.invoke(graph_a, ask(), thread_id=lg.t("a"))
    gate_b, graph_b = lg.build(desk, refund_calls(("call_1", {"order_id": "1", "amount": 5})), DONE)
    gate_b.invoke(graph_b, ask(), thread_id=lg.t("b"))
    decision_for_a = lg.decide(desk, lg.t("a"), "call_1", "approve")

    result = gate_b.resume(graph_b, lg.t("b"), decisions={"call_1": decision_for_a})

    assert result.refused["call_1"].startswith("verification failed: binding:")
    assert runs_of(lg.tool_log) == []


def test_a_decision_signed_by_an_unpinned_key_is_refused(lg):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    desk = lg.client()
    gate, graph = lg.build(desk, refund_calls(("call_1", {"order_id": "1", "amount": 5})), DONE)
    gate.invoke(graph, ask(), thread_id=lg.t("unpinned"))
    lg.decide(desk, lg.t("unpinned"), "call_1", "approve")

    # Another process of the agent that pinned some other key under the desk's key id.
    import base64

    other = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    wrong = KeyRing({kid: base64.b64encode(other).decode() for kid in desk.keys.key_ids()})
    stranger = lg.client(keys=wrong)
    gate2, graph2 = lg.build(stranger, DONE)
    result = gate2.resume(graph2, lg.t("unpinned"))
    assert result.refused["call_1"].startswith("verification failed: signature")
    none_pinned = lg.client(keys=KeyRing({}))
    gate3, graph3 = lg.build(none_pinned, DONE)
    assert "unpinned_key" in gate3.resume(graph3, lg.t("unpinned")).refused["call_1"]
    assert runs_of(lg.tool_log) == []


def test_a_replayed_decision_is_refused_by_this_store_and_by_the_desk(lg, tmp_path):
    desk = lg.client()
    thread = lg.t("replay")
    # call_2 stays undecided, so the desk's run is still open when call_1's decision is replayed.
    calls = refund_calls(
        ("call_1", {"order_id": "1", "amount": 5}), ("call_2", {"order_id": "2", "amount": 7})
    )
    gate, graph = lg.build(desk, calls, DONE)
    gate.invoke(graph, ask(), thread_id=thread)
    # A second replica holds a copy of the paused thread (its own checkpointer file).
    replica_db = tmp_path / "replica-graph.sqlite"
    with sqlite3.connect(str(lg.graph_db)) as source, sqlite3.connect(str(replica_db)) as copy:
        source.backup(copy)
    decision = lg.decide(desk, thread, "call_1", "approve")
    gate.resume(graph, thread)
    assert len(runs_of(lg.tool_log)) == 1

    # The replica with this store, which remembers the nonce: refused at verification.
    _, graph_r = build(desk, replica_db, lg.tool_log, scripted(DONE))
    again = gate.resume(graph_r, thread, decisions={"call_1": decision})
    assert again.refused["call_1"] == "verification failed: replayed: this decision was consumed here before"
    assert again.output is None
    # The replica with a store of its own (the tickets, not the nonces): it verifies, and the
    # desk's single-use compare-and-set refuses it in the guard.
    replica_store = SQLiteStore(str(tmp_path / "replica-store.sqlite"))
    replica_store.put_tickets(desk.store.tickets(external_id_for(thread)))
    gate_r, graph_r = build(lg.client(store=replica_store), replica_db, lg.tool_log, scripted(DONE))
    out = gate_r.resume(graph_r, thread, decisions={"call_1": decision})
    assert out.answered == {"call_1": "approve"}
    (message,) = [m for m in tool_messages(out.output) if m.tool_call_id == "call_1"]
    assert message.status == "error" and "409 consumed" in message.content
    assert len(runs_of(lg.tool_log)) == 1


def test_an_async_graph_pauses_and_resumes_through_the_async_guard(lg):
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    desk = lg.client()
    edited = {"order_id": "1", "amount": 2}

    async def pause_then_resume():
        async with AsyncSqliteSaver.from_conn_string(str(lg.graph_db)) as saver:
            gate = LangGraphDesk(
                desk,
                interrupt_on={"refund": ["approve", "edit", "reject"]},
                tools=[make_refund_tool(lg.tool_log)],
            )
            graph = gate.create_agent(
                scripted(refund_calls(("call_1", {"order_id": "1", "amount": 5})), DONE), checkpointer=saver
            )
            out = await gate.ainvoke(graph, ask(), thread_id=lg.t("async"))
            assert [i.value["tool_call_id"] for i in out.interrupts] == ["call_1"]
            await asyncio.to_thread(lg.decide, desk, lg.t("async"), "call_1", "edit", arguments=edited)
            return await gate.aresume(graph, lg.t("async"))

    result = asyncio.run(pause_then_resume())
    assert result.answered == {"call_1": "edit"}
    assert runs_of(lg.tool_log) == [edited]
    ticket = desk.store.ticket(external_id_for(lg.t("async")), "call_1")
    assert [e["status"] for e in lg.run(ticket.run_id)["side_effects"]] == ["confirmed"]


def test_batched_hitl_is_refused_and_nothing_is_submitted(lg):
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    desk = lg.client()
    gate = LangGraphDesk(desk, interrupt_on={"refund": ["approve", "reject"]}, tools=[], agent="support-bot")
    graph = create_agent(
        scripted(refund_calls(("call_1", {"order_id": "1", "amount": 5}))),
        tools=[make_refund_tool(lg.tool_log)],
        checkpointer=SqliteSaver(sqlite3.connect(str(lg.graph_db), check_same_thread=False)),
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"refund": True})],  # batched, the default
    )
    with pytest.raises(UnsupportedInterrupt, match="per_call"):
        gate.invoke(graph, ask(), thread_id=lg.t("batched"))
    assert desk.store.tickets(external_id_for(lg.t("batched"))) == []


# --- a durable pause: the process that paused is gone; the resumer picks the decision up ----------


def handler_from_env():
    """The resumer's handler in this test: the thread's files come from the environment."""
    graph_db, tool_log = Path(os.environ["LG_GRAPH_DB"]), Path(os.environ["LG_TOOL_LOG"])
    return resumer_handler(lambda desk: build(desk, graph_db, tool_log, scripted(DONE)))


def resumer_handler_for_tests(desk, ticket, outcome):
    return handler_from_env()(desk, ticket, outcome)


def pause_main() -> None:
    """`python test_adapter_langgraph.py`: run the graph until it pauses, then exit."""
    desk = DeskClient(store=SQLiteStore(os.environ["LG_STORE"]))
    gate, graph = build(
        desk,
        Path(os.environ["LG_GRAPH_DB"]),
        Path(os.environ["LG_TOOL_LOG"]),
        scripted(refund_calls(("call_1", {"order_id": "9", "amount": 12}))),
    )
    out = gate.invoke(graph, ask("Refund order 9."), thread_id=os.environ["LG_THREAD"])
    print(json.dumps([i.value["tool_call_id"] for i in out.interrupts]))


def test_a_pause_survives_its_process_and_the_resumer_picks_the_decision_up(lg):
    env = {
        **os.environ,
        **lg.client_env(),
        "PYTHONPATH": os.pathsep.join([str(CLIENT_ROOT), str(HERE)]),
        "LG_GRAPH_DB": str(lg.graph_db),
        "LG_TOOL_LOG": str(lg.tool_log),
        "LG_STORE": str(lg.store_path),
        "LG_THREAD": lg.t("durable"),
    }
    paused = subprocess.run(
        [sys.executable, str(Path(__file__))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert paused.returncode == 0, paused.stderr
    assert json.loads(paused.stdout.strip().splitlines()[-1]) == ["call_1"]

    desk = lg.client()  # this process never ran the graph
    lg.decide(desk, lg.t("durable"), "call_1", "approve")
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "reviewdesk_client.resumer",
            "--store",
            str(lg.store_path),
            "--handler",
            "test_adapter_langgraph:resumer_handler_for_tests",
            "--once",
        ],
        env=env,
        cwd=str(HERE),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert runs_of(lg.tool_log) == [{"order_id": "9", "amount": 12}]
    ticket = desk.store.ticket(external_id_for(lg.t("durable")), "call_1")
    assert lg.run(ticket.run_id)["status"] == "succeeded"


if __name__ == "__main__":
    pause_main()


def test_the_desk_traces_an_argument_to_the_tool_whose_output_held_it_and_trusts_only_named_tools(lg):
    """The adapter's context names each ToolMessage's tool and call: the desk's provenance says
    the refund's order came from lookup_order's output, a warning unless the client names that
    tool trusted (DeskClient(trusted_tools=...))."""

    @tool
    def lookup_order(customer: str) -> str:
        """Find a customer's last order."""
        return "Ada's last order is ZX-77."

    script = (
        AIMessage(content="", tool_calls=[{"name": "lookup_order", "args": {"customer": "ada"}, "id": "l1"}]),
        refund_calls(("call_1", {"order_id": "ZX-77", "amount": 5})),
        DONE,
    )
    seen = {}
    for trusted in ((), ("lookup_order",)):
        desk = lg.client()
        desk.trusted_tools = trusted
        gate = LangGraphDesk(
            desk,
            interrupt_on={"refund": ["approve", "edit", "reject"]},
            tools=[make_refund_tool(lg.tool_log), lookup_order],
            agent="support-bot",
        )
        thread = lg.t(f"trace-{len(trusted)}")
        saver = SqliteSaver(sqlite3.connect(str(lg.graph_db), check_same_thread=False))
        gate.invoke(
            gate.create_agent(scripted(*script), checkpointer=saver),
            ask("Refund Ada's last order."),
            thread_id=thread,
        )
        approval = desk.approval(desk.store.ticket(external_id_for(thread), "call_1"))
        seen[trusted] = approval
        source = approval["provenance"]["/order_id"][0]
        assert (source["kind"], source["tool"], source["call_id"]) == ("tool_output", "lookup_order", "l1")
    assert seen[()]["provenance"]["/order_id"][0]["trusted"] is False
    assert ("/order_id", "untrusted_origin") in {
        (f["pointer"], f["code"]) for f in seen[()]["provenance_flags"]
    }
    assert seen[("lookup_order",)]["provenance"]["/order_id"][0]["trusted"] is True
    assert not [f for f in seen[("lookup_order",)]["provenance_flags"] if f["code"] == "untrusted_origin"]
