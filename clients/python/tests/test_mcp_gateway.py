"""The MCP gateway end to end: the official `mcp` client over stdio -> the gateway (its own
process, `python -m reviewdesk_client.mcp_gateway`) -> an upstream server written with the SDK
(tests/mcp_upstream.py, its own process). The upstream appends each tool run to a file: that file
is how these tests count what really ran, and with which arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from reviewdesk_client.mcp_gateway import is_gated

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
