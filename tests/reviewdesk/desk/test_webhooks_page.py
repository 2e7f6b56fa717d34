"""/webhooks/: a user registers (secret shown once), lists and deletes their own webhooks, and
sees one webhook's deliveries with their attempts and re-sends one. Deliveries here are rows;
sending them to a real receiver is tests/reviewdesk/webhooks/test_webhooks.py."""

from __future__ import annotations

import pytest
from django.test import Client

from reviewdesk.audit.models import AuditEvent
from reviewdesk.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from reviewdesk.webhooks.services import webhook_register

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/hook"


@pytest.fixture(autouse=True)
def private_addresses_allowed(settings):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def a_delivery(endpoint: WebhookEndpoint, status: str = "failed") -> WebhookDelivery:
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event_type="run.succeeded", event_seq=7, body='{"id":"x"}', status=status
    )
    WebhookAttempt.objects.create(
        delivery=delivery, number=1, status_code=500, error="HTTP 500", duration_ms=12
    )
    return delivery


def test_carol_registers_a_webhook_and_sees_its_secret_once(personas):
    page = logged_in(personas.carol)
    response = page.post("/webhooks/", {"url": URL, "events": ["run.succeeded", "run.follow_up"]})
    assert response.status_code == 200
    _, secret = response.context["created"]
    assert secret.startswith("whsec_") and secret in response.content.decode()
    assert "no-store" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]
    stored = WebhookEndpoint.objects.get(owner=personas.carol)
    assert (stored.url, stored.events, stored.secret) == (URL, ["run.follow_up", "run.succeeded"], secret)
    listing = page.get("/webhooks/").content.decode()
    assert URL in listing and secret not in listing
    assert AuditEvent.objects.filter(action="webhook.created", subject_id=str(stored.id)).exists()


def test_a_bad_url_or_no_event_is_refused_with_a_reason(personas, settings):
    page = logged_in(personas.carol)
    assert page.post("/webhooks/", {"url": "ftp://x", "events": ["run.failed"]}).status_code == 422
    assert page.post("/webhooks/", {"url": URL}).status_code == 422
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = False
    refused = page.post("/webhooks/", {"url": URL, "events": ["run.failed"]})
    assert refused.status_code == 422 and "non-public address" in refused.content.decode()
    assert not WebhookEndpoint.objects.exists()


def test_the_webhook_page_shows_deliveries_with_attempts_and_a_resend_queues_one(personas):
    endpoint, _ = webhook_register(owner=personas.carol, url=URL, events=["run.succeeded"])
    delivery = a_delivery(endpoint)
    page = logged_in(personas.carol)
    shown = page.get(f"/webhooks/{endpoint.id}/").content.decode()
    assert "run.succeeded" in shown and "HTTP 500" in shown and "12 ms" in shown
    response = page.post(f"/webhooks/{endpoint.id}/deliveries/{delivery.id}/resend/")
    assert response.status_code == 302
    again = WebhookDelivery.objects.get(resend_of=delivery)
    assert (again.status, again.body) == ("pending", delivery.body)


def test_outsiders_cannot_see_resend_or_delete_anothers_webhook(personas):
    endpoint, _ = webhook_register(owner=personas.carol, url=URL, events=["run.succeeded"])
    delivery = a_delivery(endpoint)
    alice = logged_in(personas.alice)
    assert URL not in alice.get("/webhooks/").content.decode()
    assert alice.get(f"/webhooks/{endpoint.id}/").status_code == 404
    assert alice.post(f"/webhooks/{endpoint.id}/deliveries/{delivery.id}/resend/").status_code == 404
    assert alice.post(f"/webhooks/{endpoint.id}/delete/").status_code == 404
    assert WebhookEndpoint.objects.filter(pk=endpoint.pk).exists()
    assert not WebhookDelivery.objects.filter(resend_of=delivery).exists()


def test_deleting_a_webhook_is_audited_and_it_hears_nothing_more(personas):
    endpoint, _ = webhook_register(owner=personas.carol, url=URL, events=["run.succeeded"])
    response = logged_in(personas.carol).post(f"/webhooks/{endpoint.id}/delete/")
    assert response.status_code == 302
    assert not WebhookEndpoint.objects.filter(pk=endpoint.pk).exists()
    audited = AuditEvent.objects.get(action="webhook.deleted", subject_id=str(endpoint.id))
    assert audited.actor_name == "carol"


def test_a_disabled_webhook_says_so_and_why(personas):
    endpoint, _ = webhook_register(owner=personas.carol, url=URL, events=["run.succeeded"])
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
        disabled_at="2026-01-01T00:00:00Z", disabled_reason="5 deliveries in a row failed; the last: HTTP 500"
    )
    page = logged_in(personas.carol)
    assert "disabled: 5 deliveries in a row failed" in page.get("/webhooks/").content.decode()
    assert (
        "a re-send that succeeds enables it again" in page.get(f"/webhooks/{endpoint.id}/").content.decode()
    )


@pytest.fixture
def fresh_throttle_counts(redis_client, settings):
    """User ids repeat across tests (rolled-back rows): forget the re-send counts of earlier tests."""
    prefix = settings.CACHES["throttle"]["KEY_PREFIX"]

    def forget():
        for key in redis_client.scan_iter(f"{prefix}:*resend:*"):
            redis_client.delete(key)

    forget()
    yield
    forget()


def test_a_resend_past_the_limit_on_the_page_sends_nothing_and_says_when_to_try_again(
    personas, settings, fresh_throttle_counts
):
    settings.DESK_RATE_RESEND = "2/min"
    endpoint, _ = webhook_register(owner=personas.carol, url=URL, events=["run.succeeded"])
    delivery = a_delivery(endpoint)
    page = logged_in(personas.carol)
    resend = f"/webhooks/{endpoint.id}/deliveries/{delivery.id}/resend/"
    for _ in range(2):
        assert "Delivery queued again." in page.post(resend, follow=True).content.decode()
    refused = page.post(resend)
    assert (refused.status_code, refused["Location"]) == (302, f"/webhooks/{endpoint.id}/")
    shown = page.get(refused["Location"]).content.decode()
    assert "Not re-sent: at most 2 re-sends a minute" in shown and "Try again in" in shown
    assert "Delivery queued again." not in shown
    assert WebhookDelivery.objects.filter(resend_of=delivery).count() == 2  # the refused click sent nothing


def test_the_page_and_the_api_share_one_resend_budget_for_the_user(personas, settings, fresh_throttle_counts):
    """A session's re-sends through the page and through the API count in one place, so
    alternating between the two does not double the limit."""
    settings.DESK_RATE_RESEND = "2/min"
    endpoint, _ = webhook_register(owner=personas.carol, url=URL, events=["run.succeeded"])
    delivery = a_delivery(endpoint)
    carol = logged_in(personas.carol)  # the API takes the same session
    page_resend = f"/webhooks/{endpoint.id}/deliveries/{delivery.id}/resend/"
    api_resend = f"/api/v1/webhooks/{endpoint.id}/deliveries/{delivery.id}/resend"
    assert carol.post(page_resend).status_code == 302
    assert carol.post(api_resend).status_code == 202
    assert "Not re-sent" in carol.post(page_resend, follow=True).content.decode()
    assert carol.post(api_resend).status_code == 429
    assert WebhookDelivery.objects.filter(resend_of=delivery).count() == 2
