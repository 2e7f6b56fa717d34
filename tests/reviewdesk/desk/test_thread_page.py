"""The run page shows the thread (the task, each follow-up, and what the model said after
each), and its submitter can post a follow-up from it; no one else is offered the form."""

from __future__ import annotations

import pytest
from django.test import Client

from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import RunStatus
from reviewdesk.runs.services import run_submit

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def finished_run(personas):
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Which plan is Ada on?",
        model={"provider": "scripted", "script": [{"content": "Gold."}, {"content": "In May."}]},
    )
    run_execute(run_id=run.id, worker="in-process")
    return run


def test_the_submitter_follows_up_from_the_run_page_and_the_thread_shows_both_turns(finished_run, personas):
    page = logged_in(personas.carol)
    before = page.get(f"/runs/{finished_run.id}/")
    assert [t.said for t in before.context["thread"]] == ["Which plan is Ada on?"]
    assert 'id="post-follow-up"' in before.content.decode()

    response = page.post(f"/runs/{finished_run.id}/messages/", {"input": "When does it renew?"})
    assert response.status_code == 302
    run_execute(run_id=finished_run.id, worker="in-process")
    finished_run.refresh_from_db()
    assert finished_run.status == RunStatus.SUCCEEDED

    after = page.get(f"/runs/{finished_run.id}/")
    turns = [(t.number, t.said, t.by, t.replies) for t in after.context["thread"]]
    assert turns == [
        (0, "Which plan is Ada on?", "carol", ["Gold."]),
        (1, "When does it renew?", "carol", ["In May."]),
    ]
    html = after.content.decode()
    assert 'id="turn-1"' in html and "follow-up 1" in html


def test_a_reviewer_sees_the_thread_but_is_offered_no_form_and_cannot_post(finished_run, personas):
    page = logged_in(personas.alice)
    shown = page.get(f"/runs/{finished_run.id}/")
    assert shown.status_code == 200 and 'id="post-follow-up"' not in shown.content.decode()
    page.post(f"/runs/{finished_run.id}/messages/", {"input": "sneaky"})
    assert not finished_run.follow_ups.exists()
    assert (
        logged_in(personas.olivia).post(f"/runs/{finished_run.id}/messages/", {"input": "x"}).status_code
        == 404
    )


def test_an_active_run_offers_no_form_and_refuses_a_post(interrupted_run, personas):
    run, _ = interrupted_run()
    page = logged_in(personas.carol)
    assert 'id="post-follow-up"' not in page.get(f"/runs/{run.id}/").content.decode()
    response = page.post(f"/runs/{run.id}/messages/", {"input": "hurry up"}, follow=True)
    assert "still active" in response.content.decode() and not run.follow_ups.exists()


def test_a_follow_up_holding_a_nul_is_refused_with_why_not_a_500(finished_run, personas):
    """PostgreSQL's text cannot hold U+0000: the form's message was stored as typed (a 500),
    where the API's parser refuses such a body."""
    page = logged_in(personas.carol)
    response = page.post(
        f"/runs/{finished_run.id}/messages/", {"input": "When\x00 does it renew?"}, follow=True
    )
    assert response.status_code == 200
    assert "may not hold a NUL character" in response.content.decode()
    assert not finished_run.follow_ups.exists()
