from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

CONTRACT_PATHS = {
    "/api/v1/runs",
    "/api/v1/runs/{run_id}",
    "/api/v1/runs/{run_id}/events",
    "/api/v1/approvals",
    "/api/v1/approvals/{approval_id}",
    "/api/v1/approvals/{approval_id}/decision",
}


def test_the_openapi_document_lists_the_contract_paths():
    response = Client().get("/api/schema/?format=json")
    assert response.status_code == 200
    assert set(response.json()["paths"]) >= CONTRACT_PATHS


def test_the_docs_page_is_served_without_outside_assets():
    response = Client().get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "/api/schema/" in html
    assert "https://" not in html and "http://" not in html
