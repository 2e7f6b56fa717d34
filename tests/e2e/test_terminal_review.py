"""`python manage.py review --as USER` driven through a pseudo-terminal, on the live stack.

The command runs as its own process on the test database, its stdin and stdout a pty
(stdlib `pty`, typed into as a person would); the runs are submitted over HTTP and run by
the stack's real Celery worker, which also resumes the run the terminal approved.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time

import pytest
from django.contrib.auth.models import Group

from agents.decisions import signature_valid
from reviewdesk.accounts.roles import SUBMITTERS
from reviewdesk.accounts.services import token_create
from reviewdesk.approvals.models import Decision
from reviewdesk.approvals.signing import FileKeyring
from reviewdesk.audit.models import AuditEvent
from reviewdesk.audit.verification import audit_check
from tests.conftest import SEND_EMAIL_SCRIPT
from tests.e2e.conftest import REPO, http, outbox_for, wait_for_run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# A task that would clear the screen, retitle the window and reverse the text after it.
HOSTILE_TASK = "Tell Ada her refund is on its way.\x1b[2J\x1b]0;owned\x07\u202e"


def _as_a_login_terminal() -> None:
    """In the child: the pty becomes its controlling terminal, as a login shell's is, and
    SIGINT is back to its default. A disposition of SIG_IGN is inherited across exec, and
    Python then installs no KeyboardInterrupt handler: after some earlier test left SIGINT
    ignored in the pytest process, the terminal never answered Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A process on a pseudo-terminal: what it printed so far, and a keyboard."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=_as_a_login_terminal,
        )
        os.close(slave)
        self.screen = ""

    def expect(self, text: str, timeout: float = 30) -> str:
        """Read until `text` has been printed (after what was expected before); the new output."""
        start = len(self.screen)
        deadline = time.monotonic() + timeout
        while text not in self.screen[start:]:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(remaining):
                raise AssertionError(f"never printed {text!r}; the screen:\n{self.screen}")
        return self.screen[start:]

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # the process ended and the pty closed
            return False
        # The pty's line discipline writes "\r\n" for "\n", and echoes what is typed.
        self.screen += data.decode("utf-8", errors="replace").replace("\r\n", "\n")
        return bool(data)

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def wait(self, timeout: float = 30) -> int:
        while self._read(0.2):
            pass
        code = self.process.wait(timeout=timeout)
        os.close(self.master)
        return code


def submit(stack, token: str, text: str) -> str:
    status, run = http(
        "POST",
        stack.url + "/api/v1/runs",
        token=token,
        body={"agent": "demo", "input": text, "model": {"provider": "scripted", "script": SEND_EMAIL_SCRIPT}},
    )
    assert status == 201, run
    wait_for_run(stack, token, run["id"], "input_required")
    return run["id"]


def review_as(stack, username: str) -> Terminal:
    env = dict(stack.processes["web"].env)  # the stack's database, queue and keys
    return Terminal([sys.executable, "manage.py", "review", "--as", username], env)


def test_a_reviewer_approves_in_a_terminal_and_the_worker_resumes_the_run(live_stack, personas):
    bob = personas.bob
    bob.groups.add(Group.objects.get(name=SUBMITTERS))  # bob submits too: never his own to decide
    _, carol_token = token_create(user=personas.carol, scopes=["submit"])
    _, bob_token = token_create(user=bob, scopes=["submit"])
    carols = submit(live_stack, carol_token, HOSTILE_TASK)
    bobs = submit(live_stack, bob_token, "Bob's own errand.")

    terminal = review_as(live_stack, "bob")
    shown = terminal.expect("[a] approve  [r] reject  [e] edit  [s] skip  [q] quit >")
    assert f"Run         {carols} (input_required)" in shown and "Submitted   carol" in shown
    assert '"to": "ada@example.com",' in shown and "What will happen:" in shown
    # What the submitter wrote reaches the terminal escaped, never as control sequences.
    assert "Tell Ada her refund is on its way.\\u001b[2J\\u001b]0;owned\\u0007\\u202e" in shown
    assert "⚠ holds invisible characters" in shown
    terminal.type("a")
    terminal.expect("cannot be undone. Approve? [y/N]")
    terminal.type("y")
    terminal.expect("Reason (optional, Enter for none):")
    terminal.type("right customer")
    done = terminal.expect("Decided 1, skipped 0.")
    assert f"Approved send_email for run {carols}" in done
    assert "Nothing more waits for you to decide." in done  # bob's own run was not offered
    assert terminal.wait() == 0
    assert bobs not in terminal.screen
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in terminal.screen

    decision = Decision.objects.select_related("request").get(request__run_id=carols)
    assert (decision.verdict, decision.reviewer, decision.reason) == ("approve", bob, "right customer")
    assert signature_valid(FileKeyring().public_key(decision.key_id), decision.payload, decision.signature)
    assert AuditEvent.objects.filter(
        action="decision.approve", subject_id=str(decision.request_id), actor=bob
    ).exists()
    # The resume the decision enqueued on commit: the stack's worker ran it through the gate.
    final = wait_for_run(live_stack, carol_token, carols)
    assert final["status"] == "succeeded", (final["error"], live_stack.logs())
    assert final["approvals"][0]["decision"]["consumed_at"]
    assert len(outbox_for(carols)) == 1
    report = audit_check()
    assert report.intact, report.describe()


def test_a_user_who_may_not_review_is_refused_at_the_door(live_stack, personas):
    terminal = review_as(live_stack, "carol")
    terminal.expect("carol is not a reviewer")
    assert terminal.wait() != 0
    assert not Decision.objects.exists()


def test_ctrl_c_at_the_prompt_stops_without_deciding(own_stack, personas):
    _, carol_token = token_create(user=personas.carol, scopes=["submit"])
    submit(own_stack, carol_token, "Tell Ada her refund is on its way.")
    terminal = review_as(own_stack, "alice")
    terminal.expect("[q] quit >")
    # What Ctrl-C sends. Signalled directly: under load the pty's line discipline once echoed
    # "^C" without the signal reaching the process within the test's wait.
    terminal.process.send_signal(signal.SIGINT)
    terminal.expect("Interrupted; what was decided before stays decided.")
    assert terminal.wait() == 130
    assert not Decision.objects.exists()
