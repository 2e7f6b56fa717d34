"""Real processes, real SMTP: daphne, a Celery worker on Django's SMTP backend, and a
mail server started here (the standard library's socketserver speaking just enough
SMTP), which the tests take down, bring up, or make drop the line after DATA.

Every email is counted at the server by its Message-ID (the run and the call)."""

from __future__ import annotations

import email
import json
import socketserver
import threading
import time

import pytest

from reviewdesk.accounts.services import token_create
from tests.e2e.conftest import free_port, get_run, http, start_stack, wait_for_run, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


class _Session(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server: MailServer = self.server.owner  # type: ignore[attr-defined]
        self.wfile.write(b"220 test ESMTP\r\n")
        while line := self.rfile.readline():
            verb = line.strip().split(b" ")[0].upper()
            if verb == b"DATA":
                self.wfile.write(b"354 go ahead\r\n")
                data = b""
                while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                    data += chunk
                server.accept(data)
                if server.drop_after_data:
                    return  # the message is in, the final reply never comes
                self.wfile.write(b"250 queued\r\n")
            elif verb == b"QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            elif verb in (b"EHLO", b"HELO", b"MAIL", b"RCPT", b"RSET", b"NOOP"):
                self.wfile.write(b"250 ok\r\n")
            else:
                self.wfile.write(b"502 not implemented\r\n")


class MailServer:
    """An SMTP server on a fixed port that can be down (nothing listening) or up."""

    def __init__(self) -> None:
        self.port = free_port()
        self.messages: list[bytes] = []
        self.drop_after_data = False
        self.lock = threading.Lock()
        self._server: socketserver.ThreadingTCPServer | None = None

    def accept(self, data: bytes) -> None:
        with self.lock:
            self.messages.append(data)

    def message_ids(self, run_id: str = "") -> list[str]:
        with self.lock:
            ids = [email.message_from_bytes(m)["Message-ID"] for m in self.messages]
        return [i for i in ids if run_id in i]

    def up(self) -> None:
        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", self.port), _Session)
        self._server.daemon_threads = True
        self._server.owner = self  # type: ignore[attr-defined]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def smtp_env(mail: MailServer, queue: str, **extra: str) -> dict[str, str]:
    return {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(mail.port),
        "EMAIL_TIMEOUT": "3",
        "DESK_TOOL_RETRIES": "3",  # waits 1, 2 (in the task), 4 s (released and requeued)
        "DESK_TOOL_RETRY_BACKOFF_SECONDS": "1",
        "DESK_TOOL_RETRY_INLINE_SECONDS": "2",
        "DESK_CELERY_QUEUE": queue,
        **extra,
    }


@pytest.fixture(scope="module")
def mail() -> MailServer:
    server = MailServer()
    yield server
    server.down()


@pytest.fixture(scope="module")
def smtp_stack(django_db_setup, django_db_blocker, redis_server, mail, tmp_path_factory):
    logs = tmp_path_factory.mktemp("smtp-logs")
    stack = start_stack(logs, env_extra=smtp_env(mail, f"smtp-{logs.name}"))
    yield stack
    stack.stop()


def script(subject: str) -> list[dict]:
    email_args = {"to": "ada@example.com", "subject": subject, "body": "hello"}
    return [{"tool_calls": [{"name": "send_email", "arguments": email_args}]}, {"content": "sent"}]


def submit_and_approve(stack, carol: str, alice: str, subject: str) -> str:
    status, run = http(
        "POST",
        stack.url + "/api/v1/runs",
        token=carol,
        body={
            "agent": "demo",
            "input": subject,
            "model": {"provider": "scripted", "script": script(subject)},
        },
    )
    assert status == 201, run
    run = wait_for_run(stack, carol, run["id"], "input_required")
    approval = run["approvals"][0]
    status, body = http(
        "POST",
        f"{stack.url}/api/v1/approvals/{approval['id']}/decision",
        token=alice,
        body={"verdict": "approve", "checkpoint_id": approval["checkpoint_id"]},
    )
    assert status == 201, body
    return run["id"]


def side_effect(stack, token: str, run_id: str) -> dict | None:
    effects = get_run(stack, token, run_id)["side_effects"]
    return effects[0] if effects else None


@pytest.fixture
def tokens(personas):
    return token_create(user=personas.carol, scopes=["submit"])[1], token_create(
        user=personas.alice, scopes=["review"]
    )[1]


def test_emails_sent_while_the_mail_server_is_down_are_retried_and_arrive_once_when_it_is_up(
    smtp_stack, mail, tokens, report_timing
):
    carol, alice = tokens
    mail.down()
    run_ids = [submit_and_approve(smtp_stack, carol, alice, f"down-up {n}") for n in range(3)]

    def all_retrying():
        effects = [side_effect(smtp_stack, carol, r) for r in run_ids]
        return all(e and e["retries"] >= 1 for e in effects) and effects

    effects = wait_until(all_retrying, timeout=30, what="every send to fail and be retried")
    assert {e["status"] for e in effects} <= {"retrying", "pending"}
    assert "ConnectionRefusedError" in effects[0]["last_error"] or "refused" in effects[0]["last_error"]
    assert mail.message_ids() == []

    mail.up()
    up_at = time.monotonic()
    wait_until(lambda: all(mail.message_ids(r) for r in run_ids), timeout=30, what="every email")
    delivered = time.monotonic() - up_at
    runs = [wait_for_run(smtp_stack, carol, r, timeout=30) for r in run_ids]

    for run in runs:
        assert run["status"] == "succeeded", run["error"]
        [effect] = run["side_effects"]
        assert (effect["status"], effect["result"]["sent"]) == ("confirmed", True)
        assert len(mail.message_ids(run["id"])) == 1  # exactly once, by Message-ID
    retries = [r["side_effects"][0]["retries"] for r in runs]
    report_timing(
        f"[smtp] 3 runs, mail server down then up: every email delivered {delivered:.1f} s after the "
        f"server came up (backoff 1, 2, 4 s; retries per call {retries}); each Message-ID received once"
    )


def test_a_connection_dropped_after_data_becomes_a_reconciliation_and_the_run_waits_for_a_human(
    smtp_stack, mail, tokens
):
    carol, alice = tokens
    mail.down()
    mail.up()
    mail.drop_after_data = True
    try:
        run_id = submit_and_approve(smtp_stack, carol, alice, "dropped")
        run = wait_until(
            lambda: (
                (r := get_run(smtp_stack, carol, run_id))["status"] == "input_required"
                and any(a["kind"] == "reconcile" for a in r["approvals"])
                and r
            ),
            timeout=30,
            what="a reconciliation item",
        )
    finally:
        mail.drop_after_data = False
    assert len(mail.message_ids(run_id)) == 1  # the server has it; the worker cannot know
    assert run["side_effects"][0]["status"] == "unknown"
    reconcile = next(a for a in run["approvals"] if a["kind"] == "reconcile")
    _, pending = http("GET", f"{smtp_stack.url}/api/v1/approvals?status=pending", token=alice)
    assert reconcile["id"] in [a["id"] for a in pending["results"]]

    status, body = http(
        "POST",
        f"{smtp_stack.url}/api/v1/approvals/{reconcile['id']}/decision",
        token=alice,
        body={
            "verdict": "confirm",
            "checkpoint_id": reconcile["checkpoint_id"],
            "external_ref": "in the mailbox",
        },
    )
    assert status == 201, body

    run = wait_for_run(smtp_stack, carol, run_id, timeout=30)
    assert run["status"] == "succeeded", run["error"]
    assert run["side_effects"][0]["status"] == "confirmed"
    assert len(mail.message_ids(run_id)) == 1  # never sent again


def test_a_spent_retry_budget_fails_the_run_under_send_emails_policy(smtp_stack, mail, tokens):
    carol, alice = tokens
    mail.down()
    run_id = submit_and_approve(smtp_stack, carol, alice, "never up")

    run = wait_for_run(smtp_stack, carol, run_id, timeout=40)

    assert (run["status"], run["error_kind"]) == ("failed", "unavailable"), run["error"]
    assert "stayed unavailable after 4 tries" in run["error"]
    [effect] = run["side_effects"]
    assert (effect["status"], effect["retries"]) == ("retrying", 4)
    assert mail.message_ids(run_id) == []


def test_a_worker_killed_in_the_middle_of_a_retry_sends_nothing_twice(
    django_db_setup, redis_server, tokens, tmp_path, report_timing
):
    carol, alice = tokens
    mail = MailServer()
    kills = tmp_path / "kills.jsonl"
    env = smtp_env(
        mail,
        f"smtp-kill-{tmp_path.name}",
        DESK_FAULT_INJECTION="1",
        DESK_FAULT_KILL_AT="during_tool_retry",
        DESK_FAULT_KILL_RATE="1",
        DESK_FAULT_LOG=str(kills),
        DESK_LEASE_SECONDS="3",  # waits up to a third of it happen in the task: the 1 s one does
        DESK_SWEEP_SECONDS="1",
        DESK_REQUEUE_AFTER_SECONDS="3",
        DESK_MAX_LOST_ATTEMPTS="100",
    )
    stack = start_stack(tmp_path, env_extra=env, beat=True)
    try:
        run_id = submit_and_approve(stack, carol, alice, "killed mid-retry")
        wait_until(lambda: kills.exists() and kills.read_text().strip(), timeout=30, what="a kill mid-retry")
        killed_at = json.loads(kills.read_text().splitlines()[0])["t"]
        effect = side_effect(stack, carol, run_id)
        assert (effect["status"], effect["retries"]) == ("retrying", 1)
        mail.up()
        run = wait_for_run(stack, carol, run_id, timeout=60)
        recovered = time.time() - killed_at
    finally:
        stack.stop()
        mail.down()
    assert run["status"] == "succeeded", (run["error"], stack.logs())
    assert len(mail.message_ids(run_id)) == 1
    [effect] = run["side_effects"]
    assert effect["status"] == "confirmed"
    assert any(a["status"] == "lost" for a in run["attempts"])
    report_timing(
        f"[smtp] worker kill -9'd while waiting to retry a send: the run succeeded {recovered:.1f} s after "
        f"the kill (lease 3 s, sweep 1 s), the email received once"
    )
