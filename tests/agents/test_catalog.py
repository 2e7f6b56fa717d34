"""agents.catalog: how a policy is named, whether a call needs a human, where a tool comes from
(the runtime alone)."""

from __future__ import annotations

import dataclasses
import functools

from agents.catalog import approval_kind, policy_name, tool_source
from agents.tools import ALWAYS, NEVER, Effect, Tool, ToolSource


def over(arguments, limit):
    return arguments.get("amount", 0) > limit


class Threshold:
    def __call__(self, arguments):
        return True


def noop(arguments, ctx):
    return {}


def test_always_and_never_are_named_as_the_constants_and_need_a_human_or_not():
    assert (policy_name(ALWAYS), approval_kind(ALWAYS)) == ("ALWAYS", "always")
    assert (policy_name(NEVER), approval_kind(NEVER)) == ("NEVER", "never")


def test_any_other_policy_depends_on_the_call_and_is_named_by_where_it_is_defined():
    assert policy_name(over) == "tests.agents.test_catalog.over"
    assert policy_name(functools.partial(over, limit=100)) == "tests.agents.test_catalog.over"
    assert policy_name(Threshold()) == "tests.agents.test_catalog.Threshold"
    assert policy_name(lambda arguments: True).startswith("tests.agents.test_catalog.")
    assert {approval_kind(p) for p in (over, Threshold(), lambda arguments: False)} == {"depends"}
    # A function that answers like ALWAYS is still a function: only the constant is "always".
    assert approval_kind(lambda arguments: True) == "depends"


def test_a_tool_without_a_source_comes_from_its_functions_module():
    tool = Tool(
        name="t",
        description="",
        parameters={"type": "object"},
        effect=Effect.READ,
        func=functools.partial(noop),
    )
    assert tool_source(tool) == ToolSource(kind="module", name="tests.agents.test_catalog")
    served = ToolSource(kind="mcp", name="files", pin="sha256:00", state="up")
    assert tool_source(dataclasses.replace(tool, source=served)) is served
