"""Each list's query parameters are declared once (`api.filters`): what the view accepts and what
the OpenAPI document lists are the same names, read from the same serializer (in-process, DRF's
test client on the database)."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

from reviewdesk.api import filters
from reviewdesk.webhooks.services import webhook_register

pytestmark = pytest.mark.django_db

LISTS = [
    ("/api/v1/runs", "/api/v1/runs", filters.RunFilters, "submit"),
    ("/api/v1/runs/{run_id}/events", "/api/v1/runs/{run}/events", filters.RunEventFilters, "submit"),
    ("/api/v1/approvals", "/api/v1/approvals", filters.ApprovalFilters, "review"),
    ("/api/v1/grants", "/api/v1/grants", filters.GrantFilters, "review"),
    ("/api/v1/audit", "/api/v1/audit", filters.AuditFilters, "audit"),
    ("/api/v1/webhooks", "/api/v1/webhooks", filters.PageOnly, "submit"),
    ("/api/v1/agents", "/api/v1/agents", filters.PageOnly, "submit"),
]


@pytest.fixture(scope="module")
def document():
    return SchemaGenerator().get_schema(request=None, public=True)


@pytest.mark.parametrize(("path", "url", "declared", "scope"), LISTS, ids=[lst[0] for lst in LISTS])
def test_a_lists_documented_and_accepted_parameters_are_its_one_declaration(
    document, path, url, declared, scope, personas, api_as, interrupted_run
):
    names = set(declared().fields)
    documented = {p["name"] for p in document["paths"][path]["get"]["parameters"] if p["in"] == "query"}
    assert documented == names

    run, _ = interrupted_run()
    user = personas.admin if scope == "audit" else personas.carol
    response = api_as(user, scope).get(url.format(run=run.id), {"colour": "red"})
    assert response.status_code == 400 and response.json()["code"] == "bad_parameter"
    assert response.json()["detail"].endswith(f"this endpoint takes {', '.join(sorted(names))}")


@pytest.mark.parametrize(
    ("query", "detail"),
    [
        (
            {"status": "done"},
            "status must be one of queued, running, input_required, succeeded, failed, cancelled",
        ),
        ({"agent": ""}, "agent must be 1 to 200 characters"),
        ({"agent": "a" * 201}, "agent must be 1 to 200 characters"),
        ({"agent": "de\x00mo"}, "agent may not contain a NUL character"),
        (
            {"created_after": "yesterday"},
            "created_after must be an RFC 3339 date-time, e.g. 2026-01-31T12:00:00Z",
        ),
        ({"limit": "0"}, "limit must be an integer from 1 to 200"),
        ({"limit": "²"}, "limit must be an integer from 1 to 200"),
    ],
)
def test_a_bad_filter_value_is_400_naming_what_it_wanted(personas, api_as, query, detail):
    response = api_as(personas.carol, "submit").get("/api/v1/runs", query)
    assert response.status_code == 400, response.content
    assert response.json() | {"detail": detail} == response.json()
    assert response.json()["code"] == "bad_parameter"


def test_a_uuid_filter_refuses_what_is_no_uuid(personas, api_as):
    response = api_as(personas.alice, "review").get("/api/v1/approvals", {"run": "run-1"})
    assert (response.status_code, response.json()["detail"]) == (400, "run must be a UUID")


def test_an_empty_cursor_is_one_this_api_did_not_issue(personas, api_as):
    response = api_as(personas.carol, "submit").get("/api/v1/runs", {"cursor": ""})
    assert (response.status_code, response.json()["code"]) == (400, "bad_cursor")


def test_a_nul_in_a_cursor_is_a_cursor_this_api_did_not_issue(personas, api_as):
    response = api_as(personas.carol, "submit").get("/api/v1/runs", {"cursor": "ab\x00cd"})
    assert (response.status_code, response.json()["code"]) == (400, "bad_cursor")


def test_who_may_read_a_list_is_answered_before_its_values_are_judged(personas, api_as, interrupted_run):
    """A bad value on a list the caller may not read is 403 or 404, as it was before the values
    were parsed in one place; an unknown name is 400 first, as it always was."""
    run, _ = interrupted_run()
    audit_as_carol = api_as(personas.carol, "audit").get("/api/v1/audit", {"created_after": "yesterday"})
    assert audit_as_carol.status_code == 403
    olivias_look = api_as(personas.olivia, "submit").get(f"/api/v1/runs/{run.id}/events", {"after": "x"})
    assert olivias_look.status_code == 404
    assert api_as(personas.carol, "audit").get("/api/v1/audit", {"colour": "red"}).status_code == 400
    olivias_colour = api_as(personas.olivia, "submit").get(f"/api/v1/runs/{run.id}/events", {"colour": "red"})
    assert olivias_colour.status_code == 400


@pytest.mark.parametrize(
    ("url", "scope", "query", "named"),
    [
        ("/api/v1/runs", "submit", {"status": "x", "limit": "0"}, "status"),
        ("/api/v1/approvals", "review", {"status": "x", "created_after": "x"}, "status"),
        ("/api/v1/approvals", "review", {"kind": "x", "limit": "0"}, "kind"),
        ("/api/v1/grants", "review", {"status": "x", "limit": "0"}, "status"),
        ("/api/v1/audit", "audit", {"actor": "", "after": "x"}, "actor"),
        ("/api/v1/audit", "audit", {"limit": "0", "after": "x"}, "limit"),
        ("/api/v1/runs/{run}/events", "submit", {"type": "", "limit": "0"}, "type"),
    ],
)
def test_of_two_bad_values_the_400_names_the_lists_own_filter_before_its_page(
    personas, api_as, interrupted_run, url, scope, query, named
):
    run, _ = interrupted_run()
    user = {"submit": personas.carol, "review": personas.alice, "audit": personas.admin}[scope]
    response = api_as(user, scope).get(url.format(run=run.id), query)
    assert response.status_code == 400 and response.json()["detail"].startswith(f"{named} must be")


def test_a_webhooks_deliveries_answer_404_to_a_stranger_before_judging_the_page(personas, api_as, settings):
    settings.DESK_WEBHOOKS_ALLOW_PRIVATE = True
    hook, _ = webhook_register(owner=personas.carol, url="http://127.0.0.1:9/hook", events=["run.succeeded"])
    url = f"/api/v1/webhooks/{hook.id}/deliveries"
    assert api_as(personas.olivia, "submit").get(url, {"limit": "0"}).status_code == 404
    assert api_as(personas.olivia, "submit").get(url, {"colour": "red"}).status_code == 400
    assert api_as(personas.carol, "submit").get(url, {"limit": "0"}).status_code == 400
