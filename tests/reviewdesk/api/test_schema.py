from __future__ import annotations

import pytest
from django.core.management import call_command
from django.test import Client, RequestFactory
from openapi_spec_validator import validate

from reviewdesk.lib.errors import ERROR_CODES

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
    "/api/v1/agents",
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


def test_the_grants_list_says_who_sees_which_grants_as_the_api_answers(document):
    """It said "reviewers and admins see every grant": a reviewer sees only the grants they made
    and those made on runs they may see (approvals.grants.access.grants_visible_to, docs/api.md)."""
    description = document["paths"]["/api/v1/grants"]["get"]["description"]
    assert "reviewers and admins see every grant" not in description
    assert "they made" in description and "runs they may see" in description


def test_the_agents_list_describes_each_tools_approval_as_the_api_answers_it(document):
    """The three answers a client branches on, and the paged shape every list has."""
    schemas = document["components"]["schemas"]
    listed = document["paths"]["/api/v1/agents"]["get"]
    page = listed["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert page == "#/components/schemas/AgentPage"
    assert set(schemas["AgentPage"]["properties"]) == {"results", "next"}
    assert {p["name"] for p in listed["parameters"]} == {"limit", "cursor"}
    tool = schemas["AgentToolOut"]["properties"]
    assert schemas[tool["approval"]["allOf"][0]["$ref"].rsplit("/", 1)[1]]["enum"] == [
        "always",
        "never",
        "depends",
    ]
    assert listed["x-required-scopes"] == []
    one = document["paths"]["/api/v1/agents/{name}"]["get"]
    assert one["responses"]["200"]["content"]["application/json"]["schema"]["$ref"] == (
        "#/components/schemas/AgentOut"
    )


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


# The document is built once per process and format (reviewdesk/api/views/schema.py): these run
# in-process through Django's test client, against the real drf-spectacular generator.
@pytest.fixture
def fresh_schema(monkeypatch):
    """An empty cache, and a count of the times the generator builds the document."""
    from drf_spectacular.generators import SchemaGenerator

    from reviewdesk.api.views import schema as schema_view

    schema_view._built.clear()
    built = []
    original = SchemaGenerator.get_schema

    def counted(self, *args, **kwargs):
        built.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    yield built
    schema_view._built.clear()


def test_the_document_is_built_once_and_then_served_as_built(fresh_schema):
    from drf_spectacular.views import SpectacularAPIView

    first = Client().get("/api/schema/?format=json")
    again = Client().get("/api/schema/?format=json")
    assert len(fresh_schema) == 1
    assert again.content == first.content
    assert again["Content-Type"] == first["Content-Type"] == "application/vnd.oai.openapi+json"
    assert 'filename="Review Desk API.json"' in again["Content-Disposition"]
    assert "Accept" in first["Vary"] and "Accept" in again["Vary"]  # shared caches key on it
    # The same bytes drf-spectacular's own view sends.
    request = RequestFactory().get("/api/schema/?format=json")
    plain = SpectacularAPIView.as_view()(request)
    plain.render()
    assert again.content == plain.content


def test_each_format_is_its_own_document(fresh_schema):
    as_json = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    as_yaml = Client().get("/api/schema/")
    assert as_yaml["Content-Type"].startswith("application/vnd.oai.openapi")
    assert as_yaml.content.startswith(b"openapi: 3")
    assert as_json.json()["openapi"].startswith("3")
    assert len(fresh_schema) == 2


def test_a_clients_accept_parameters_neither_change_nor_add_a_document(fresh_schema):
    from reviewdesk.api.views import schema as schema_view

    accept = "application/vnd.oai.openapi+json"
    indented = [
        Client().get("/api/schema/", HTTP_ACCEPT=f"{accept}; indent={n + 2}; x={n}").content for n in range(3)
    ]
    plain = Client().get("/api/schema/", HTTP_ACCEPT=accept).content
    assert indented == [plain] * 3
    assert b'\n  "' not in plain[:200], "the first caller's indent was kept for everyone"
    assert len(schema_view._built) == 1 and len(fresh_schema) == 1


def test_a_version_parameter_does_not_relabel_the_document(fresh_schema):
    first = Client().get("/api/schema/?format=json&version=evil")
    assert first.json()["info"]["version"] == "1"
    assert Client().get("/api/schema/?format=json").json()["info"]["version"] == "1"


def test_a_format_the_document_does_not_come_in_is_406_and_builds_nothing(fresh_schema):
    from reviewdesk.api.views import schema as schema_view

    response = Client().get("/api/schema/", HTTP_ACCEPT="text/html")
    assert response.status_code == 406
    assert schema_view._built == {} and fresh_schema == []
