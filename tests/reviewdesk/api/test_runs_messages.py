"""POST /api/v1/runs/{id}/messages: a follow-up continues a succeeded run as the next turn of
its thread; 409 while the run is active or after a failure; only its submitter may post.

The task bodies run in this process (`run_execute`), as in the other API tests."""

from __future__ import annotations

import pytest

from reviewdesk.accounts.roles import SUBMITTERS
from reviewdesk.events.models import DeskEvent
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import Message, Run, RunStatus
from reviewdesk.runs.services import run_submit
from reviewdesk.webhooks.models import WebhookDelivery
from reviewdesk.webhooks.services import webhook_register, webhooks_dispatch
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

TWO_TURNS = [{"content": "Ada is on the gold plan."}, {"content": "Yes, it renews in May."}]


@pytest.fixture
def finished_run(personas):
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Which plan is Ada on?",
        model={"provider": "scripted", "script": TWO_TURNS},
    )
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    return run


def follow_up(client, run, text="Does it renew soon?", **headers):
    return client.post(f"/api/v1/runs/{run.id}/messages", {"input": text}, format="json", **headers)


def test_a_follow_up_continues_the_same_conversation_as_a_new_turn(finished_run, personas, api_as):
    run = finished_run
    seq = DeskEvent.objects.order_by("-id").first().id
    response = follow_up(api_as(personas.carol, "submit"), run)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "queued" and body["output"] is None
    assert [(t["number"], t["input"], t["posted_by"]) for t in body["thread"]] == [
        (1, "Does it renew soon?", "carol")
    ]
    assert body["thread"][0]["position"] == 3  # after system, user, the first answer

    # The worker picks it up like a submitted run: a new attempt from the last checkpoint.
    run_execute(run_id=run.id, worker="in-process")
    run.refresh_from_db()
    assert (run.status, run.output) == (RunStatus.SUCCEEDED, "Yes, it renews in May.")
    assert list(run.attempts.values_list("number", "status")) == [(1, "released"), (2, "released")]
    log = [(m.role, m.body.get("content")) for m in Message.objects.filter(run=run).order_by("position")]
    assert log[1:] == [
        ("user", "Which plan is Ada on?"),
        ("assistant", "Ada is on the gold plan."),
        ("user", "Does it renew soon?"),
        ("assistant", "Yes, it renews in May."),
    ]
    # Events (and with them the socket, the SSE streams and webhooks) see it go active again.
    statuses = [(e.data["status"], "follow_up" in e.data) for e in DeskEvent.objects.filter(id__gt=seq)]
    assert statuses == [("queued", True), ("running", False), ("succeeded", False)]


def test_the_follow_up_is_audited_and_reaches_webhooks_as_run_follow_up(
    finished_run, personas, api_as, settings
):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    webhook_register(owner=personas.carol, url="http://127.0.0.1:9/hook", events=["run.follow_up"])
    assert follow_up(api_as(personas.carol, "submit"), finished_run).status_code == 201
    webhooks_dispatch()  # what the task sent as the event committed does
    (delivery,) = WebhookDelivery.objects.all()
    assert delivery.event_type == "run.follow_up"
    from reviewdesk.audit.models import AuditEvent

    audited = AuditEvent.objects.filter(action="run.followed_up", subject_id=str(finished_run.id)).get()
    assert (audited.actor_name, audited.data["number"]) == ("carol", 1)


def test_a_follow_up_while_the_run_is_active_is_409_and_changes_nothing(interrupted_run, personas, api_as):
    run, _ = interrupted_run()
    before = Message.objects.filter(run=run).count()
    response = follow_up(api_as(personas.carol, "submit"), run)
    assert response.status_code == 409 and response.json()["code"] == "active"
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED
    assert Message.objects.filter(run=run).count() == before and not run.follow_ups.exists()


def test_a_cancelled_run_takes_no_follow_up_it_is_retried_first(interrupted_run, personas, api_as):
    run, _ = interrupted_run()
    carol = api_as(personas.carol, "submit")
    assert carol.post(f"/api/v1/runs/{run.id}/cancel").status_code == 200
    response = follow_up(carol, run)
    assert response.status_code == 409 and response.json()["code"] == "not_succeeded"
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_only_the_submitter_may_post(finished_run, personas, api_as):
    run = finished_run
    # A reviewer who sees the run, and an admin, may not speak for the submitter.
    alice = follow_up(api_as(personas.alice, "submit", "review"), run)
    assert alice.status_code == 403 and alice.json()["code"] == "forbidden"
    assert follow_up(api_as(personas.admin), run).status_code == 403
    # An outsider and another submitter do not even see it.
    assert follow_up(api_as(personas.olivia, "submit"), run).status_code == 404
    dave = make_user("dave", SUBMITTERS)
    assert follow_up(api_as(dave, "submit"), run).status_code == 404
    # The submitter's token needs the submit scope.
    scoped = follow_up(api_as(personas.carol, "review"), run)
    assert scoped.status_code == 403 and scoped.json()["code"] == "missing_scope"
    assert not run.follow_ups.exists()


def test_a_submitter_who_lost_the_role_may_not_post(finished_run, personas, api_as):
    carol = api_as(personas.carol, "submit")
    personas.carol.groups.clear()
    response = follow_up(carol, finished_run)
    assert response.status_code == 403 and not finished_run.follow_ups.exists()


def test_a_follow_up_refuses_unknown_fields_and_an_empty_input(finished_run, personas, api_as):
    carol = api_as(personas.carol, "submit")
    extra = carol.post(f"/api/v1/runs/{finished_run.id}/messages", {"input": "x", "to": "y"}, format="json")
    assert extra.status_code == 422 and extra.json()["code"] == "invalid"
    assert follow_up(carol, finished_run, text="").status_code == 422
    assert not finished_run.follow_ups.exists()


@pytest.mark.parametrize("value", [42, 4.5])
def test_a_follow_up_whose_input_is_no_string_is_422_like_a_submit(finished_run, personas, api_as, value):
    """DRF's CharField reads a number as its str(): {"input": 42} became the message "42",
    where POST /api/v1/runs refuses the same field (422 `invalid`, naming it)."""
    response = follow_up(api_as(personas.carol, "submit"), finished_run, text=value)
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "invalid" and "input" in response.json()["errors"]
    assert not finished_run.follow_ups.exists()


def test_a_repeated_idempotency_key_posts_once(finished_run, personas, api_as):
    carol = api_as(personas.carol, "submit")
    first = follow_up(carol, finished_run, HTTP_IDEMPOTENCY_KEY="f1")
    again = follow_up(carol, finished_run, HTTP_IDEMPOTENCY_KEY="f1")
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert finished_run.follow_ups.count() == 1
