"""An agent module for tests/e2e/test_slack.py (named in DESK_AGENTS with agents.demo): the demo's
send_email, but one that runs only on a decision signed by the reviewer's device key, so that a
Slack message about it offers no Approve button and a crafted approve click is refused."""

from __future__ import annotations

from dataclasses import replace

from agents.demo import DEMO, TOOL_WORLD
from agents.registry import Agent, register

__all__ = ["TOOL_WORLD"]  # the demo's world: send_email acts through it

_SEND_EMAIL = next(tool for tool in DEMO.tools if tool.name == "send_email")

register(
    Agent(
        name="demo-keys",
        system_prompt="Email customers; every email is approved with a device key.",
        tools=(replace(_SEND_EMAIL, requires_device_keys=True),),
    )
)
