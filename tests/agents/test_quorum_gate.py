"""The gate under a quorum, against in-memory interfaces: N distinct reviewers' signed
approvals of exactly this call, or the tool does not run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agents.gate import DecisionRefused
from agents.routing import Quorum
from tests.agents.test_gate import Desk

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
