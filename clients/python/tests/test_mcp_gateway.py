"""The MCP gateway end to end: the official `mcp` client over stdio -> the gateway (its own
process, `python -m reviewdesk_client.mcp_gateway`) -> an upstream server written with the SDK
(tests/mcp_upstream.py, its own process). The upstream appends each tool run to a file: that file
is how these tests count what really ran, and with which arguments."""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from reviewdesk_client import SQLiteStore
from reviewdesk_client.mcp_gateway import is_gated
from reviewdesk_client.mcp_gateway.desk import call_key
from reviewdesk_client.mcp_gateway.pins import PinFile, PinsError, PinState, tool_digest

CLIENT_ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = Path(__file__).with_name("mcp_upstream.py")
UNUSED_DESK = "http://127.0.0.1:9"  # for gateways whose calls are all ungated: never reached


@dataclass
class Setup:
    """One gateway's files: its pins, its store and the upstream's run log."""

    root: Path
    name: str = "orders"
    desk: str = UNUSED_DESK
    env: dict[str, str] = field(default_factory=dict)

    @property
    def pins(self) -> Path:
        return self.root / "pins.json"

    @property
    def store(self) -> Path:
        return self.root / "store.sqlite3"

    @property
    def switch(self) -> Path:
        """Once this file exists, the running upstream serves `refund` changed."""
        return self.root / "switch"

    @property
    def log(self) -> Path:
        return self.root / "upstream.log"

    def runs(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def argv(self, *options: str, variant: str = "") -> list[str]:
        return [
            "-m",
            "reviewdesk_client.mcp_gateway",
            "--name",
            self.name,
            "--pins",
            str(self.pins),
            "--env",
            "UPSTREAM_LOG",
            "--env",
            f"UPSTREAM_VARIANT={variant}",
            "--env",
            f"UPSTREAM_SWITCH={self.switch}",
            *options,
            "--",
            sys.executable,
            str(UPSTREAM),
        ]

    def process_env(self) -> dict[str, str]:
        return {
            "PYTHONPATH": str(CLIENT_ROOT),
            "UPSTREAM_LOG": str(self.log),
            **self.env,
        }

    def command(self, *options: str, variant: str = "") -> subprocess.CompletedProcess[str]:
        """The gateway run as a command (--check, --accept), not as a server."""
        return subprocess.run(
            [sys.executable, *self.argv(*options, variant=variant)],
            env={**os.environ, **self.process_env()},
            capture_output=True,
            text=True,
            timeout=60,
        )


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


@asynccontextmanager
async def gateway(setup: Setup, *options: str, variant: str = "") -> AsyncIterator[ClientSession]:
    """An MCP client session with the gateway, started as a process over stdio."""
    parameters = StdioServerParameters(
        command=sys.executable,
        args=setup.argv("--desk", setup.desk, "--store", str(setup.store), *options, variant=variant),
        env=setup.process_env(),
    )
    async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
        with anyio.fail_after(30):
            await session.initialize()
        yield session


@asynccontextmanager
async def upstream_direct(setup: Setup, variant: str = "") -> AsyncIterator[ClientSession]:
    parameters = StdioServerParameters(
        command=sys.executable,
        args=[str(UPSTREAM)],
        env={"UPSTREAM_LOG": str(setup.log), "UPSTREAM_VARIANT": variant},
    )
    async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


def tools_by_name(listing: Any) -> dict[str, dict[str, Any]]:
    return {t.name: t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in listing.tools}


# --- pins, in process --------------------------------------------------------------------

REPO = CLIENT_ROOT.parents[1]
DESK_PYTHON = Path(os.environ.get("DESK_PYTHON", REPO / ".venv" / "bin" / "python"))


def wire_tool(name: str, description: str = "Refund.", **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}, **extra}


def test_the_digest_is_the_desks_own() -> None:
    """The same tools hash alike here and in the desk's agents.mcp (run by the desk's Python):
    the four hints count, the title and other annotations do not, key order does not."""
    tools = [
        wire_tool("refund"),
        wire_tool("refund", annotations={"destructiveHint": True, "title": "Refund"}),
        wire_tool("lookup", "Look up.", annotations={"readOnlyHint": True, "idempotentHint": False}),
        {"inputSchema": {"properties": {"b": {"type": "integer"}, "a": {}}, "type": "object"}, "name": "x"},
    ]
    desk = subprocess.run(
        [str(DESK_PYTHON), str(Path(__file__).with_name("mcp_desk_digest.py"))],
        input=json.dumps(tools),
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert desk.returncode == 0, desk.stderr
    assert [tool_digest(t) for t in tools] == json.loads(desk.stdout)
    assert tool_digest(tools[1]) != tool_digest(tools[0])
    assert tool_digest({**tools[1], "annotations": {"destructiveHint": True}}) == tool_digest(tools[1])


def test_first_sight_pins_and_later_changes_are_refused(tmp_path: Path) -> None:
    pins = PinFile(tmp_path / "pins.json", "orders")
    served = [wire_tool("refund"), wire_tool("lookup"), wire_tool("bad name")]
    first = pins.reconcile(served)
    assert first.states == {"refund": PinState.NEW, "lookup": PinState.NEW, "bad name": PinState.CHANGED}
    assert [t["name"] for t in first.tools] == ["refund", "lookup"]  # a bad name is never served

    later = pins.reconcile([wire_tool("refund", "Refund to any card."), wire_tool("wipe")])
    assert later.states == {"refund": PinState.CHANGED, "wipe": PinState.CHANGED, "lookup": PinState.GONE}
    assert not any(later.runnable(name) for name in later.states)
    listed = {t["name"]: t["description"] for t in later.tools}
    assert listed == {"refund": "Refund.", "lookup": "Refund."}  # the pins; the added tool is hidden

    accepted = pins.accept([wire_tool("refund", "Refund to any card."), wire_tool("wipe")], ["refund"])
    assert [c.name for c in accepted] == ["refund"]
    after = pins.reconcile([wire_tool("refund", "Refund to any card."), wire_tool("wipe")])
    assert after.states == {"refund": PinState.PINNED, "wipe": PinState.CHANGED, "lookup": PinState.GONE}


def test_a_pins_file_of_another_server_or_with_a_forged_pin_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pins.json"
    PinFile(path, "orders").reconcile([wire_tool("refund")])
    with pytest.raises(PinsError, match="belongs to server 'orders'"):
        PinFile(path, "billing").load()
    data = json.loads(path.read_text())
    data["tools"]["refund"]["definition"]["description"] = "Refund to any card."
    path.write_text(json.dumps(data))
    with pytest.raises(PinsError, match="does not match its digest"):
        PinFile(path, "orders").load()


# --- the proxy without a desk ---------------------------------------------------------------


def test_gate_patterns_match_tool_names() -> None:
    assert is_gated("refund", ())  # no pattern: every tool
    assert is_gated("refund", ("ref*",))
    assert not is_gated("lookup", ("ref*", "wipe"))
    assert is_gated("wipe", ("ref*", "wipe"))
    assert not is_gated("Refund", ("refund",))  # case matters, as tool names do


def test_tools_are_listed_as_the_upstream_serves_them(setup: Setup) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with upstream_direct(setup) as direct:
            served = tools_by_name(await direct.list_tools())
        async with gateway(setup, "--gate", "refund") as client:
            listed = tools_by_name(await client.list_tools())
        return served, listed

    served, listed = anyio.run(scenario)
    assert set(listed) == {"lookup", "refund"}
    assert listed == served  # names, descriptions, schemas, output schemas, annotations: unchanged
    pins = json.loads(setup.pins.read_text())
    assert pins["server"] == "orders" and set(pins["tools"]) == {"lookup", "refund"}


def test_an_ungated_call_passes_through_once(setup: Setup) -> None:
    async def scenario() -> Any:
        async with gateway(setup, "--gate", "refund") as client:
            return await client.call_tool("lookup", {"order_id": "1234"})

    result = anyio.run(scenario)
    assert not result.is_error
    assert text(result) == "order 1234: 2 items, paid"
    assert result.structured_content == {"result": "order 1234: 2 items, paid"}
    assert setup.runs() == [{"tool": "lookup", "arguments": {"order_id": "1234"}}]


def test_an_unknown_tool_is_an_error_and_nothing_runs(setup: Setup) -> None:
    async def scenario() -> Any:
        async with gateway(setup, "--gate", "refund") as client:
            return await client.call_tool("nope", {})

    result = anyio.run(scenario)
    assert result.is_error and "not served" in text(result)
    assert setup.runs() == []


def test_a_changed_definition_is_refused_until_accepted(setup: Setup) -> None:
    """Pinned on first sight; served changed, the tool keeps its pinned definition in the
    listing and every call to it is refused before anything is sent; `--check` shows the change
    and `--accept --yes` makes the new definition the pin, after which calls go through."""
    ungated = ("--gate", "nothing-is-gated")

    async def first_sight() -> None:
        async with gateway(setup, *ungated) as client:
            await client.list_tools()

    async def after_change() -> tuple[dict[str, Any], Any, Any]:
        async with gateway(setup, *ungated, variant="changed") as client:
            listed = tools_by_name(await client.list_tools())
            refused = await client.call_tool("refund", {"order_id": "1", "amount": 5})
            other = await client.call_tool("lookup", {"order_id": "1"})
            return listed, refused, other

    async def after_accept() -> tuple[dict[str, Any], Any]:
        async with gateway(setup, *ungated, variant="changed") as client:
            listed = tools_by_name(await client.list_tools())
            return listed, await client.call_tool("refund", {"order_id": "1", "amount": 5})

    anyio.run(first_sight)
    listed, refused, other = anyio.run(after_change)
    assert listed["refund"]["description"] == "Refund part of an order to the customer's card."
    assert refused.is_error and "definition changed since it was pinned" in text(refused)
    assert not other.is_error  # an unchanged tool of the same server still runs
    assert setup.runs() == [{"tool": "lookup", "arguments": {"order_id": "1"}}]

    check = setup.command("--check", variant="changed")
    assert check.returncode == 1, check.stderr
    assert "refund: definition changed" in check.stdout and "any card the caller names" in check.stdout
    declined = setup.command("--accept", variant="changed")  # not a terminal and no --yes
    assert declined.returncode == 1 and "nothing accepted" in declined.stdout
    accepted = setup.command("--accept", "--yes", variant="changed")
    assert accepted.returncode == 0, accepted.stderr
    assert "accepted: refund" in accepted.stdout

    listed, ran = anyio.run(after_accept)
    assert listed["refund"]["description"] == "Refund part of an order to any card the caller names."
    assert not ran.is_error and text(ran) == "refunded 5 on order 1"
    assert [r["tool"] for r in setup.runs()] == ["lookup", "refund"]


def test_a_tool_added_after_the_first_sight_is_not_served_until_accepted(setup: Setup) -> None:
    ungated = ("--gate", "nothing-is-gated")

    async def listing(variant: str) -> tuple[dict[str, Any], Any]:
        async with gateway(setup, *ungated, variant=variant) as client:
            listed = tools_by_name(await client.list_tools())
            return listed, await client.call_tool("wipe", {"order_id": "9"})

    anyio.run(listing, "")
    listed, refused = anyio.run(listing, "extra")
    assert "wipe" not in listed
    assert refused.is_error and "definition changed since it was pinned" in text(refused)
    assert setup.runs() == []
    assert setup.command("--accept", "--yes", "--tool", "wipe", variant="extra").returncode == 0
    listed, ran = anyio.run(listing, "extra")
    assert "wipe" in listed and not ran.is_error
    assert setup.runs() == [{"tool": "wipe", "arguments": {"order_id": "9"}}]


# --- gated calls, against the real desk (conftest.py) ---------------------------------------

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
REFUND = {"order_id": "1234", "amount": 250}
GATE_REFUND = ("--gate", "refund*")


@pytest.fixture
def gated(setup: Setup, desk: Any) -> Setup:
    """The gateway as the desk's service account, the desk's keys pinned; a name (an external
    run) of its own on the session's desk."""
    setup.name = f"orders-{uuid.uuid4().hex[:8]}"
    setup.desk = desk.url
    setup.env = {"REVIEWDESK_TOKEN": desk.tokens["svc"], "REVIEWDESK_KEYS": json.dumps(desk.keys)}
    return setup


def approval_of(result: Any) -> dict[str, Any]:
    """What the gateway says of the approval in its own results' `_meta`."""
    return (result.meta or {})["io.reviewdesk/approval"]


@dataclass
class Decided:
    result: Any
    approval_id: str
    progress: list[str]


async def call_and_decide(
    client: ClientSession,
    desk: Any,
    tool: str,
    arguments: dict[str, Any],
    verdict: str,
    /,
    before_decision: Callable[[], object] = lambda: None,
    **fields: Any,
) -> Decided:
    """Call a gated tool; as soon as the gateway's progress names the approval, a reviewer
    (alice) decides it through the desk's API; the call's result once the gateway answers."""
    progress: list[str] = []
    named = anyio.Event()
    results: list[Any] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")
        if message and UUID.search(message):
            named.set()

    async def call() -> None:
        results.append(await client.call_tool(tool, arguments, progress_callback=on_progress))

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        with anyio.fail_after(60):
            await named.wait()
        approval_id = UUID.search(progress[-1]).group(0)
        before_decision()
        await anyio.to_thread.run_sync(lambda: desk.decide(approval_id, verdict, **fields))
    return Decided(results[0], approval_id, progress)


def test_an_approved_call_runs_once_with_the_arguments_sent(gated: Setup, desk: Any) -> None:
    async def scenario() -> Decided:
        async with gateway(gated, *GATE_REFUND, "--wait", "60") as client:
            return await call_and_decide(client, desk, "refund", REFUND, "approve")

    decided = anyio.run(scenario)
    assert not decided.result.is_error, text(decided.result)
    assert text(decided.result) == "refunded 250 on order 1234"
    assert gated.runs() == [{"tool": "refund", "arguments": REFUND}]
    assert (
        decided.progress[0].startswith("waiting for a reviewer: ")
        and decided.approval_id in decided.progress[0]
    )
    _, approval = desk.api("GET", f"/api/v1/approvals/{decided.approval_id}")
    assert approval["status"] == "approved" and approval["tool"] == "refund"


def test_an_edited_call_runs_with_the_reviewers_arguments(gated: Setup, desk: Any) -> None:
    edited = {"order_id": "1234", "amount": 100}

    async def scenario() -> Decided:
        async with gateway(gated, *GATE_REFUND, "--wait", "60") as client:
            return await call_and_decide(client, desk, "refund", REFUND, "edit", arguments=edited)

    decided = anyio.run(scenario)
    assert not decided.result.is_error, text(decided.result)
    assert text(decided.result) == "refunded 100 on order 1234"
    assert gated.runs() == [{"tool": "refund", "arguments": edited}]


def test_a_rejected_call_is_an_error_with_the_reason_and_never_runs(gated: Setup, desk: Any) -> None:
    async def scenario() -> Decided:
        async with gateway(gated, *GATE_REFUND, "--wait", "60") as client:
            return await call_and_decide(
                client, desk, "refund", REFUND, "reject", reason="refunds over 200 need a manager"
            )

    decided = anyio.run(scenario)
    assert decided.result.is_error
    assert "rejected this call: refunds over 200 need a manager" in text(decided.result)
    assert approval_of(decided.result)["status"] == "rejected"
    assert gated.runs() == []


def test_a_call_not_decided_in_time_waits_and_the_same_call_meets_the_same_approval(
    gated: Setup, desk: Any
) -> None:
    """--wait 1: the call answers that it waits, with the approval's URL, and sends nothing. The
    same call again (from a restarted gateway: the store keeps it) meets the same approval;
    other arguments raise another. Approved, the same call runs once; once more, it asks anew."""

    async def call(*calls: dict[str, Any]) -> list[Any]:
        async with gateway(gated, *GATE_REFUND, "--wait", "1") as client:
            return [await client.call_tool("refund", arguments) for arguments in calls]

    (waiting,) = anyio.run(call, REFUND)
    assert waiting.is_error and "waits for a reviewer" in text(waiting)
    pending = approval_of(waiting)
    assert pending["status"] == "pending" and pending["url"] in text(waiting)
    assert pending["id"] in pending["url"]

    again, other = anyio.run(call, REFUND, {"order_id": "1234", "amount": 251})
    assert approval_of(again) == pending  # the same approval, not a new one
    assert approval_of(other)["id"] != pending["id"]
    assert gated.runs() == []

    desk.decide(pending["id"], "approve")
    ran, once_more = anyio.run(call, REFUND, REFUND)
    assert not ran.is_error and text(ran) == "refunded 250 on order 1234"
    assert gated.runs() == [{"tool": "refund", "arguments": REFUND}]
    assert once_more.is_error and approval_of(once_more)["id"] not in (
        pending["id"],
        approval_of(other)["id"],
    )
    assert len(gated.runs()) == 1


def test_a_cancelled_approval_is_an_error_and_the_same_call_asks_anew(gated: Setup, desk: Any) -> None:
    """Cancelling the gateway's run on the desk cancels its waiting call: the call made again
    says so and sends nothing; made once more, it is a new request in a new run."""

    async def call() -> Any:
        async with gateway(gated, *GATE_REFUND, "--wait", "0") as client:
            return await client.call_tool("refund", REFUND)

    pending = approval_of(anyio.run(call))
    _, approval = desk.api("GET", f"/api/v1/approvals/{pending['id']}")
    status, _ = desk.api("POST", f"/api/v1/runs/{approval['run']}/cancel")
    assert status == 200, status
    cancelled = anyio.run(call)
    assert cancelled.is_error and "was cancelled on the desk" in text(cancelled)
    assert approval_of(cancelled) == {**pending, "status": "cancelled"}

    anew = approval_of(anyio.run(call))
    assert anew["id"] != pending["id"] and anew["status"] == "pending"
    _, new_approval = desk.api("GET", f"/api/v1/approvals/{anew['id']}")
    assert new_approval["run"] != approval["run"]
    store = SQLiteStore(gated.store)
    assert store.ticket_by_approval(anew["id"]).external_id == f"mcp:{gated.name}:2"
    store.close()
    assert gated.runs() == []


def test_a_decision_signed_by_an_unpinned_key_is_refused_before_the_tool_runs(
    gated: Setup, desk: Any
) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    other = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    gated.env["REVIEWDESK_KEYS"] = json.dumps({"someone-else": base64.b64encode(other).decode()})

    async def scenario() -> Decided:
        async with gateway(gated, *GATE_REFUND, "--wait", "60") as client:
            return await call_and_decide(client, desk, "refund", REFUND, "approve")

    decided = anyio.run(scenario)
    assert decided.result.is_error and "failed verification" in text(decided.result)
    assert approval_of(decided.result)["status"] == "refused"
    assert gated.runs() == []


def test_a_replayed_decision_is_refused_before_the_tool_runs(gated: Setup, desk: Any) -> None:
    """After an approved call ran, someone with the store points the same call back at the used
    approval: the gateway's own nonce record refuses it; with that record wiped too, the desk's
    single-use consume does. The tool ran once."""

    async def approved() -> Decided:
        async with gateway(gated, *GATE_REFUND, "--wait", "60") as client:
            return await call_and_decide(client, desk, "refund", REFUND, "approve")

    async def call() -> Any:
        async with gateway(gated, *GATE_REFUND, "--wait", "5") as client:
            return await client.call_tool("refund", REFUND)

    decided = anyio.run(approved)
    assert not decided.result.is_error and len(gated.runs()) == 1
    digest = tool_digest(json.loads(gated.pins.read_text())["tools"]["refund"]["definition"])
    store = SQLiteStore(gated.store)
    (ticket,) = store.tickets(f"mcp:{gated.name}")
    used = {"external_id": ticket.external_id, "tool_call_id": ticket.tool_call_id}
    store.put_state(call_key(gated.name, "refund", digest, REFUND), json.dumps(used))

    replayed = anyio.run(call)
    assert replayed.is_error and "failed verification" in text(replayed), text(replayed)
    assert approval_of(replayed)["id"] == decided.approval_id

    store._run("DELETE FROM consumed_nonces")
    replayed_again = anyio.run(call)
    assert replayed_again.is_error and "already used" in text(replayed_again), text(replayed_again)
    assert gated.runs() == [{"tool": "refund", "arguments": REFUND}]
    store.close()


def test_a_call_decided_under_one_definition_never_runs_under_another(gated: Setup, desk: Any) -> None:
    """Approved while the upstream served the pinned definition; the upstream then changes it:
    the call is refused until the change is accepted, and then it asks a reviewer anew."""

    async def call(variant: str) -> Any:
        async with gateway(gated, *GATE_REFUND, "--wait", "0", variant=variant) as client:
            return await client.call_tool("refund", REFUND)

    pending = approval_of(anyio.run(call, ""))
    desk.decide(pending["id"], "approve")
    refused = anyio.run(call, "changed")
    assert refused.is_error and "definition changed since it was pinned" in text(refused)
    assert gated.command("--accept", "--yes", variant="changed").returncode == 0

    # Someone with the store points the call under the new definition at the old decision:
    # its checkpoint names the old definition, so it is refused.
    new_digest = tool_digest(json.loads(gated.pins.read_text())["tools"]["refund"]["definition"])
    store = SQLiteStore(gated.store)
    old = store.ticket_by_approval(pending["id"])
    new_key = call_key(gated.name, "refund", new_digest, REFUND)
    store.put_state(new_key, json.dumps({"external_id": old.external_id, "tool_call_id": old.tool_call_id}))
    tampered = anyio.run(call, "changed")
    assert tampered.is_error and "changed since this call was decided" in text(tampered), text(tampered)
    store.delete_state(new_key)
    store.close()

    asked_anew = anyio.run(call, "changed")
    assert asked_anew.is_error and approval_of(asked_anew)["status"] == "pending"
    assert approval_of(asked_anew)["id"] != pending["id"]
    assert gated.runs() == []


def test_a_definition_changed_while_the_call_waits_is_refused_before_it_runs(gated: Setup, desk: Any) -> None:
    """The upstream changes `refund` after the call was submitted and before the reviewer
    approves: the gateway lists the tools again before sending and sends nothing."""

    async def scenario() -> Decided:
        async with gateway(gated, *GATE_REFUND, "--wait", "60") as client:
            return await call_and_decide(
                client, desk, "refund", REFUND, "approve", before_decision=gated.switch.touch
            )

    decided = anyio.run(scenario)
    assert decided.result.is_error
    assert "definition changed since this call was decided" in text(decided.result)
    assert gated.runs() == []


def test_a_call_a_standing_grant_covers_runs_without_waiting(gated: Setup, desk: Any) -> None:
    """A reviewer approves with a grant for the gateway's agent: the same call made again is
    approved at its submit, signed, verified and run at once, even with --wait 0; a call the
    grant does not cover still waits for a human."""

    async def approved_with_grant() -> Decided:
        async with gateway(gated, *GATE_REFUND, "--wait", "60") as client:
            grant = {"match": "exact", "scope": "agent", "max_uses": 1}
            return await call_and_decide(client, desk, "refund", REFUND, "approve", grant=grant)

    async def calls() -> list[Any]:
        async with gateway(gated, *GATE_REFUND, "--wait", "0") as client:
            return [
                await client.call_tool("refund", REFUND),
                await client.call_tool("refund", {"order_id": "1234", "amount": 999}),
            ]

    first = anyio.run(approved_with_grant)
    assert not first.result.is_error, text(first.result)
    granted, other = anyio.run(calls)
    assert not granted.is_error and text(granted) == "refunded 250 on order 1234", text(granted)
    assert other.is_error and approval_of(other)["status"] == "pending"
    assert gated.runs() == [{"tool": "refund", "arguments": REFUND}] * 2


def test_identical_calls_at_once_run_the_tool_once(gated: Setup, desk: Any) -> None:
    """Two identical calls in flight together: one approval for them; approved, the tool runs
    once; the other call, taken after it, finds the decision used and asks anew (rejected here)."""
    names: list[str] = []
    named = anyio.Event()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        found = UUID.search(message or "")
        if found and found.group(0) not in names:
            names.append(found.group(0))
            named.set()

    async def scenario() -> list[Any]:
        nonlocal named
        results: list[Any] = []
        async with gateway(gated, *GATE_REFUND, "--wait", "60") as client, anyio.create_task_group() as group:

            async def call() -> None:
                results.append(await client.call_tool("refund", REFUND, progress_callback=on_progress))

            group.start_soon(call)
            group.start_soon(call)
            for verdict in ("approve", "reject"):
                with anyio.fail_after(60):
                    await named.wait()
                named = anyio.Event()
                decide = functools.partial(desk.decide, names[-1], verdict, reason="once is enough")
                await anyio.to_thread.run_sync(decide)
        return results

    first, second = anyio.run(scenario)
    assert not first.is_error and text(first) == "refunded 250 on order 1234"
    assert second.is_error and approval_of(second)["status"] == "rejected"
    assert len(names) == 2 and approval_of(second)["id"] == names[1]
    assert gated.runs() == [{"tool": "refund", "arguments": REFUND}]
