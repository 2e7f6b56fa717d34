"""DESK_TOOL_WORLD chooses the world the tools act through."""

from __future__ import annotations

import pytest
from django.test import override_settings

from agents.testing.world import RecordingWorld
from reviewdesk.demo.world import DjangoDemoWorld
from reviewdesk.lib.tool_world import tool_world


def test_the_default_world_is_the_demo_agents_world_on_django():
    assert type(tool_world()) is DjangoDemoWorld


def test_the_setting_names_another_class_and_each_call_gets_a_fresh_instance():
    with override_settings(DESK_TOOL_WORLD="agents.testing.world.RecordingWorld"):
        first, second = tool_world(), tool_world()

    assert type(first) is RecordingWorld and first is not second
    assert type(tool_world()) is DjangoDemoWorld  # back to the default with the setting


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("reviewdesk.demo.world.NoSuchWorld", ImportError),
        ("reviewdesk.settings.DESK_TOOL_WORLD", TypeError),
    ],
    ids=["a missing class", "not a class"],
)
def test_a_setting_that_names_no_class_fails_loudly(path, error):
    with override_settings(DESK_TOOL_WORLD=path), pytest.raises(error):
        tool_world()
