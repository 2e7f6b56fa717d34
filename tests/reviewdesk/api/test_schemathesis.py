"""Schemathesis against the served OpenAPI document: every operation, bounded in time.

Cases are generated from the schema and sent to the WSGI app (the same Django views daphne
serves); each response goes through schemathesis's checks: no 5xx, a status code the
schema declares, its content type, headers and body shape. The two Server-Sent Events
operations are left out here (an endless body); tests/e2e/test_api_stream.py covers them.
"""

from __future__ import annotations

import time

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import positive_data_acceptance
from schemathesis.generation import GenerationMode

from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS
from reviewdesk.accounts.services import token_create
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def wsgi_app():
    """The WSGI app, without closing the test's database connection after each request
    (Django's own test client does the same)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


MAX_EXAMPLES = 25
# "Schema-valid data is accepted" cannot hold for values only the server can judge: an agent
# name that is not registered, a cursor this API did not issue, an Idempotency-Key reused with
# another body. Each of those is a declared 4xx, which the other checks still hold to the schema.
NOT_CHECKED = [positive_data_acceptance]
STREAMS = {"/api/v1/stream", "/api/v1/runs/{run_id}/stream"}


def fuzz(strategy, auth: dict[str, str], statuses: list[int]):
    """A Hypothesis test over `strategy`: call the app, record the status, run the checks."""

    @given(case=strategy)
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def check(case):
        response = case.call(headers=auth)
        statuses.append(response.status_code)
        case.validate_response(response, headers=auth, excluded_checks=NOT_CHECKED)

    return check


def test_every_operation_answers_as_the_schema_says_with_no_5xx(
    interrupted_run, personas, wsgi_app, report_timing
):
    interrupted_run()  # a run waiting for approval, so lists have something to show
    # An admin too, so the audit trail answers 200 rather than 403 to every case.
    both = make_user("sam", SUBMITTERS, REVIEWERS, staff=True)
    _, raw = token_create(user=both, scopes=["submit", "review", "audit"])
    auth = {"Authorization": f"Bearer {raw}"}
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", wsgi_app)

    started = time.monotonic()
    operations, cases, failures = 0, 0, []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path in STREAMS:
            continue
        operations += 1
        statuses: list[int] = []
        # Positive cases (schema-valid) and negative ones (schema-violating: each must be a 4xx).
        strategy = operation.as_strategy(GenerationMode.POSITIVE) | operation.as_strategy(
            GenerationMode.NEGATIVE
        )

        check = fuzz(strategy, auth, statuses)
        try:
            check()
        except (Exception, BaseExceptionGroup) as exc:  # one failing operation must not hide the others
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
        cases += len(statuses)
        assert all(status < 500 for status in statuses), (operation.path, statuses)

    elapsed = time.monotonic() - started
    report_timing(
        f"schemathesis: {operations} operations, {cases} cases, {len(failures)} failures in {elapsed:.0f} s"
    )
    # every operation but the two streams (10 with the hand-over, the 4 of webhooks, messages,
    # the 2 of grants, the device-signed decision's payload, the 2 of agents, and the 4 of external
    # runs: submit, consume, report, the public keys)
    assert operations == 25
    assert cases >= operations * 10, "schemathesis generated too few cases to mean anything"
    assert not failures, "\n\n".join(failures)
