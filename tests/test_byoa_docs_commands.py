"""Review of issue 36's "from nothing to a first approved call", followed literally: the steps
run `make run` with DESK_AGENTS set on its command line, then send the next commands "in another
shell", where DESK_AGENTS is not set. `manage.py review --as alice` there loads the default list
(the demo), and refuses the example's call: "the agent 'helpdesk' is not deployed any more",
showing send_reply as "no longer declared" (tried by hand on the embedded default, 2026-12-07).

A command of these pages that reads the loaded agents must carry the same DESK_AGENTS, or the
page must tell the reader to export it for every shell first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["docs/bring-your-own-agent.md", "examples/agent_package/README.md"]
# manage.py commands that read the agents this process loaded (the others only touch the database).
READS_AGENTS = re.compile(r"manage\.py (review|agents)\b")


@pytest.mark.parametrize("page", PAGES)
def test_a_command_that_reads_the_agents_runs_with_the_pages_desk_agents(page):
    text = (ROOT / page).read_text()
    exported = re.search(r"export DESK_AGENTS=", text)
    for match in READS_AGENTS.finditer(text):
        line = text[text.rfind("\n", 0, match.start()) + 1 : text.find("\n", match.end())]
        if "DESK_AGENTS=" in line or (exported and exported.start() < match.start()):
            continue
        pytest.fail(f"{page}: {line.strip()!r} runs without the DESK_AGENTS the desk was started with")
