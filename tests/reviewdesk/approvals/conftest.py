from __future__ import annotations

import pytest

from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS
from tests.conftest import make_user


@pytest.fixture
def dave(db):
    """A reviewer in the finance group: the demo routes refunds over 1,000 there."""
    return make_user("dave", REVIEWERS, "finance")


@pytest.fixture
def sam(db):
    """Submits runs, and reviews in finance too: four eyes keeps him off his own runs' approvals."""
    return make_user("sam", SUBMITTERS, REVIEWERS, "finance")


def refund_script(amount: float) -> list[dict]:
    return [
        {"tool_calls": [{"name": "refund_payment", "arguments": {"order_id": "A-1001", "amount": amount}}]},
        {"content": "Done."},
    ]


def asking(**arguments) -> list[dict]:
    """A script whose model asks a reviewer (`ask_human` with `arguments`), then thanks them."""
    return [{"tool_calls": [{"name": "ask_human", "arguments": arguments}]}, {"content": "Thanks."}]


EXECUTE_SCRIPT = [
    {"tool_calls": [{"name": "execute", "arguments": {"command": "echo two-person"}}]},
    {"content": "Ran it."},
]
