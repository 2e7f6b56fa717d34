"""The gate under a quorum, against in-memory interfaces: N distinct reviewers' signed
approvals of exactly this call, or the tool does not run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agents.gate import DecisionRefused, EffectUnknown, LedgerStatus
from agents.routing import Quorum
from agents.testing.ledger import LedgerRow
from tests.agents.test_gate import CALL, RUN, Desk

TWO_PERSON_EMAIL = replace(Desk().tool, quorum=Quorum(approvals=2))


def quorum_desk() -> Desk:
    return Desk(tool=TWO_PERSON_EMAIL)


def test_two_approvals_by_two_reviewers_run_the_tool_once_and_consume_both():
    desk = quorum_desk()
    first, second = desk.decision(reviewer="alice"), desk.decision(reviewer="bob")
    desk.execute(replace(second, co_decisions=(first,)))
    assert len(desk.world.emails) == 1
    assert desk.ledger.consumed == {first.decision_id, second.decision_id}


def test_one_approval_is_not_enough():
    desk = quorum_desk()
    with pytest.raises(DecisionRefused, match="needs approvals from 2 different reviewers; it has 1"):
        desk.execute(desk.decision(reviewer="alice"))
    desk.assert_nothing_happened()


def test_two_decisions_by_one_reviewer_count_once():
    desk = quorum_desk()
    first, again = desk.decision(reviewer="alice"), desk.decision(reviewer="alice")
    with pytest.raises(DecisionRefused, match="it has 1"):
        desk.execute(replace(again, co_decisions=(first,)))
    desk.assert_nothing_happened()


def test_a_co_decision_for_other_arguments_is_refused():
    desk = quorum_desk()
    other = desk.decision(reviewer="alice", arguments={**desk.arguments, "body": "something else"})
    with pytest.raises(DecisionRefused, match="not for the same arguments"):
        desk.execute(replace(desk.decision(reviewer="bob"), co_decisions=(other,)))
    desk.assert_nothing_happened()


def test_a_co_decision_with_a_broken_signature_is_refused():
    desk = quorum_desk()
    forged = replace(desk.decision(reviewer="alice"), signature=desk.decision(reviewer="bob").signature)
    with pytest.raises(DecisionRefused, match="signature does not verify"):
        desk.execute(replace(desk.decision(reviewer="bob"), co_decisions=(forged,)))
    desk.assert_nothing_happened()


def test_a_co_decision_by_a_reviewer_no_longer_allowed_is_refused():
    desk = quorum_desk()
    desk.allowed = {"bob"}
    with pytest.raises(DecisionRefused, match="no longer allowed"):
        desk.execute(replace(desk.decision(reviewer="bob"), co_decisions=(desk.decision(reviewer="carol"),)))
    desk.assert_nothing_happened()


def test_a_co_decision_already_used_is_refused_and_nothing_runs():
    desk = quorum_desk()
    first = desk.decision(reviewer="alice")
    desk.ledger.consumed.add(first.decision_id)
    with pytest.raises(DecisionRefused, match="already been used"):
        desk.execute(replace(desk.decision(reviewer="bob"), co_decisions=(first,)))
    assert desk.world.emails == []


def test_a_retry_of_a_quorum_call_is_refused_with_one_approval():
    """A call whose last try certainly did not take effect (`retrying`) is tried again only
    with the quorum's decisions: one reviewer's approval is still not enough."""
    desk = quorum_desk()
    lone = desk.decision(reviewer="alice")
    desk.ledger.note_retry(
        desk.key_for_ledger, binding=desk.binding, decision_id=lone.decision_id, error="503"
    )
    with pytest.raises(DecisionRefused, match="it has 1"):
        desk.execute(lone)
    assert desk.world.emails == []


# --- A re-run of an effect of unknown outcome (a reconciliation) ---------------------------
def unknown_effect_desk() -> Desk:
    """A quorum-2 call whose effect was cut between pending and confirmed: its row is `unknown`."""
    desk = quorum_desk()
    desk.ledger.rows[desk.key_for_ledger] = LedgerRow(
        desk.key_for_ledger, RUN, CALL, desk.tool.name, LedgerStatus.UNKNOWN, None, None
    )
    return desk


def test_a_rerun_of_an_unknown_effect_is_refused_with_one_reviewers_vote():
    """A re-run makes the effect happen again: one reviewer's signature is not the tool's quorum."""
    desk = unknown_effect_desk()
    lone = desk.decision(reviewer="alice", verdict="rerun")
    with pytest.raises(DecisionRefused, match="needs approvals from 2 different reviewers; it has 1"):
        desk.execute(lone)
    assert desk.world.emails == []
    assert desk.ledger.consumed == set()
    assert desk.ledger.rows[desk.key_for_ledger].status == LedgerStatus.UNKNOWN


def test_two_reviewers_rerun_votes_run_the_unknown_effect_once_and_consume_both():
    desk = unknown_effect_desk()
    first, second = (desk.decision(reviewer=r, verdict="rerun") for r in ("alice", "bob"))
    desk.execute(replace(second, co_decisions=(first,)))
    assert len(desk.world.emails) == 1
    assert desk.ledger.consumed == {first.decision_id, second.decision_id}
    assert desk.ledger.rows[desk.key_for_ledger].status == LedgerStatus.CONFIRMED


def test_one_reviewers_two_rerun_votes_count_once():
    desk = unknown_effect_desk()
    first, again = (desk.decision(reviewer="alice", verdict="rerun") for _ in range(2))
    with pytest.raises(DecisionRefused, match="it has 1"):
        desk.execute(replace(again, co_decisions=(first,)))
    assert desk.world.emails == [] and desk.ledger.consumed == set()


def test_an_approval_does_not_stand_in_for_a_rerun_vote():
    """The approvals that let the call run the first time were for running it once."""
    desk = unknown_effect_desk()
    approval = desk.decision(reviewer="alice")
    with pytest.raises(DecisionRefused, match="does not approve this call"):
        desk.execute(replace(desk.decision(reviewer="bob", verdict="rerun"), co_decisions=(approval,)))
    assert desk.world.emails == [] and desk.ledger.consumed == set()


def test_a_quorum_rerun_with_a_vote_already_used_goes_back_to_a_human_and_consumes_nothing():
    """A used vote means that re-run started and was cut short: it never runs again here."""
    desk = unknown_effect_desk()
    first, second = (desk.decision(reviewer=r, verdict="rerun") for r in ("alice", "bob"))
    desk.ledger.consumed.add(first.decision_id)
    with pytest.raises(EffectUnknown, match="interrupted"):
        desk.execute(replace(second, co_decisions=(first,)))
    assert desk.world.emails == []
    assert desk.ledger.consumed == {first.decision_id}
    assert desk.ledger.rows[desk.key_for_ledger].status == LedgerStatus.UNKNOWN


def test_a_retry_of_a_quorum_rerun_is_refused_with_one_vote():
    """A re-run whose try certainly did not take effect (`retrying`) is tried again only with
    the quorum's re-run votes."""
    desk = unknown_effect_desk()
    lone = desk.decision(reviewer="alice", verdict="rerun")
    desk.ledger.rows[desk.key_for_ledger] = replace(
        desk.ledger.rows[desk.key_for_ledger], status=LedgerStatus.RETRYING, retries=1
    )
    with pytest.raises(DecisionRefused, match="it has 1"):
        desk.execute(lone)
    assert desk.world.emails == []
