"""Threads, the tokens page and the webhooks page on real processes (daphne and a Celery
worker on the real broker) and in headless Chromium, with axe-core on the three pages."""

from __future__ import annotations

import json
import urllib.request

import pytest

from reviewdesk.accounts.services import token_create
from tests.e2e.conftest import http, wait_for_run
from tests.e2e.test_accessibility import audit
from tests.e2e.test_desk_review import browser, log_in, submit  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

THREE_TURNS = [
    {"content": "Ada is on gold."},
    {"content": "It renews in May."},
    {"content": "Bob is on silver."},
]


@pytest.fixture
def carol_token(personas) -> str:
    personas.carol.set_password("carol-password")
    personas.carol.save()
    return token_create(user=personas.carol, scopes=["submit"])[1]


def stream_statuses(url: str, token: str, after: int, until: str, count: int) -> list[tuple[str, bool]]:
    """Read the run's SSE stream from `after` until `count` run.updated events, the last `until`."""
    request = urllib.request.Request(f"{url}?after={after}", headers={"Authorization": f"Bearer {token}"})
    seen: list[tuple[str, bool]] = []
    with urllib.request.urlopen(request, timeout=30) as response:
        for raw in response:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            message = json.loads(line[len("data: ") :])
            if message["type"] == "run.updated":
                seen.append((message["data"]["status"], "follow_up" in message["data"]))
            if len(seen) >= count and seen[-1][0] == until:
                return seen
    return seen


def test_a_follow_up_runs_again_on_a_real_worker_and_the_stream_and_page_show_it(
    live_stack,
    carol_token,
    browser,  # noqa: F811
):
    run_id = submit(live_stack, carol_token, THREE_TURNS, text="Which plan is Ada on?")
    assert wait_for_run(live_stack, carol_token, run_id)["output"] == "Ada is on gold."
    _, events = http("GET", f"{live_stack.url}/api/v1/runs/{run_id}/events", token=carol_token)
    seq = events["results"][-1]["seq"]

    status, body = http(
        "POST",
        f"{live_stack.url}/api/v1/runs/{run_id}/messages",
        token=carol_token,
        body={"input": "Renewal?"},
    )
    assert status == 201, body
    finished = wait_for_run(live_stack, carol_token, run_id, "succeeded")
    assert finished["output"] == "It renews in May."
    assert [a["number"] for a in finished["attempts"]] == [1, 2]
    # Clients following the run see it go active again, then end again.
    streamed = stream_statuses(
        f"{live_stack.url}/api/v1/runs/{run_id}/stream", carol_token, seq, "succeeded", 3
    )
    assert streamed == [("queued", True), ("running", False), ("succeeded", False)]
    again, problem = http(
        "POST", f"{live_stack.url}/api/v1/runs/{run_id}/messages", token=carol_token, body={"input": "x"}
    )
    assert again == 201, problem  # a succeeded run takes the next one too

    wait_for_run(live_stack, carol_token, run_id, "succeeded")
    page = log_in(browser, live_stack, "carol", f"/runs/{run_id}/")
    page.goto(f"{live_stack.url}/runs/{run_id}/")
    assert "Renewal?" in page.inner_text("#turn-1")
    assert "It renews in May." in page.inner_text("#turn-1")
    assert "Bob is on silver." in page.inner_text("#turn-2")
    page.fill("#follow-up-input", "Thanks!")
    page.click("#post-follow-up")
    page.wait_for_selector(".flash.success")
    wait_for_run(live_stack, carol_token, run_id, "succeeded")
    page.reload()
    assert "Thanks!" in page.inner_text("#turn-3")
    assert "Done." in page.inner_text("#turn-3")  # the script ran out: the scripted model says so
    found: dict[str, list[dict]] = {}
    audit(page, "run-thread", found)

    # The tokens page: create a token (shown once) that works, then revoke it.
    page.goto(f"{live_stack.url}/tokens/")
    page.fill("#token-name", "laptop")
    page.check("input[name=scopes][value=submit]")
    page.select_option("#token-expiry", "30")
    page.click("#create-token button[type=submit]")
    secret = page.inner_text("#new-token-secret").strip()
    assert http("GET", f"{live_stack.url}/api/v1/runs", token=secret)[0] == 200
    audit(page, "tokens", found)
    page.goto(f"{live_stack.url}/tokens/")
    assert secret not in page.content()
    page.click("#tokens tr:has-text('laptop') button:has-text('Revoke')")
    page.wait_for_selector(".flash.success")
    assert http("GET", f"{live_stack.url}/api/v1/runs", token=secret)[0] == 401

    page.goto(f"{live_stack.url}/webhooks/")
    audit(page, "webhooks", found)
    assert found == {name: [] for name in found}, found  # axe: no violation of any impact
