"""Every invalid request gets a precise problem+json 4xx from the one documented list, and
changes nothing: malformed, too deep, too large, wrong types, unknown fields, ids, scopes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from reviewdesk.api.models import IdempotencyRecord
from reviewdesk.api.parsers import loads_limited
from reviewdesk.audit.models import AuditEvent
from reviewdesk.lib.errors import ERROR_CODES, TooLarge
from reviewdesk.runs.models import Run
from tests.conftest import SEND_EMAIL_SCRIPT

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[3]
VALID = {
    "agent": "demo",
    "input": "Tell Ada her refund is on its way.",
    "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
}


def nested(depth: int) -> dict:
    """A JSON object `depth` containers deep, counting itself."""
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def post_raw(client, path: str, raw: bytes, content_type: str = "application/json"):
    return client.generic("POST", path, raw, content_type=content_type)


def assert_problem(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["code"] == code and body["title"] and body["detail"]
    assert code in ERROR_CODES and ERROR_CODES[code][0] == status
    return body


@pytest.fixture
def carol(personas, api_as):
    return api_as(personas.carol, "submit")


@pytest.fixture
def nothing_changes(task_queue):
    yield
    assert Run.objects.count() == 0
    # Creating the test client's token is audited; nothing else may be.
    assert AuditEvent.objects.exclude(action="token.created").count() == 0
    assert task_queue.length() == 0


def test_malformed_json_is_400_malformed_json(carol, nothing_changes):
    assert_problem(post_raw(carol, "/api/v1/runs", b'{"agent": "demo",'), 400, "malformed_json")


@pytest.mark.parametrize(
    ("fragment", "said"),
    [
        ('"metadata": {"a": "\\ud800"}', "lone surrogate"),
        ('"metadata": {"a": {"\\udfff": 1}}', "lone surrogate"),  # in a key
        ('"model": {"provider": "scripted", "script": [{"content": "hi \\ud800"}]}', "lone surrogate"),
        ('"metadata": {"n": NaN}', "NaN is not a JSON number"),
        ('"metadata": {"n": -Infinity}', "-Infinity is not a JSON number"),
        ('"metadata": {"n": 1e999}', "1e999 is too large"),
        # U+0000: PostgreSQL's jsonb cannot store it (DataError, a 500 on the insert).
        ('"metadata": {"a": "x\\u0000"}', "NUL"),
        ('"metadata": {"\\u0000": 1}', "NUL"),  # in a key
        ('"model": {"provider": "scripted", "script": [{"content": "\\u0000"}]}', "NUL"),
    ],
    ids=[
        "surrogate in metadata",
        "surrogate in a key",
        "surrogate in the model",
        "NaN",
        "-Infinity",
        "1e999",
        "NUL in metadata",
        "NUL in a key",
        "NUL in the model",
    ],
)
def test_json_no_response_could_carry_back_is_400_malformed_json_and_stores_nothing(
    carol, nothing_changes, fragment, said
):
    """On SQLite such a run was stored, and every runs list that showed it answered 500 (a lone
    surrogate has no UTF-8) until the row was deleted; on PostgreSQL the insert failed, a 500."""
    raw = ('{"agent": "demo", "input": "x", ' + fragment + "}").encode()
    assert said in assert_problem(post_raw(carol, "/api/v1/runs", raw), 400, "malformed_json")["detail"]


def test_a_surrogate_pair_escaped_is_one_character_and_accepted(carol):
    raw = b'{"agent": "demo", "input": "x", "metadata": {"face": "\\ud83d\\ude00"}, "model": {"provider": "scripted", "script": [{"content": "hi"}]}}'
    response = post_raw(carol, "/api/v1/runs", raw)
    assert response.status_code == 201, response.content
    assert response.json()["metadata"] == {"face": "\U0001f600"}
    assert carol.get("/api/v1/runs").status_code == 200


def test_an_escaped_backslash_before_u0000_is_no_nul_and_accepted(carol):
    raw = b'{"agent": "demo", "input": "x", "metadata": {"path": "C:\\\\u0000"}, "model": {"provider": "scripted", "script": [{"content": "hi"}]}}'
    response = post_raw(carol, "/api/v1/runs", raw)
    assert response.status_code == 201, response.content
    assert response.json()["metadata"] == {"path": "C:\\u0000"}


def test_a_body_that_is_not_utf8_is_400_malformed_json(carol, nothing_changes):
    assert_problem(post_raw(carol, "/api/v1/runs", b'{"agent": "\xff"}'), 400, "malformed_json")


@pytest.mark.parametrize(
    "depth",
    [65, 66, 100_000],
    ids=["the first refused depth", "past the limit", "past the decoder's recursion"],
)
def test_json_nested_past_the_limit_is_400_too_deep_never_a_500(carol, nothing_changes, depth):
    raw = (
        ("[" * depth + "]" * depth).encode()
        if depth > 1000
        else json.dumps({**VALID, "metadata": nested(depth - 1)}).encode()
    )
    assert_problem(post_raw(carol, "/api/v1/runs", raw), 400, "too_deep")


def test_json_exactly_at_the_depth_limit_is_accepted(carol, settings):
    """DESK_JSON_MAX_DEPTH (64) levels, counting the body: the last accepted depth; 65 is the
    first refused (above)."""
    assert settings.DESK_JSON_MAX_DEPTH == 64
    body = {**VALID, "metadata": nested(63)}  # the body itself is the 64th level
    response = carol.post("/api/v1/runs", body, format="json")
    assert response.status_code == 201, response.json()


@override_settings(DESK_MAX_BODY_BYTES=2000)
def test_a_body_over_the_documented_size_is_413_problem_json_before_anything_is_read(carol, nothing_changes):
    body = {**VALID, "input": "x" * 3000}
    response = carol.post("/api/v1/runs", body, format="json", HTTP_IDEMPOTENCY_KEY="big")
    assert_problem(response, 413, "body_too_large")
    assert response.reason_phrase == "Content Too Large"
    assert IdempotencyRecord.objects.count() == 0  # refused by its Content-Length, not replayable


def test_a_content_length_over_the_limit_is_413_before_the_body_is_read(carol, nothing_changes, settings):
    """The view refuses by the header alone: a small body under a Content-Length over the limit
    is never read (the parser, reading it, would have taken it as a valid run)."""
    claimed = settings.DESK_MAX_BODY_BYTES + 1
    response = carol.post("/api/v1/runs", VALID, format="json", CONTENT_LENGTH=str(claimed))
    assert_problem(response, 413, "body_too_large")
    assert f"the body is {claimed} bytes" in response.json()["detail"]


def test_a_body_over_djangos_own_limit_is_413_problem_json_not_an_html_400(carol, nothing_changes, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000  # below ours: Django's check would answer first
    response = carol.post(
        "/api/v1/runs", {**VALID, "input": "x" * 1500}, format="json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert_problem(response, 413, "body_too_large")


@pytest.mark.parametrize(
    ("length", "status", "code"),
    [("²", 422, "invalid"), ("9" * 30, 413, "body_too_large")],
    ids=["not a number to int()", "30 digits"],
)
def test_a_content_length_that_is_no_number_is_not_trusted_and_a_huge_one_is_413(
    carol, nothing_changes, length, status, code
):
    """ "²" is isdigit() to Python and a 500 from int(): the header is ignored (the body then reads
    as empty: no field is given); a length of any number of digits is still compared with the limit."""
    response = carol.post("/api/v1/runs", VALID, format="json", CONTENT_LENGTH=length)
    assert_problem(response, status, code)


@override_settings(DESK_MAX_BODY_BYTES=10)
def test_the_parser_refuses_a_body_longer_than_its_content_length_claimed():
    with pytest.raises(TooLarge):
        loads_limited(b'{"input": "a longer body"}')


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**VALID, "input": ["not", "a", "string"]}, "input"),
        ({**VALID, "approval_ttl_seconds": "soon"}, "approval_ttl_seconds"),
        ({**VALID, "metadata": [1, 2]}, "metadata"),
        ({**VALID, "reviewers": "alice"}, "reviewers"),
        ({**VALID, "surprise": True}, "surprise"),
        ({**VALID, "input": 5}, "input"),  # DRF's CharField reads a number as its str()
        ({**VALID, "agent": 1.5}, "agent"),
        ({**VALID, "reviewers": ["alice", 7]}, "reviewers"),
    ],
    ids=[
        "input not a string",
        "ttl not an integer",
        "metadata not an object",
        "reviewers not a list",
        "unknown field",
        "input a number",
        "agent a number",
        "a reviewer a number",
    ],
)
def test_wrong_types_and_unknown_fields_are_422_invalid_naming_the_field(carol, nothing_changes, body, field):
    response = carol.post("/api/v1/runs", body, format="json")
    problem = assert_problem(response, 422, "invalid")
    assert field in problem["errors"]
    assert response.reason_phrase == "Unprocessable Content"


def test_a_body_that_is_not_an_object_is_422_invalid(carol, nothing_changes):
    assert_problem(post_raw(carol, "/api/v1/runs", b"[1, 2]"), 422, "invalid")


def test_a_body_that_is_not_json_is_415(carol, nothing_changes):
    assert_problem(
        post_raw(carol, "/api/v1/runs", b"agent=demo", "text/plain"), 415, "unsupported_media_type"
    )


def test_unknown_ids_and_paths_are_404_not_found(carol):
    assert_problem(carol.get("/api/v1/runs/6f1c2f3e-8a51-4c1d-9a55-0c9c1b0f9d4e"), 404, "not_found")
    assert_problem(carol.get("/api/v1/approvals/6f1c2f3e-8a51-4c1d-9a55-0c9c1b0f9d4e"), 404, "not_found")
    assert_problem(carol.get("/api/v1/runs/not-a-uuid"), 404, "not_found")
    assert_problem(carol.get("/api/v1/nothing-here"), 404, "not_found")


def test_a_token_without_the_scope_is_403_missing_scope(personas, api_as, nothing_changes):
    assert_problem(
        api_as(personas.carol, "review").post("/api/v1/runs", VALID, format="json"), 403, "missing_scope"
    )


def test_no_token_is_401_not_authenticated_and_a_bad_one_401_authentication_failed(personas, nothing_changes):
    assert_problem(APIClient().get("/api/v1/runs"), 401, "not_authenticated")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer rd_nope")
    assert_problem(client.get("/api/v1/runs"), 401, "authentication_failed")


def test_a_wrong_method_is_405_with_allow(carol):
    response = carol.delete("/api/v1/runs")
    assert_problem(response, 405, "method_not_allowed")
    assert "GET" in response["Allow"]


def test_every_code_written_in_the_source_is_in_the_documented_list():
    written = set()
    for path in (REPO / "reviewdesk").rglob("*.py"):
        text = path.read_text()
        written |= set(re.findall(r"\bcode=\"([a-z_A-Z]+)\"", text))
        written |= set(re.findall(r"\bdefault_code = \"([a-z_A-Z]+)\"", text))
    assert written, "the scan found no codes: it is looking in the wrong place"
    assert written <= set(ERROR_CODES), sorted(written - set(ERROR_CODES))
    assert all(code == code.lower() for code in ERROR_CODES)


def test_a_post_to_an_unknown_api_path_with_a_session_is_404_problem_json_not_a_csrf_page(personas):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(personas.carol)
    assert_problem(client.post("/api/v1/runs/not-a-uuid/cancel", {}, format="json"), 404, "not_found")
