"""GET /api/v1/audit: the admin reads the whole chain in order, page by page, filtered; nobody
else reads it. In-process (DRF's test client), on the test database."""

from __future__ import annotations

from itertools import pairwise

import pytest
from rest_framework.test import APIClient

from reviewdesk.accounts.services import token_create
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.services import audit_record

pytestmark = pytest.mark.django_db


def client_for(user, *scopes: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(user=user, scopes=list(scopes))[1]}")
    return client


def test_the_admin_pages_through_every_row_in_chain_order_and_filters(personas):
    for n in range(7):
        audit_record(
            actor=personas.alice if n % 2 else None, action="test.step", subject_type="run", subject_id=n
        )
    admin = client_for(personas.admin, "audit")
    seen, url = [], "/api/v1/audit?limit=3"
    while url:
        page = admin.get(url).json()
        seen += page["results"]
        url = page["next"]
    assert [row["seq"] for row in seen] == list(
        AuditEvent.objects.order_by("id").values_list("id", flat=True)
    )
    assert all(later["prev_hash"] == earlier["hash"] for earlier, later in pairwise(seen))

    by_alice = admin.get("/api/v1/audit", {"actor": "alice", "action": "test.step"}).json()["results"]
    assert [row["subject_id"] for row in by_alice] == ["1", "3", "5"]
    one = admin.get("/api/v1/audit", {"subject_type": "run", "subject_id": "4"}).json()["results"]
    assert [(row["actor"], row["subject_id"]) for row in one] == [("system", "4")]


def test_a_reviewer_with_the_audit_scope_is_403_and_a_bad_parameter_is_400(personas):
    refused = client_for(personas.alice, "audit").get("/api/v1/audit")
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
    admin = client_for(personas.admin, "audit")
    assert admin.get("/api/v1/audit", {"after": "-1"}).json()["code"] == "bad_parameter"
    assert admin.get("/api/v1/audit", {"colour": "red"}).status_code == 400
