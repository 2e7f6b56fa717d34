from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client
from openapi_spec_validator import validate

from reviewdesk.errors import ERROR_CODES

pytestmark = pytest.mark.django_db

CONTRACT_PATHS = {
    "/api/v1/runs",
    "/api/v1/runs/{run_id}",
    "/api/v1/runs/{run_id}/events",
    "/api/v1/runs/{run_id}/cancel",
    "/api/v1/runs/{run_id}/retry",
    "/api/v1/runs/{run_id}/stream",
    "/api/v1/stream",
    "/api/v1/approvals",
    "/api/v1/approvals/{approval_id}",
    "/api/v1/approvals/{approval_id}/decision",
}


@pytest.fixture(scope="module")
def document(django_db_blocker):
    with django_db_blocker.unblock():
        response = Client().get("/api/schema/?format=json")
    assert response.status_code == 200
    return response.json()


def operations(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def test_the_openapi_document_lists_the_contract_paths(document):
    assert set(document["paths"]) >= CONTRACT_PATHS


def test_the_served_document_is_valid_openapi_3(document):
    validate(document)  # raises on the first error


def test_generating_the_document_gives_no_warning():
    """`spectacular --fail-on-warn` exits non-zero on any warning (a collision, an unknown type)."""
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", "/dev/null")


def test_every_operation_declares_a_success_body_and_its_problems_as_problem_json(document):
    for path, method, operation in operations(document):
        responses = operation["responses"]
        successes = [status for status in responses if status.startswith("2")]
        assert successes, (method, path)
        for status in successes:
            assert responses[status].get("content"), (method, path, status, "no body described")
        assert {"400", "401"} <= set(responses), (method, path)
        for status, response in responses.items():
            if int(status) >= 400:
                assert list(response["content"]) == ["application/problem+json"], (method, path, status)
        if "{" in path:
            assert "404" in responses, (method, path)
        if method == "post":
            assert {"413", "415", "422"} <= set(responses), (method, path)


def test_every_operation_names_its_scopes_and_security(document):
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    for path, method, operation in operations(document):
        assert "x-required-scopes" in operation, (method, path)
        assert {"bearerAuth": []} in operation["security"], (method, path)


def test_the_error_codes_are_listed_in_the_document(document):
    schemas = document["components"]["schemas"]
    code = schemas["Problem"]["properties"]["code"]
    assert code["allOf"] == [{"$ref": "#/components/schemas/CodeEnum"}]
    enum = schemas["CodeEnum"]["enum"]
    assert set(enum) == set(ERROR_CODES)
    for code in ERROR_CODES:
        assert f"`{code}`" in document["info"]["description"]


def test_the_docs_page_is_served_without_outside_assets():
    response = Client().get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "/api/schema/" in html
    assert "https://" not in html and "http://" not in html
