"""Scale-out on real processes: two web processes (daphne) and two Celery workers on one
database and one Redis. A decision posted to one web process reaches a reviewer's socket
held by the other, and the runs' work spreads over both workers."""

from __future__ import annotations

import json
import sys
import time

import pytest
from django.conf import settings
from websockets.sync.client import connect

from reviewdesk.accounts.services import token_create
from reviewdesk.approvals.signing import ensure_keys
from reviewdesk.runs.models import Attempt, Run, RunStatus
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e import conftest as e2e
from tests.e2e.conftest import Process, _http_ok, free_port, http, session_cookie, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

RUNS = 8


@pytest.fixture
def two_by_two(django_db_setup, redis_server, tmp_path):
    """Two daphne processes and two single-process Celery workers, on a queue of their own."""
    import os

    ensure_keys()
    env = {
        **os.environ,
        "DATABASE_URL": e2e.test_database_url(),  # via the module: pytest would collect the name as a test
        "PYTHONUNBUFFERED": "1",
        "DESK_CELERY_QUEUE": f"{settings.CELERY_TASK_DEFAULT_QUEUE}-scale-out",
    }
    python = sys.executable
    ports = [free_port(), free_port()]
    # Both web processes accept sockets opened from either one's pages (exact Origin allow-list).
    env["DESK_WS_ALLOWED_ORIGINS"] = ",".join(f"http://127.0.0.1:{port}" for port in ports)
    processes = [
        Process(
            f"web{i}",
            [python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "reviewdesk.asgi:application"],
            tmp_path / f"web{i}.log",
            env,
        ).start()
        for i, port in enumerate(ports)
    ]
    workers = [
        Process(
            f"worker{i}",
            [
                python,
                "-m",
                "celery",
                "-A",
                "reviewdesk",
                "worker",
                "-l",
                "INFO",
                "-c",
                "1",
                "--without-gossip",
                "--without-mingle",
                "-n",
                f"scale{i}-{ports[0]}@%h",
            ],
            tmp_path / f"worker{i}.log",
            env,
        ).start()
        for i in range(2)
    ]
    processes += workers
    try:
        for port in ports:
            wait_until(
                lambda port=port: _http_ok(f"http://127.0.0.1:{port}/accounts/login/"),
                timeout=90,
                what="daphne",
            )
        for worker in workers:
            wait_until(lambda w=worker: " ready." in w.log_text(), timeout=90, what=worker.name)
        yield [f"http://127.0.0.1:{port}" for port in ports]
    finally:
        for process in processes:
            process.stop()


def test_a_decision_posted_to_one_web_process_reaches_a_socket_on_the_other(two_by_two, personas):
    web_a, web_b = two_by_two
    _, carol = token_create(user=personas.carol, scopes=["submit"])
    _, alice = token_create(user=personas.alice, scopes=["review"])
    seen: dict[str, list[dict]] = {}
    with connect(
        web_b.replace("http://", "ws://") + "/ws/desk/",
        additional_headers={"Cookie": session_cookie(personas.alice), "Origin": web_b},
        open_timeout=10,
    ) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "snapshot"
        run_ids = []
        for i in range(RUNS):  # submitted to web A, all at once: both workers have work
            status, run = http(
                "POST",
                web_a + "/api/v1/runs",
                token=carol,
                body={
                    "agent": "demo",
                    "input": f"Tell Ada, {i}.",
                    "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT},
                },
            )
            assert status == 201, run
            run_ids.append(run["id"])
        succeeded: set[str] = set()
        deadline = time.monotonic() + 90
        while succeeded != set(run_ids):
            assert time.monotonic() < deadline, f"succeeded {len(succeeded)} of {RUNS}"
            message = json.loads(ws.recv(timeout=deadline - time.monotonic()))
            data = message.get("data") or {}
            seen.setdefault(message["type"], []).append(data)
            if message["type"] == "approval.created" and data["run"] in run_ids:
                # Decided through web A; the socket that must see it is held by web B.
                status, decision = http(
                    "POST",
                    f"{web_a}/api/v1/approvals/{data['id']}/decision",
                    token=alice,
                    body={"verdict": "approve", "reason": "ok", "checkpoint_id": data["checkpoint_id"]},
                )
                assert status == 201, decision
            if message["type"] == "run.updated" and data["id"] in run_ids and data["status"] == "succeeded":
                succeeded.add(data["id"])

    approved = {d["id"] for d in seen["approval.updated"] if d["status"] == "approved"}
    assert len(approved) == RUNS  # every decision made on web A was pushed to the socket on web B
    assert Run.objects.filter(pk__in=run_ids, status=RunStatus.SUCCEEDED).count() == RUNS
    workers = {
        worker.split(":")[0]
        for worker in Attempt.objects.filter(run_id__in=run_ids).values_list("worker", flat=True)
    }
    assert len(workers) == 2, workers  # the work spread over both workers
