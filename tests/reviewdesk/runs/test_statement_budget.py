"""A budget of statements and transactions for the worker's standard cycle.

Not a timing test: it counts what one `runs.run` task and one `runs.resume` task send to the
database, in this process, for the bench's cycle (one `send_email` call, approved, then a final
message), and fails when a change adds round trips back. The bounds sit just above today's
counts; lower them when you cut more.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from django.db import connection

from reviewdesk.approvals.deciding.record import approval_decide
from reviewdesk.runs.execution import run_execute
from reviewdesk.runs.models import RunStatus
from reviewdesk.runs.services import run_submit

pytestmark = pytest.mark.django_db(transaction=True)

EMAIL = {"to": "ada@example.com", "subject": "Your refund", "body": "It is on its way."}
SCRIPT = [{"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}, {"content": "Emailed Ada."}]

# (statements, transactions) of the run task and of the resume task: the counts themselves,
# the same on both databases, so that one statement or commit added back is caught. What each
# cycle sends is printed below when the test runs (`-s`); how the counts came down is in the
# commit history. Lower a bound when a change cuts a round trip.
RUN_BUDGET = (18, 5)
RESUME_BUDGET = (24, 9)
# The two API requests of the cycle, as the web process serves them (a bearer token, an
# Idempotency-Key): the counts themselves, the same on both databases, as above.
SUBMIT_BUDGET = 14
DECIDE_BUDGET = 21


@dataclass
class Tally:
    """Statements as bench/probe.py counts them: not BEGIN, and not PostgreSQL's advisory
    locks (the same code takes none on SQLite). A transaction is a commit, or a statement
    run in autocommit."""

    statements: list[str] = field(default_factory=list)
    transactions: int = 0

    def __call__(self, execute, sql, params, many, context):
        head = sql.lstrip().upper()
        if not head.startswith("BEGIN") and "PG_ADVISORY_XACT_LOCK" not in head:
            self.statements.append(sql)
            if connection.get_autocommit():
                self.transactions += 1
        return execute(sql, params, many, context)


@contextmanager
def tallied():
    tally = Tally()
    commit = connection.commit

    def counted_commit():
        tally.transactions += 1
        commit()

    connection.commit = counted_commit
    try:
        with connection.execute_wrapper(tally):
            yield tally
    finally:
        del connection.commit  # back to the class's method


def describe(tally: Tally) -> str:
    return f"{len(tally.statements)} statements, {tally.transactions} transactions:\n" + "\n".join(
        sql[:120] for sql in tally.statements
    )


def test_one_cycle_stays_within_its_statement_and_transaction_budget(personas):
    run = run_submit(
        submitter=personas.carol,
        agent="demo",
        input="Tell Ada.",
        model={"provider": "scripted", "script": SCRIPT},
    )
    with tallied() as first:
        run_execute(run_id=run.id, worker="budget")
    run.refresh_from_db()
    assert run.status == RunStatus.INPUT_REQUIRED, run.error
    approval = run.approvals.get()
    approval_decide(
        approval_id=approval.id,
        reviewer=personas.alice,
        verdict="approve",
        checkpoint_id=str(approval.checkpoint_id),
    )
    with tallied() as resumed:
        run_execute(run_id=run.id, worker="budget")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error

    print(f"run: {describe(first)}\nresume: {describe(resumed)}")
    assert len(first.statements) <= RUN_BUDGET[0] and first.transactions <= RUN_BUDGET[1], describe(first)
    assert len(resumed.statements) <= RESUME_BUDGET[0], describe(resumed)
    assert resumed.transactions <= RESUME_BUDGET[1], describe(resumed)


def test_an_audit_row_written_in_the_callers_transaction_takes_no_savepoint():
    """Outside an `atomic_appends_last` block (a cancel, an expiry), an audit row joins the
    caller's transaction as it is: a failed write undoes the caller's action anyway."""
    from django.db import transaction

    from reviewdesk.audit.services import audit_record

    with transaction.atomic(), tallied() as tally:
        audit_record(actor=None, action="test.one", subject_type="test", subject_id="1")
    assert not [sql for sql in tally.statements if "SAVEPOINT" in sql.upper()], describe(tally)


def test_the_apis_submit_and_decide_stay_within_their_statement_budgets(personas, api_as):
    """Through Django's test client, with the API's own authentication and idempotency."""
    from reviewdesk.audit.services import audit_record

    body = {"agent": "demo", "input": "Tell Ada.", "model": {"provider": "scripted", "script": SCRIPT}}
    carol, alice = api_as(personas.carol, "submit"), api_as(personas.alice, "review")
    audit_record(actor=None, action="test.warm", subject_type="test", subject_id="0")  # once a process
    with tallied() as submitted:
        response = carol.post("/api/v1/runs", body, format="json", HTTP_IDEMPOTENCY_KEY="budget-submit")
    assert response.status_code == 201, response.json()
    assert response.json()["approvals"] == [] and response.json()["attempts"] == []
    run_execute(run_id=response.json()["id"], worker="budget")
    from reviewdesk.approvals.models import ApprovalRequest

    approval = ApprovalRequest.objects.get(run_id=response.json()["id"])
    decision = {"verdict": "approve", "checkpoint_id": str(approval.checkpoint_id)}
    with tallied() as decided:
        response = alice.post(
            f"/api/v1/approvals/{approval.id}/decision",
            decision,
            format="json",
            HTTP_IDEMPOTENCY_KEY="budget-decide",
        )
    assert response.status_code == 201, response.json()
    assert response.json()["grant"] is None and response.json()["payload"]["attempt"] == 1

    print(f"submit: {describe(submitted)}\ndecide: {describe(decided)}")
    assert len(submitted.statements) <= SUBMIT_BUDGET, describe(submitted)
    assert len(decided.statements) <= DECIDE_BUDGET, describe(decided)
