"""Webhooks: signed deliveries to a real receiver by a real worker, retries, disabling,
re-sending, address checks and who may do what."""

from __future__ import annotations

import json
import threading

import pytest
from django.utils import timezone

from reviewdesk.accounts.roles import SUBMITTERS
from reviewdesk.events.models import DeskEvent
from reviewdesk.webhooks.models import DispatchCursor, WebhookDelivery, WebhookEndpoint
from reviewdesk.webhooks.services import webhook_deliver, webhooks_dispatch
from tests.conftest import SEND_EMAIL_SCRIPT, make_user
from tests.reviewdesk.webhooks.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def submit(client) -> str:
    response = client.post(
        "/api/v1/runs",
        {
            "agent": "demo",
            "input": "Tell Ada her refund is on its way.",
            "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def register(client, url, *events):
    return client.post("/api/v1/webhooks", {"url": url, "events": list(events)}, format="json")


def test_carol_receives_a_signed_delivery_when_her_run_needs_approval(
    personas, api_as, receiver, celery_worker
):
    carol = api_as(personas.carol, "submit")
    created = register(carol, receiver.url, "run.input_required")
    assert created.status_code == 201, created.json()
    secret = created.json()["secret"]
    run_id = submit(carol)

    (request,) = receiver.wait_for(1)
    assert receiver.verified(request, secret)
    assert not receiver.verified(request, secret + "x")
    body = json.loads(request.body)
    assert (body["type"], body["run"], body["data"]["status"]) == (
        "run.input_required",
        run_id,
        "input_required",
    )
    assert request.headers["Desk-Event"] == "run.input_required"

    hook = created.json()["id"]
    delivered = wait_for(
        lambda: (
            (page := carol.get(f"/api/v1/webhooks/{hook}/deliveries").json()["results"])
            and page[0]["status"] == "delivered"
            and page
        )
    )
    assert delivered[0]["attempts"][0]["status_code"] == 200
    # The secret was shown once: neither the list nor the deliveries carry it.
    assert secret not in carol.get("/api/v1/webhooks").content.decode()
    assert secret not in carol.get(f"/api/v1/webhooks/{hook}/deliveries").content.decode()


def test_a_failing_receiver_is_retried_with_backoff_then_disabled_and_a_resend_revives_it(
    personas, api_as, receiver, celery_worker, settings
):
    settings.DESK_WEBHOOK_MAX_ATTEMPTS = 3
    settings.DESK_WEBHOOK_DISABLE_AFTER = 2
    receiver.status = 500
    carol = api_as(personas.carol, "submit")
    hook = register(carol, receiver.url, "run.input_required", "run.cancelled").json()["id"]
    run_id = submit(carol)
    receiver.wait_for(3)  # the first delivery, three attempts
    assert carol.post(f"/api/v1/runs/{run_id}/cancel", format="json").status_code == 200
    requests = receiver.wait_for(6)

    first = [r.at for r in requests[:3]]
    assert first[1] - first[0] >= 0.2 and first[2] - first[1] >= 0.4  # 0.2 s, then doubled
    endpoint = wait_for(lambda: carol.get("/api/v1/webhooks").json()["results"][0]["disabled_at"] and True)
    assert endpoint
    listed = carol.get("/api/v1/webhooks").json()["results"][0]
    assert "2 deliveries in a row failed" in listed["disabled_reason"]
    deliveries = carol.get(f"/api/v1/webhooks/{hook}/deliveries").json()["results"]
    assert [d["status"] for d in deliveries] == ["failed", "failed"]
    assert [a["status_code"] for a in deliveries[0]["attempts"]] == [500, 500, 500]

    # A third run event is not sent to a disabled endpoint, nor made a delivery by the sweep's
    # dispatch (which reads the log whether or not an event's commit woke it): with another
    # endpoint live, so that the dispatch does read the event, not skip a log nobody listens to.
    # Proved by the dispatch cursor, not by waiting a while: once the worker has run the third
    # run to its question (its event committed) and a dispatch has moved the cursor past that
    # event, any delivery it made would be a row by now; there is none, so nothing can be sent.
    register(carol, receiver.url + "?decided", "approval.decided")
    third = submit(carol)
    wait_for(lambda: carol.get(f"/api/v1/runs/{third}").json()["status"] == "input_required")
    seq = DeskEvent.objects.filter(run_id=third).latest("id").id
    webhooks_dispatch()  # waits for a dispatch the event's commit started, if one holds the cursor
    assert DispatchCursor.objects.get().seq >= seq
    assert WebhookDelivery.objects.count() == 2  # the first two runs': none for any endpoint since
    assert WebhookDelivery.objects.filter(endpoint_id=hook).count() == 2
    assert len(receiver.requests) == 6  # both deliveries failed for good: none is sent again

    receiver.status = 204
    resent = carol.post(f"/api/v1/webhooks/{hook}/deliveries/{deliveries[-1]['id']}/resend", format="json")
    assert resent.status_code == 202, resent.json()
    receiver.wait_for(7)
    assert json.loads(receiver.requests[6].body) == json.loads(receiver.requests[0].body)

    def listed_hook():
        return next(row for row in carol.get("/api/v1/webhooks").json()["results"] if row["id"] == hook)

    revived = wait_for(lambda: (row := listed_hook())["disabled_at"] is None and row)
    assert (revived["consecutive_failures"], revived["disabled_reason"]) == (0, None)
    again = carol.get(f"/api/v1/webhooks/{hook}/deliveries").json()["results"][0]
    assert (again["status"], again["resend_of"]) == ("delivered", deliveries[-1]["id"])


def test_a_private_address_is_refused_without_the_setting(personas, api_as, settings):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = False
    carol = api_as(personas.carol, "submit")
    for url in (
        "http://127.0.0.1:9/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest",
        "http://[::1]/",
    ):
        response = register(carol, url, "run.succeeded")
        assert response.status_code == 422, (url, response.json())
        assert response.json()["code"] == "invalid" and "url" in response.json()["errors"]
    assert WebhookEndpoint.objects.count() == 0


@pytest.mark.parametrize(
    "host",
    [
        "64:ff9b::a00:1",
        "64:ff9b:1::a00:1",
        "2002:7f00:1::",
        "::127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:0:a00:1",
        "ff02::1",
        "::ffff:224.0.0.1",
        "fec0::1",
    ],
    ids=[
        "NAT64 to 10.0.0.1",
        "local NAT64",
        "6to4 of 127.0.0.1",
        "IPv4-compatible",
        "IPv4-mapped",
        "IPv4-translated (SIIT) of 10.0.0.1",
        "every host on the link (multicast)",
        "IPv4-mapped multicast",
        "site-local",
    ],
)
def test_an_ipv6_address_that_reaches_a_private_ipv4_one_is_refused(host, settings):
    """Python calls the first four global; a translator or tunnel takes them to the inside. And
    Python calls some multicast groups and the old site-local range global too."""
    from reviewdesk.webhooks.addresses import url_refusal

    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = False
    assert "resolves to a non-public address" in (url_refusal(f"http://[{host}]/hook") or "")


def test_a_host_that_turned_private_is_refused_at_delivery_time(
    personas, api_as, receiver, celery_worker, settings
):
    carol = api_as(personas.carol, "submit")
    hook = register(carol, receiver.url, "run.input_required").json()["id"]
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = False  # as if the name now resolved to 127.0.0.1
    submit(carol)
    delivery = wait_for(
        lambda: (
            WebhookDelivery.objects.filter(endpoint_id=hook, status="failed")
            .prefetch_related("attempt_rows")
            .first()
        )
    )
    (attempt,) = delivery.attempt_rows.all()
    assert attempt.error.startswith("refused:") and attempt.status_code is None
    assert receiver.requests == []


def test_only_the_runs_owner_hears_of_it_and_only_the_owner_sees_the_webhook(
    personas, api_as, receiver, celery_worker
):
    sam = api_as(make_user("sam", SUBMITTERS), "submit")
    sams = register(sam, receiver.url, "run.input_required").json()["id"]
    carol = api_as(personas.carol, "submit")
    carols_receiver_hook = register(carol, receiver.url + "?carol", "run.input_required").json()["id"]
    submit(carol)
    (request,) = receiver.wait_for(1)
    assert request.headers["Desk-Event"] == "run.input_required"
    # Not "nothing else arrived within a moment": carol's delivery was made in the dispatch
    # that moved the cursor past the event, as any delivery to sam would have been; it is the
    # event's only delivery, and once it is delivered nothing else can reach the receiver.
    (delivery,) = WebhookDelivery.objects.all()
    assert str(delivery.endpoint_id) == carols_receiver_hook
    assert DispatchCursor.objects.get().seq >= delivery.event_seq
    wait_for(lambda: WebhookDelivery.objects.filter(pk=delivery.pk, status="delivered").exists())
    assert len(receiver.requests) == 1
    assert WebhookDelivery.objects.filter(endpoint_id=sams).count() == 0

    assert sam.get(f"/api/v1/webhooks/{carols_receiver_hook}/deliveries").status_code == 404
    delivery = WebhookDelivery.objects.get(endpoint_id=carols_receiver_hook)
    resend = sam.post(
        f"/api/v1/webhooks/{carols_receiver_hook}/deliveries/{delivery.id}/resend", format="json"
    )
    assert resend.status_code == 404
    assert [h["id"] for h in sam.get("/api/v1/webhooks").json()["results"]] == [sams]


def test_registering_needs_the_submit_scope_and_known_event_types(personas, api_as, settings):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    reviewer = api_as(personas.alice, "review")
    refused = register(reviewer, "http://127.0.0.1:9/", "run.succeeded")
    assert refused.status_code == 403 and refused.json()["code"] == "missing_scope"
    assert reviewer.get("/api/v1/webhooks").status_code == 403
    carol = api_as(personas.carol, "submit")
    assert register(carol, "http://127.0.0.1:9/", "run.exploded").status_code == 422
    assert register(carol, "http://127.0.0.1:9/").status_code == 422
    assert register(carol, "ftp://127.0.0.1/", "run.failed").status_code == 422
    assert WebhookEndpoint.objects.count() == 0


def _pending_delivery(owner, url) -> WebhookDelivery:
    endpoint = WebhookEndpoint.objects.create(owner=owner, url=url, events=["run.succeeded"], secret="s")
    return WebhookDelivery.objects.create(endpoint=endpoint, event_type="run.succeeded", body="{}")


def test_a_delivery_goes_to_the_address_checked_never_to_a_second_lookup(
    personas, receiver, settings, monkeypatch
):
    """DNS rebinding: a name may answer the check with one address and the request with
    another. The name resolves once (the check), the request goes to that address, and the
    receiver still sees the name in Host. The resolver is the only stand-in here."""
    import socket

    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    port = int(receiver.url.rsplit(":", 1)[1].split("/")[0])
    real_getaddrinfo, lookups = socket.getaddrinfo, []

    def resolver(host, *args, **kwargs):
        if host == "hooks.rebind.test":
            lookups.append(host)
            return real_getaddrinfo("127.0.0.1", *args, **kwargs)
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    delivery = _pending_delivery(personas.carol, f"http://hooks.rebind.test:{port}/hook")
    assert webhook_deliver(delivery_id=delivery.id) == "delivered"
    assert lookups == ["hooks.rebind.test"]  # the check's lookup only
    (request,) = receiver.requests
    assert request.headers["Host"] == f"hooks.rebind.test:{port}"


def test_a_delivery_still_queued_when_its_endpoint_is_disabled_is_not_sent(personas, receiver, settings):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    delivery = _pending_delivery(personas.carol, receiver.url)
    WebhookEndpoint.objects.filter(pk=delivery.endpoint_id).update(disabled_at=timezone.now())
    assert webhook_deliver(delivery_id=delivery.id) == "endpoint disabled"
    delivery.refresh_from_db()
    assert delivery.status == "failed" and receiver.requests == []


def test_a_deactivated_owner_is_sent_nothing_more_queued_or_new(personas, receiver, settings):
    """Offboarding ends a user's logins, tokens, streams and sockets; their webhooks too: a
    delivery queued before is not sent, and no new one is made for their runs' events."""
    from django.db import transaction

    from reviewdesk.events.services import event_emit
    from reviewdesk.runs.services import run_submit

    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    queued = _pending_delivery(personas.carol, receiver.url)
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="x",
        model={"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
    )
    personas.carol.is_active = False
    personas.carol.save()
    assert webhook_deliver(delivery_id=queued.id) == "owner deactivated"
    with transaction.atomic():
        event_emit(type="run.updated", data={"status": "succeeded"}, run_id=run.id)
    webhooks_dispatch()  # as the sweep's would, whether or not the event's commit woke one
    assert WebhookDelivery.objects.exclude(pk=queued.pk).count() == 0
    assert receiver.requests == []


def test_a_duplicated_delivery_task_sends_once(personas, receiver, settings):
    """Two workers handed the same delivery (a redelivered message): the second arrives while
    the first's request is in flight, reads the claimed row, and is turned away by the lease."""
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    receiver.delay = 1.0
    delivery = _pending_delivery(personas.carol, receiver.url)
    outcomes = []
    first = threading.Thread(target=lambda: outcomes.append(webhook_deliver(delivery_id=delivery.id)))
    first.start()
    receiver.wait_for(1)  # the first worker's request is at the receiver, not answered yet
    outcomes.append(webhook_deliver(delivery_id=delivery.id))
    first.join()
    assert outcomes == ["skipped", "delivered"]
    assert len(receiver.requests) == 1


def test_a_url_with_credentials_and_a_twenty_first_webhook_are_refused(personas, api_as, settings):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    carol = api_as(personas.carol, "submit")
    with_password = register(carol, "http://user:pw@127.0.0.1:9/hook", "run.failed")
    assert with_password.status_code == 422 and "credentials" in with_password.json()["detail"]
    for _ in range(20):
        WebhookEndpoint.objects.create(owner=personas.carol, url="http://127.0.0.1:9/", events=["run.failed"])
    one_more = register(carol, "http://127.0.0.1:9/hook", "run.failed")
    assert one_more.status_code == 422 and "at most 20" in one_more.json()["detail"]
    assert WebhookEndpoint.objects.count() == 20


def test_an_idempotency_key_registers_one_webhook_and_re_sends_once(personas, api_as, settings):
    """`Idempotency-Key` on a POST replays the first response (docs/api.md): a client that
    retries a registration after a dropped answer must not get a second webhook, nor its
    receiver a second copy of a re-sent delivery."""
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    carol = api_as(personas.carol, "submit")
    body = {"url": "http://127.0.0.1:9/hook", "events": ["run.failed"]}
    first = carol.post("/api/v1/webhooks", body, format="json", HTTP_IDEMPOTENCY_KEY="hook-1")
    again = carol.post("/api/v1/webhooks", body, format="json", HTTP_IDEMPOTENCY_KEY="hook-1")
    assert first.status_code == again.status_code == 201, again.content
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert WebhookEndpoint.objects.count() == 1
    other = carol.post(
        "/api/v1/webhooks",
        {**body, "events": ["run.succeeded"]},
        format="json",
        HTTP_IDEMPOTENCY_KEY="hook-1",
    )
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"

    endpoint = WebhookEndpoint.objects.get()
    original = WebhookDelivery.objects.create(endpoint=endpoint, event_type="run.failed", body="{}")
    url = f"/api/v1/webhooks/{endpoint.id}/deliveries/{original.id}/resend"
    resent = [carol.post(url, HTTP_IDEMPOTENCY_KEY="resend-1") for _ in range(2)]
    assert [r.status_code for r in resent] == [202, 202]
    assert resent[1].json() == resent[0].json()
    assert WebhookDelivery.objects.filter(resend_of=original).count() == 1
