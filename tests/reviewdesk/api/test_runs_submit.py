"""POST /api/v1/runs: what a client sends, what it gets back, what it never changes."""

from __future__ import annotations

import pytest
from django.utils import timezone

from reviewdesk.audit.models import AuditEvent
from reviewdesk.runs.models import Run
from tests.conftest import SEND_EMAIL_SCRIPT

pytestmark = pytest.mark.django_db

VALID = {
    "agent": "demo",
    "input": "Tell Ada her refund is on its way.",
    "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
}


def submit(client, body, **headers):
    return client.post("/api/v1/runs", body, format="json", **headers)


def test_it_creates_a_queued_run_and_enqueues_it_after_commit(
    personas, api_as, task_queue, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = submit(api_as(personas.carol, "submit"), VALID)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "queued"
    assert body["agent"] == "demo"
    assert response["Location"] == f"/api/v1/runs/{body['id']}"
    run = Run.objects.get(pk=body["id"])
    assert run.submitted_by == personas.carol
    assert task_queue.length() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**VALID, "agent": "nope"}, "agent"),
        (
            {**VALID, "model": {"provider": "scripted", "script": [{"tool_calls": [{"name": "rm_rf"}]}]}},
            "model",
        ),
        ({**VALID, "model": {"provider": "mystery"}}, "model"),
        ({**VALID, "reviewers": ["olivia"]}, "reviewers"),
        ({**VALID, "reviewers": ["carol"]}, "reviewers"),
        ({**VALID, "approval_ttl_seconds": 0}, "approval_ttl_seconds"),
        ({**VALID, "surprise": 1}, "surprise"),
        ({"agent": "demo"}, "input"),
    ],
    ids=[
        "unknown agent",
        "unknown tool",
        "unknown provider",
        "non-reviewer reviewer",
        "self review",
        "ttl",
        "unknown field",
        "no input",
    ],
)
def test_it_refuses_bad_input_with_422_and_changes_nothing(
    personas, api_as, task_queue, django_capture_on_commit_callbacks, body, field
):
    with django_capture_on_commit_callbacks(execute=True):
        response = submit(api_as(personas.carol, "submit"), body)
    assert response.status_code == 422
    assert response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == 422 and problem["title"]
    assert field in problem["errors"]
    assert Run.objects.count() == 0
    assert AuditEvent.objects.exclude(action="token.created").count() == 0  # the client's token is audited
    assert task_queue.length() == 0


def test_without_a_model_the_demo_says_one_is_required_and_what_to_send(personas, api_as, task_queue):
    """The demo's own model is the scripted provider, whose script the submitter writes: the
    error names what to send, not a script the client never sent."""
    response = submit(api_as(personas.carol, "submit"), {"agent": "demo", "input": "Tell Ada."})
    assert response.status_code == 422
    [said] = response.json()["errors"]["model"]
    assert said.startswith("required: agent 'demo' has no model") and '"provider": "scripted"' in said
    assert Run.objects.count() == 0 and task_queue.length() == 0


def test_it_refuses_malformed_json_with_400(personas, api_as, task_queue):
    response = api_as(personas.carol, "submit").post(
        "/api/v1/runs", data=b'{"agent": "demo",', content_type="application/json"
    )
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert Run.objects.count() == 0
    assert task_queue.length() == 0


def test_it_requires_a_token_or_session(personas):
    from rest_framework.test import APIClient

    response = APIClient().post("/api/v1/runs", VALID, format="json")
    assert response.status_code == 401
    assert response.json()["title"] == "Not authenticated"


def test_it_refuses_a_token_without_the_submit_scope(personas, api_as):
    response = submit(api_as(personas.carol, "review"), VALID)
    assert response.status_code == 403
    assert Run.objects.count() == 0


def test_it_refuses_a_revoked_or_unknown_token_and_a_deactivated_users(personas, api_as):
    from rest_framework.test import APIClient

    from reviewdesk.accounts.models import ApiToken

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer rd_not-a-real-token")
    assert submit(client, VALID).status_code == 401

    revoked = api_as(personas.carol, "submit")
    assert submit(revoked, VALID).status_code == 201
    ApiToken.objects.filter(user=personas.carol).update(revoked_at=timezone.now())
    assert submit(revoked, VALID).status_code == 401

    deactivated = api_as(personas.carol, "submit")
    assert submit(deactivated, VALID).status_code == 201
    personas.carol.is_active = False
    personas.carol.save()
    assert submit(deactivated, VALID).status_code == 401
    assert Run.objects.count() == 2


def test_an_idempotency_key_replays_the_first_response_and_creates_one_run(personas, api_as):
    client = api_as(personas.carol, "submit")
    first = submit(client, VALID, HTTP_IDEMPOTENCY_KEY="k-1")
    again = submit(client, VALID, HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert Run.objects.count() == 1


def test_a_replayed_submit_carries_the_first_responses_location(personas, api_as):
    """The replay is the first response: a client that lost the 201 and retries reads the new
    run's address where the first one said it, not a 201 without it."""
    client = api_as(personas.carol, "submit")
    first = submit(client, VALID, HTTP_IDEMPOTENCY_KEY="k-loc")
    again = submit(client, VALID, HTTP_IDEMPOTENCY_KEY="k-loc")
    assert again["Idempotent-Replayed"] == "true"
    assert again.get("Location") == first["Location"] == f"/api/v1/runs/{first.json()['id']}"


@pytest.mark.parametrize(
    "key",
    ["", " ", "   ", "\t", " \t ", "k" * 201],
    ids=["empty", "a space", "spaces", "a tab", "blanks", "201"],
)
def test_an_idempotency_key_that_is_empty_after_trimming_or_too_long_is_400_and_changes_nothing(
    personas, api_as, key
):
    """A key of blanks names nothing (HTTP strips a field's surrounding whitespace): it must be
    refused like an empty one, not pin every blank-keyed request of this client to one answer."""
    from reviewdesk.api.models import IdempotencyRecord

    response = submit(api_as(personas.carol, "submit"), VALID, HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 400, response.json()
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["code"] == "bad_idempotency_key"
    assert "Idempotency-Key" in response.json()["detail"]
    assert Run.objects.count() == 0 and IdempotencyRecord.objects.count() == 0


def test_an_idempotency_key_is_read_without_its_surrounding_blanks(personas, api_as):
    client = api_as(personas.carol, "submit")
    first = submit(client, VALID, HTTP_IDEMPOTENCY_KEY="k-trim")
    again = submit(client, VALID, HTTP_IDEMPOTENCY_KEY="  k-trim\t")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again["Idempotent-Replayed"] == "true" and again.json()["id"] == first.json()["id"]
    assert Run.objects.count() == 1


def test_a_refused_request_does_not_pin_its_key_but_a_success_is_replayed(personas, api_as):
    """Stripe's rule: a request refused before it did anything saves no result, so the client
    fixes it and sends it again under the same key. Only a success is replayed."""
    from reviewdesk.api.models import IdempotencyRecord

    client = api_as(personas.carol, "submit")
    refused = submit(client, {**VALID, "agent": "no-such-agent"}, HTTP_IDEMPOTENCY_KEY="k-fix")
    assert refused.status_code == 422 and refused.json()["code"] == "invalid"
    assert IdempotencyRecord.objects.count() == 0  # nothing pinned
    fixed = submit(client, VALID, HTTP_IDEMPOTENCY_KEY="k-fix")
    assert fixed.status_code == 201, fixed.json()  # not idempotency_key_reused, not the 422 again
    assert "Idempotent-Replayed" not in fixed
    again = submit(client, VALID, HTTP_IDEMPOTENCY_KEY="k-fix")
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == fixed.json()["id"] and Run.objects.count() == 1


def test_an_idempotency_key_reused_with_another_body_is_422(personas, api_as):
    client = api_as(personas.carol, "submit")
    submit(client, VALID, HTTP_IDEMPOTENCY_KEY="k-2")
    response = submit(client, {**VALID, "input": "something else"}, HTTP_IDEMPOTENCY_KEY="k-2")
    assert response.status_code == 422
    assert response.json()["code"] == "idempotency_key_reused"
    assert Run.objects.count() == 1


def test_idempotency_keys_are_scoped_to_the_client(personas, api_as):
    submit(api_as(personas.carol, "submit"), VALID, HTTP_IDEMPOTENCY_KEY="shared")
    response = submit(api_as(personas.admin, "submit"), VALID, HTTP_IDEMPOTENCY_KEY="shared")
    assert response.status_code == 201
    assert Run.objects.count() == 2


def test_an_outsider_cannot_see_someone_elses_run(personas, api_as):
    run_id = submit(api_as(personas.carol, "submit"), VALID).json()["id"]
    outsider = api_as(personas.olivia, "submit")
    assert outsider.get(f"/api/v1/runs/{run_id}").status_code == 404
    assert outsider.get("/api/v1/runs").json()["results"] == []
    assert api_as(personas.alice, "review").get(f"/api/v1/runs/{run_id}").status_code == 200


def test_an_outsider_or_a_reviewer_cannot_submit(personas, api_as):
    for user in (personas.olivia, personas.alice):
        response = submit(api_as(user, "submit"), VALID)
        assert response.status_code == 403
        assert "submitters" in response.json()["detail"]
    assert Run.objects.count() == 0


def test_a_reviewer_not_assigned_to_a_run_cannot_read_it_or_its_events(personas, api_as):
    run_id = submit(api_as(personas.carol, "submit"), {**VALID, "reviewers": ["bob"]}).json()["id"]
    alice = api_as(personas.alice, "review")
    assert alice.get(f"/api/v1/runs/{run_id}").status_code == 404
    assert alice.get(f"/api/v1/runs/{run_id}/events").status_code == 404
    assert run_id not in [r["id"] for r in alice.get("/api/v1/runs").json()["results"]]
    assert api_as(personas.bob, "review").get(f"/api/v1/runs/{run_id}").status_code == 200
    assert api_as(personas.admin, "audit").get(f"/api/v1/runs/{run_id}").status_code == 200


def test_a_repeat_while_the_first_is_in_flight_is_409(personas, api_as):
    from reviewdesk.api.models import IdempotencyRecord

    carol = api_as(personas.carol, "submit")
    # As if the first request were still running: its record exists, nothing finished.
    first = submit(carol, VALID, HTTP_IDEMPOTENCY_KEY="busy")
    IdempotencyRecord.objects.filter(key="busy").update(
        state="in_flight", response_status=None, response_body=None
    )
    response = submit(carol, VALID, HTTP_IDEMPOTENCY_KEY="busy")
    assert response.status_code == 409 and response.json()["code"] == "in_flight"
    assert first.status_code == 201


def test_a_key_whose_first_request_died_is_taken_over_after_the_timeout(personas, api_as, settings):
    from datetime import timedelta

    from django.utils import timezone

    from reviewdesk.api.models import IdempotencyRecord

    carol = api_as(personas.carol, "submit")
    submit(carol, VALID, HTTP_IDEMPOTENCY_KEY="died")
    Run.objects.all().delete()  # the first request's work never committed
    IdempotencyRecord.objects.filter(key="died").update(
        state="in_flight",
        response_status=None,
        response_body=None,
        created_at=timezone.now() - timedelta(seconds=settings.DESK_IDEMPOTENCY_INFLIGHT_SECONDS + 1),
    )
    response = submit(carol, VALID, HTTP_IDEMPOTENCY_KEY="died")
    assert response.status_code == 201
    assert Run.objects.count() == 1
    assert submit(carol, VALID, HTTP_IDEMPOTENCY_KEY="died").json()["id"] == response.json()["id"]


@pytest.mark.django_db(transaction=True)
def test_two_repeats_racing_to_take_over_an_abandoned_key_run_it_once(personas, api_as, settings):
    """Found in review: both repeats took the key over and each created a run."""
    import threading
    from datetime import timedelta

    from django.db import connections
    from django.utils import timezone

    from reviewdesk.api.models import IdempotencyRecord

    carol = api_as(personas.carol, "submit")
    submit(carol, VALID, HTTP_IDEMPOTENCY_KEY="race")
    Run.objects.all().delete()
    IdempotencyRecord.objects.filter(key="race").update(
        state="in_flight",
        response_status=None,
        response_body=None,
        created_at=timezone.now() - timedelta(seconds=settings.DESK_IDEMPOTENCY_INFLIGHT_SECONDS + 1),
    )
    barrier, statuses = threading.Barrier(2), []

    def repeat():
        try:
            barrier.wait()
            statuses.append(submit(carol, VALID, HTTP_IDEMPOTENCY_KEY="race").status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=repeat) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert Run.objects.count() == 1
    assert sorted(statuses) in ([201, 201], [201, 409])  # a replay of the one run, or "in flight"


def test_the_token_lookup_reads_the_users_groups_for_the_request_only(personas):
    """The API's authentication reads a user's groups with the token, and the role checks of
    that request answer from them (no query); a stream, which outlives its request, forgets
    them, so each of its scans reads the groups as they are."""
    from django.contrib.auth.models import Group
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from reviewdesk.accounts.roles import forget_group_names, group_names_of, is_reviewer, is_submitter
    from reviewdesk.accounts.rows import token_for_digest
    from reviewdesk.accounts.services import token_create, token_digest
    from reviewdesk.api.views.streams import _authenticate

    personas.alice.groups.add(Group.objects.create(name="finance"))
    _, raw = token_create(user=personas.alice, scopes=["review"], name="t")
    with CaptureQueriesContext(connection) as queries:
        user = token_for_digest(token_digest(raw)).user
        assert group_names_of(user) == {"reviewers", "finance"}
        assert is_reviewer(user) and not is_submitter(user)
    assert len(queries) == 1

    personas.alice.groups.remove(Group.objects.get(name="reviewers"))
    assert is_reviewer(user)  # this request's view of her
    forget_group_names(user)
    assert not is_reviewer(user) and group_names_of(user) == {"finance"}

    header = {b"authorization": f"Bearer {raw}".encode()}
    streamed, _ = _authenticate(header, None)
    personas.alice.groups.add(Group.objects.get(name="reviewers"))
    assert is_reviewer(streamed)  # read afresh: the stream's next scan sees the change
    personas.alice.groups.remove(Group.objects.get(name="reviewers"))
    assert not is_reviewer(streamed)
