"""A run that fails inside the desk shows the submitter an incident id, never the exception's text."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


def nested(depth: int) -> object:
    value: object = "ada@example.com"
    for _ in range(depth):
        value = [value]
    return value


def on_a_fresh_stack(work: Callable[[], Any]) -> Any:
    """Run `work` in a new thread, whose stack starts empty as a server's or a worker's does
    (pytest's own frames would otherwise hit the recursion limit first, somewhere else)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(work()))
    thread.start()
    thread.join(60)
    assert result, "the work raised (see the thread's traceback above)"
    return result[0]


def test_a_900_level_nested_script_argument_is_refused_at_the_api_with_a_clear_4xx(personas, api_as):
    client = api_as(personas.carol, "submit")
    script = [{"tool_calls": [{"name": "lookup_customer", "arguments": {"email": nested(900)}}]}]
    body = json.dumps({"agent": "demo", "input": "Hi", "model": {"provider": "scripted", "script": script}})

    response = on_a_fresh_stack(lambda: client.post("/api/v1/runs", body, content_type="application/json"))

    assert response.status_code == 400 and response.json()["code"] == "too_deep"
    assert "ecursion" not in response.content.decode()


def test_a_run_that_fails_inside_the_desk_shows_an_incident_id_never_the_exception(personas, api_as, caplog):
    """The run is created below the API (whose depth limit would refuse it), as a model's own
    deeply nested reply could arrive: the RecursionError inside the run must not reach the
    submitter, only an incident id that the log names."""
    script = [
        {"tool_calls": [{"name": "lookup_customer", "arguments": {"email": nested(900)}}]},
        {"content": "x"},
    ]
    run = Run.objects.create(
        agent="demo",
        input="Hi",
        model={"provider": "scripted", "script": script},
        approval_ttl_seconds=60,
        submitted_by=personas.carol,
    )

    with caplog.at_level(logging.ERROR, logger="reviewdesk.runs.execution"):
        on_a_fresh_stack(lambda: run_execute(run_id=run.id, worker="in-process"))

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.error.startswith("internal error (incident "), run.error
    incident = run.error.removeprefix("internal error (incident ").removesuffix(")")
    assert any(incident in r.getMessage() and "RecursionError" in r.getMessage() for r in caplog.records)
    response = on_a_fresh_stack(lambda: api_as(personas.carol, "submit").get(f"/api/v1/runs/{run.id}"))
    assert "ecursion" not in response.content.decode()
