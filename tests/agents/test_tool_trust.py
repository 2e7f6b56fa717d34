"""Whose output a tool's is (issue 38): `Tool.trusts_output`, in-process."""

from __future__ import annotations

from agents.tools import NEVER, Effect, Tool, ToolSource


def tool(effect=Effect.READ, **fields):
    return Tool(
        name="t",
        description="",
        parameters={"type": "object"},
        effect=effect,
        func=lambda a, c: None,
        approval=NEVER,
        **fields,
    )


def test_a_read_of_your_own_module_is_trusted_and_any_other_effect_is_not():
    assert tool().trusts_output is True
    assert tool(source=ToolSource(kind="module", name="agents.demo")).trusts_output is True
    assert tool(effect=Effect.EXTERNAL).trusts_output is False


def test_an_mcp_servers_read_tool_is_untrusted_unless_declared():
    served = ToolSource(kind="mcp", name="web")
    assert tool(source=served).trusts_output is False
    assert tool(source=served, output_trusted=True).trusts_output is True


def test_a_declared_untrusted_read_is_untrusted():
    assert tool(output_trusted=False).trusts_output is False
