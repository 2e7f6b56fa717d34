"""The desk stores the runtime's enums in its own database choices: they must not drift apart."""

from agents.decisions import Verdict as RuntimeVerdict
from agents.gate import LedgerStatus
from agents.loop import FailureKind
from reviewdesk.approvals.models import Verdict
from reviewdesk.runs.models import EffectStatus, ErrorKind


def test_every_failure_the_runtime_reports_can_be_stored_on_a_run():
    assert {kind.value for kind in FailureKind} <= set(ErrorKind.values)


def test_ledger_rows_store_exactly_the_runtimes_ledger_statuses():
    assert {status.value for status in LedgerStatus} == set(EffectStatus.values)


def test_decisions_store_exactly_the_verdicts_the_gate_understands():
    assert {verdict.value for verdict in RuntimeVerdict} == set(Verdict.values)


def test_grants_store_exactly_the_scopes_the_gate_understands():
    from agents.grants import GrantScope as RuntimeScope
    from reviewdesk.approvals.models import GrantScope

    assert {scope.value for scope in RuntimeScope} == set(GrantScope.values)
