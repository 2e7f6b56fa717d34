"""Per-token rate limits on submit and decide: 429 `throttled` with Retry-After, counted in
the real Redis (the `throttle` cache), each token its own budget."""

from __future__ import annotations

import contextvars

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import AsyncClient

from reviewdesk.accounts.services import token_create
from reviewdesk.api.throttling import DecideThrottle, throttle_cache

pytestmark = pytest.mark.django_db
PREFIX = settings.CACHES["throttle"]["KEY_PREFIX"]  # this run's own (tests/pytest_env.py)


def submit(client):
    body = {
        "agent": "demo",
        "input": "hello",
        "model": {"provider": "scripted", "script": [{"content": "hi"}]},
    }
    return client.post("/api/v1/runs", body, format="json")


def test_carols_third_submit_in_a_minute_is_429_with_retry_after_and_her_other_token_still_submits(
    personas, api_as, settings, redis_client
):
    settings.DESK_RATE_SUBMIT = "2/min"
    carol = api_as(personas.carol, "submit")
    assert [submit(carol).status_code for _ in range(2)] == [201, 201]
    refused = submit(carol)
    assert refused.status_code == 429
    assert refused["Content-Type"] == "application/problem+json"
    assert refused.json()["code"] == "throttled"
    assert 0 < int(refused["Retry-After"]) <= 60
    assert carol.get("/api/v1/runs").status_code == 200  # reading is not counted
    assert submit(api_as(personas.carol, "submit")).status_code == 201  # another token, its own budget
    assert any(redis_client.scan_iter(f"{PREFIX}:*submit:token:*"))  # counted in Redis


def test_decisions_are_limited_per_token(interrupted_run, personas, api_as, settings):
    settings.DESK_RATE_DECIDE = "1/min"
    _, approval = interrupted_run()
    alice = api_as(personas.alice, "review")
    path = f"/api/v1/approvals/{approval.id}/decision"
    bad = {"verdict": "approve", "checkpoint_id": "not-a-uuid"}
    assert alice.post(path, bad, format="json").status_code == 422  # counted, though refused
    refused = alice.post(
        path, {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id)}, format="json"
    )
    assert refused.status_code == 429 and refused.json()["code"] == "throttled"
    approval.refresh_from_db()
    assert approval.status == "pending"  # the throttled decision changed nothing


def test_an_empty_rate_turns_the_limit_off(settings):
    settings.DESK_RATE_DECIDE = ""
    assert DecideThrottle().rate is None


@pytest.mark.django_db(transaction=True)  # the ASGI handler runs the view in a thread of its own
def test_the_limit_is_counted_on_one_redis_connection_however_many_asgi_requests(personas, redis_client):
    """Under ASGI each request runs in a context of its own, where Django's `caches` hands out
    a new cache object (Django ticket #35651): a RedisCache made afresh would open a new
    connection for every POST. Ten POSTs through Django's ASGI handler open at most one."""
    _, raw = token_create(user=personas.carol, scopes=["submit"])
    client, bearer = AsyncClient(), {"Authorization": f"Bearer {raw}"}

    def post():
        # As a server runs each connection: in a context of its own, which inherits nothing.
        request = async_to_sync(client.post)
        return contextvars.Context().run(
            request, "/api/v1/runs", {}, content_type="application/json", headers=bearer
        )

    post()  # the process's first connection

    def connections_opened() -> int:
        return redis_client.info("stats")["total_connections_received"]

    before = connections_opened()
    statuses = [post().status_code for _ in range(10)]
    assert statuses == [422] * 10  # each refused for its empty body, after the limit counted it
    keys = list(redis_client.scan_iter(f"{PREFIX}:*submit:token:*"))
    assert len(keys) == 1
    assert len(throttle_cache().get(keys[0].decode().split(":", 2)[2])) == 11  # all counted, in one list
    assert connections_opened() - before <= 1


def test_a_change_of_caches_gives_the_throttle_the_new_configuration(settings):
    first = throttle_cache()
    assert throttle_cache() is first  # one per process
    settings.CACHES = {**settings.CACHES, "throttle": {**settings.CACHES["throttle"], "KEY_PREFIX": "other"}}
    assert throttle_cache() is not first and throttle_cache().key_prefix == "other"


def test_webhook_re_sends_are_limited_per_token_with_retry_after(personas, api_as, settings):
    """Each re-send queues a new delivery (up to DESK_WEBHOOK_MAX_ATTEMPTS POSTs to the
    receiver): without a limit of its own, a loop of re-sends is a flood the desk sends for you."""
    from reviewdesk.webhooks.models import WebhookDelivery, WebhookEndpoint

    settings.DESK_RATE_RESEND = "2/min"
    endpoint = WebhookEndpoint.objects.create(
        owner=personas.carol, url="https://hooks.example.com/desk", events=["run.failed"]
    )
    original = WebhookDelivery.objects.create(endpoint=endpoint, event_type="run.failed", body="{}")
    url = f"/api/v1/webhooks/{endpoint.id}/deliveries/{original.id}/resend"
    carol = api_as(personas.carol, "submit")
    assert [carol.post(url).status_code for _ in range(2)] == [202, 202]
    refused = carol.post(url)
    assert refused.status_code == 429, refused.content
    assert refused["Content-Type"] == "application/problem+json"
    assert refused.json()["code"] == "throttled"
    assert 0 < int(refused["Retry-After"]) <= 60
    assert WebhookDelivery.objects.filter(resend_of=original).count() == 2  # the refused one sent nothing
    assert carol.get(f"/api/v1/webhooks/{endpoint.id}/deliveries").status_code == 200  # reads are free
    assert api_as(personas.carol, "submit").post(url).status_code == 202  # another token, its own budget


def test_the_re_send_limit_has_a_default_and_an_empty_rate_turns_it_off(settings):
    from reviewdesk.api.throttling import ResendThrottle

    del settings.DESK_RATE_RESEND  # as when the deployment sets nothing
    assert ResendThrottle().rate == "30/min"
    settings.DESK_RATE_RESEND = ""
    assert ResendThrottle().rate is None
