"""The client against a real desk: submit, the decision's way back, local verification (C2),
single use (C3), four eyes (C6). Reviewers decide through the desk's API as alice or bob."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import threading
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support import ARGUMENTS, external_id, resigned, submit_one

from reviewdesk_client import (
    AlreadyConsumed,
    AsyncDeskClient,
    DeskError,
    KeyRing,
    MemoryStore,
    VerificationError,
    args_sha256,
    jcs,
    verify_decision,
)
from reviewdesk_client.verify import _rfc3339


def decided(desk, client, verdict="approve", **fields):
    """Submit one call, have alice decide it, return (ticket, the decision as the client reads it)."""
    ticket = submit_one(client)
    desk.decide(ticket.approval_id, verdict, **fields)
    outcome = client.outcome(ticket)
    assert outcome is not None and outcome.decision is not None
    return ticket, outcome.decision


# --- submit -----------------------------------------------------------------------------------
def test_submit_stores_tickets_bound_to_the_desks_ids(desk, client):
    external = external_id()
    ticket = submit_one(client, external=external)
    assert ticket.status == "pending" and ticket.audience == "svc"
    assert ticket.external_id == external and ticket.external_checkpoint == "ckpt-1"
    assert ticket.arguments_sha256 == args_sha256(ARGUMENTS)
    assert client.store.ticket(external, "call_1") == ticket
    assert client.store.ticket_by_approval(ticket.approval_id) == ticket
    approval = client.approval(ticket)
    assert approval["status"] == "pending" and approval["run"] == ticket.run_id
    assert approval["checkpoint_id"] == ticket.checkpoint_id
    assert client.outcome(ticket) is None


def test_submit_is_idempotent_by_external_id_and_call_id(desk, client):
    external = external_id()
    first = submit_one(client, external=external)
    again = submit_one(client, external=external)
    assert again.approval_id == first.approval_id
    with pytest.raises(DeskError) as refused:
        submit_one(client, external=external, arguments={**ARGUMENTS, "amount": 999})
    assert (refused.value.status, refused.value.code) == (409, "conflict")


def test_a_call_met_again_at_a_later_checkpoint_keeps_the_binding_it_was_raised_with(desk, client):
    """A framework that submits a waiting call again with its next pause's checkpoint meets the
    approval raised the first time: the ticket names that approval's checkpoints, which its
    decision signs, so the decision still verifies."""
    external = external_id()
    first = submit_one(client, external=external, checkpoint="ckpt-1")
    again = submit_one(client, external=external, checkpoint="ckpt-2")
    assert again.approval_id == first.approval_id
    assert (again.checkpoint_id, again.external_checkpoint) == (first.checkpoint_id, "ckpt-1")
    desk.decide(again.approval_id, "approve")
    decision = client.outcome(again).decision
    assert client.verify(decision, again, current_arguments=ARGUMENTS).verdict == "approve"


def test_the_desk_recomputes_the_hash(desk, client):
    call = dataclasses.replace(client.call("call_1", "refund_payment", ARGUMENTS), arguments_sha256="0" * 64)
    with pytest.raises(DeskError) as refused:
        client.submit(external_id=external_id(), framework="test", agent="bot", checkpoint="c", calls=[call])
    assert (refused.value.status, refused.value.code) == (422, "arguments_sha256")


# --- the three verdicts, end to end -------------------------------------------------------------
def test_approve_verify_consume_report(desk, client):
    ticket, decision = decided(desk, client, "approve")
    verified = client.verify(decision, ticket, current_arguments=ARGUMENTS)
    assert (verified.verdict, verified.arguments, verified.reviewer) == ("approve", ARGUMENTS, "alice")
    assert verified.approval_id == ticket.approval_id and verified.tool_call_id == "call_1"
    client.guard(verified, ARGUMENTS)
    assert client.approval(ticket)["decision"]["consumed_at"]
    client.report_tool(verified, "confirmed", "refunded")
    answer = client.report_run(ticket.external_id, "succeeded", "done")
    assert answer["run"]["status"] == "succeeded"


def test_edit_runs_the_edited_arguments(desk, client):
    edited = {**ARGUMENTS, "amount": 100}
    ticket, decision = decided(desk, client, "edit", arguments=edited, reason="too much")
    verified = client.verify(decision, ticket, current_arguments=ARGUMENTS)
    assert (verified.verdict, verified.arguments, verified.reason) == ("edit", edited, "too much")
    with pytest.raises(VerificationError, match="arguments_changed"):
        client.guard(verified, ARGUMENTS)  # the guard runs only the verified (edited) arguments
    client.guard(verified, edited)


def test_reject_carries_the_reviewers_reason(desk, client):
    ticket, decision = decided(desk, client, "reject", reason="not this customer")
    verified = client.verify(decision, ticket, current_arguments=ARGUMENTS)
    assert (verified.verdict, verified.reason, verified.approved) == ("reject", "not this customer", False)
    with pytest.raises(VerificationError, match="verdict"):
        client.guard(verified, ARGUMENTS)


def test_an_edit_the_framework_cannot_express_is_refused_by_the_desk(desk, client):
    ticket = submit_one(client, verdicts=("approve", "reject"))
    assert "edit" not in ticket.verdicts
    status, body = desk.try_decide(ticket.approval_id, "edit", arguments={**ARGUMENTS, "amount": 1})
    assert (status, body["code"]) == (422, "verdict")


def test_edit_without_a_schema_is_dropped(desk, client):
    ticket = submit_one(client, schema=None)
    assert ticket.verdicts == ("approve", "reject")


# --- C2: what verification refuses --------------------------------------------------------------
PAYLOAD_FLIPS = {
    "decision_id": "00000000-0000-0000-0000-000000000000",
    "request_id": "00000000-0000-0000-0000-000000000000",
    "run_id": "00000000-0000-0000-0000-000000000000",
    "checkpoint_id": "00000000-0000-0000-0000-000000000000",
    "tool_call_id": "call_2",
    "tool": "delete_account",
    "arguments_sha256": "0" * 64,
    "verdict": "edit",
    "reviewer": "mallory",
    "issued_at": "2020-01-01T00:00:00Z",
    "not_after": "2999-01-01T00:00:00Z",
    "nonce": "0" * 32,
    "audience": "other-service",
    "external_id": "test:other",
    "external_checkpoint": "ckpt-other",
    "reason_sha256": "0" * 64,
}


@pytest.fixture(scope="module")
def approved(desk):
    """One real approval, decided by alice, read by a client of its own (never consumed)."""
    client = desk.client()
    ticket, decision = decided(desk, client, "approve")
    return client, ticket, decision


def test_the_desks_decision_verifies(approved):
    client, ticket, decision = approved
    assert decision["payload_b64"] and decision["key_id"] in client.keys.key_ids()
    assert client.verify(decision, ticket, current_arguments=ARGUMENTS).verdict == "approve"


@pytest.mark.parametrize("field", sorted(PAYLOAD_FLIPS))
def test_flipping_any_payload_field_is_refused(approved, field):
    client, ticket, decision = approved
    assert field in decision["payload"], f"the desk's payload has no {field}"
    payload = {**decision["payload"], field: PAYLOAD_FLIPS[field]}
    with pytest.raises(VerificationError, match="signature"):
        client.verify(resigned(decision, payload), ticket, current_arguments=ARGUMENTS)


def test_a_payload_served_apart_from_the_signed_bytes_is_refused(approved):
    client, ticket, decision = approved
    forged = {**decision, "payload": {**decision["payload"], "verdict": "edit"}}
    with pytest.raises(VerificationError, match="payload"):
        client.verify(forged, ticket, current_arguments=ARGUMENTS)


def test_another_pinned_key_id_is_refused(desk, approved):
    _, ticket, decision = approved
    other = Ed25519PrivateKey.generate().public_key()
    raw = other.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    keys = KeyRing(desk.keys)
    keys.add("ed25519:other", base64.b64encode(raw).decode())
    forged = {**decision, "key_id": "ed25519:other"}
    with pytest.raises(VerificationError, match="signature"):
        verify_decision(forged, ticket, current_arguments=ARGUMENTS, keys=keys)


def test_a_decision_signed_by_an_unpinned_key_is_refused(approved):
    client, ticket, decision = approved
    forger = Ed25519PrivateKey.generate()
    payload = {**decision["payload"], "key_id": "ed25519:forger"}
    forged = {
        **resigned(decision, payload),
        "key_id": "ed25519:forger",
        "signature": base64.b64encode(forger.sign(jcs(payload))).decode(),
    }
    with pytest.raises(VerificationError, match="unpinned_key"):
        client.verify(forged, ticket, current_arguments=ARGUMENTS)
    # With no key pinned at all, the desk's own decision is refused too.
    with pytest.raises(VerificationError, match="unpinned_key"):
        verify_decision(decision, ticket, current_arguments=ARGUMENTS, keys=KeyRing())


@pytest.mark.parametrize(
    "field,value",
    [
        ("audience", "other-service"),
        ("external_id", "test:another-run"),
        ("external_checkpoint", "ckpt-other"),
        ("tool", "delete_account"),
        ("run_id", "00000000-0000-0000-0000-000000000000"),
    ],
)
def test_a_ticket_of_another_binding_refuses_it(approved, field, value):
    client, ticket, decision = approved
    with pytest.raises(VerificationError, match=f"binding:{field}"):
        client.verify(decision, dataclasses.replace(ticket, **{field: value}), current_arguments=ARGUMENTS)


def test_another_runs_decision_for_the_same_call_id_is_refused(desk, client):
    """Two external runs, both with `call_1`: run A's decision never verifies for run B."""
    ticket_a = submit_one(client)
    ticket_b = submit_one(client)
    assert ticket_a.tool_call_id == ticket_b.tool_call_id and ticket_a.external_id != ticket_b.external_id
    desk.decide(ticket_a.approval_id, "approve")
    decision_a = client.outcome(ticket_a).decision
    with pytest.raises(VerificationError, match="binding:"):
        client.verify(decision_a, ticket_b, current_arguments=ARGUMENTS)


def test_arguments_changed_after_submission_are_refused(approved):
    client, ticket, decision = approved
    with pytest.raises(VerificationError, match="arguments_changed"):
        client.verify(decision, ticket, current_arguments={**ARGUMENTS, "amount": 251})


def test_edited_arguments_other_than_the_signed_ones_are_refused(desk, client):
    ticket, decision = decided(desk, client, "edit", arguments={**ARGUMENTS, "amount": 10})
    forged = {**decision, "arguments": {**ARGUMENTS, "amount": 999}}
    with pytest.raises(VerificationError, match="binding:arguments_sha256"):
        client.verify(forged, ticket, current_arguments=ARGUMENTS)


def test_a_reason_other_than_the_signed_one_is_refused(desk, client):
    ticket, decision = decided(desk, client, "reject", reason="no")
    with pytest.raises(VerificationError, match="binding:reason_sha256"):
        client.verify({**decision, "reason": "yes, go ahead"}, ticket, current_arguments=ARGUMENTS)


def test_a_verdict_the_ticket_does_not_allow_is_refused(desk, client):
    ticket, decision = decided(desk, client, "edit", arguments={**ARGUMENTS, "amount": 10})
    narrowed = dataclasses.replace(ticket, verdicts=("approve", "reject"))
    with pytest.raises(VerificationError, match="verdict"):
        client.verify(decision, narrowed, current_arguments=ARGUMENTS)


def test_an_expired_decision_is_refused(approved):
    client, ticket, decision = approved
    not_after = _rfc3339(decision["payload"]["not_after"])
    keys = client.keys
    verify_decision(
        decision, ticket, current_arguments=ARGUMENTS, keys=keys, now=not_after - timedelta(seconds=1)
    )
    with pytest.raises(VerificationError, match="expired"):
        verify_decision(decision, ticket, current_arguments=ARGUMENTS, keys=keys, now=not_after)
    issued = _rfc3339(decision["payload"]["issued_at"])
    with pytest.raises(VerificationError, match="not_yet_valid"):
        verify_decision(
            decision, ticket, current_arguments=ARGUMENTS, keys=keys, now=issued - timedelta(minutes=5)
        )


def test_a_replayed_decision_is_refused(desk, client):
    ticket, decision = decided(desk, client, "approve")
    verified = client.verify(decision, ticket, current_arguments=ARGUMENTS)
    client.consume(verified)
    with pytest.raises(VerificationError, match="replayed"):
        client.verify(decision, ticket, current_arguments=ARGUMENTS)
    with pytest.raises(AlreadyConsumed):
        client.consume(verified)
    # Another replica (no local record) is refused by the desk's compare-and-set.
    replica = desk.client()
    replayed = replica.verify(decision, ticket, current_arguments=ARGUMENTS)
    with pytest.raises(AlreadyConsumed) as refused:
        replica.consume(replayed)
    assert (refused.value.status, refused.value.code) == (409, "consumed")


# --- C3: single use across threads and replicas -------------------------------------------------
def race(consumers) -> list[str]:
    barrier = threading.Barrier(len(consumers))
    results: list[str] = []

    def one(consume):
        barrier.wait()
        try:
            consume()
            results.append("ok")
        except AlreadyConsumed:
            results.append("consumed")

    threads = [threading.Thread(target=one, args=(c,)) for c in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return sorted(results)


def test_two_replicas_consuming_at_once_exactly_one_wins(desk, client):
    ticket, decision = decided(desk, client, "approve")
    replicas = [desk.client(store=MemoryStore()) for _ in range(4)]
    verified = [r.verify(decision, ticket, current_arguments=ARGUMENTS) for r in replicas]
    assert race([lambda r=r, v=v: r.consume(v) for r, v in zip(replicas, verified, strict=True)]) == [
        "consumed",
        "consumed",
        "consumed",
        "ok",
    ]


def test_one_client_consuming_from_two_threads_exactly_one_wins(desk, client):
    ticket, decision = decided(desk, client, "approve")
    verified = client.verify(decision, ticket, current_arguments=ARGUMENTS)
    assert race([lambda: client.consume(verified)] * 2) == ["consumed", "ok"]


def test_a_refused_consume_leaves_the_nonce_usable(desk, client):
    """Only a spent decision is remembered as consumed: a consume the desk refused for another
    reason (here: a decision id that is not the approval's) can be tried again."""
    ticket, decision = decided(desk, client, "approve")
    verified = client.verify(decision, ticket, current_arguments=ARGUMENTS)
    with pytest.raises(DeskError) as refused:
        client.consume(dataclasses.replace(verified, decision_id="00000000-0000-0000-0000-000000000000"))
    assert refused.value.status in (404, 422)
    client.consume(verified)


# --- C6: four eyes ---------------------------------------------------------------------------------
def test_the_submitter_cannot_decide_its_own_external_approval(desk, client):
    ticket = submit_one(client)
    status, body = desk.try_decide(ticket.approval_id, "approve", as_="svc_review")
    assert status == 403, body
    assert client.outcome(ticket) is None
    desk.decide(ticket.approval_id, "approve", as_="bob")  # any other reviewer may
    assert client.outcome(ticket).status == "approved"


def test_only_the_submitter_may_consume(desk, client):
    ticket, decision = decided(desk, client, "approve")
    verified = client.verify(decision, ticket, current_arguments=ARGUMENTS)
    status, _ = desk.api(
        "POST",
        f"/api/v1/approvals/{ticket.approval_id}/consume",
        as_="alice",
        body={"decision_id": verified.decision_id, "nonce": verified.nonce},
    )
    assert status in (403, 404)
    client.consume(verified)


def test_the_async_client_does_the_same_flow(desk, client):
    async def flow():
        adesk = AsyncDeskClient(desk=client)
        call = adesk.call("call_1", "refund_payment", ARGUMENTS, verdicts=("approve", "reject"))
        [ticket] = await adesk.submit(
            external_id=external_id(), framework="test", agent="support-bot", checkpoint="c", calls=[call]
        )
        assert await adesk.outcome(ticket) is None
        await asyncio.to_thread(desk.decide, ticket.approval_id, "approve")
        outcome = await adesk.wait(ticket, 10)
        verified = adesk.verify(outcome.decision, ticket, current_arguments=ARGUMENTS)
        await adesk.guard(verified, ARGUMENTS)
        await adesk.report_tool(verified, "confirmed")
        return (await adesk.report_run(ticket.run_id, "succeeded"))["run"]["status"]

    assert asyncio.run(flow()) == "succeeded"


def test_a_decision_id_or_verdict_served_apart_from_the_payload_is_refused(approved):
    client, ticket, decision = approved
    with pytest.raises(VerificationError, match="binding:decision_id"):
        client.verify(
            {**decision, "id": "00000000-0000-0000-0000-000000000000"}, ticket, current_arguments=ARGUMENTS
        )
    with pytest.raises(VerificationError, match="binding:verdict"):
        client.verify({**decision, "verdict": "reject"}, ticket, current_arguments=ARGUMENTS)


def test_a_nonce_consumed_here_is_refused_without_asking_the_desk(desk, client):
    ticket, decision = decided(desk, client, "approve")
    verified = client.verify(decision, ticket, current_arguments=ARGUMENTS)
    client.consume(verified)
    client.http.url = "http://127.0.0.1:9"  # nothing listens: a request would fail as unreachable
    with pytest.raises(AlreadyConsumed) as refused:
        client.consume(verified)
    assert "here before" in refused.value.detail


def test_cancelling_the_run_settles_its_approvals_without_a_decision(desk, client):
    ticket = submit_one(client)
    client.cancel_run(ticket.run_id)
    outcome = client.wait(ticket, 10)
    assert (outcome.status, outcome.decision) == ("cancelled", None)


def test_the_desks_published_keys_are_trusted_on_first_use_with_a_warning(desk):
    unpinned = desk.client(keys=KeyRing())
    ticket, decision = decided(desk, unpinned, "approve")
    with pytest.raises(VerificationError, match="unpinned_key"):
        unpinned.verify(decision, ticket, current_arguments=ARGUMENTS)
    with pytest.warns(UserWarning, match="trust"):
        fetched = unpinned.pin_fetched_keys()
    assert set(fetched.key_ids()) == set(desk.keys)
    assert unpinned.verify(decision, ticket, current_arguments=ARGUMENTS).verdict == "approve"


def test_a_call_a_standing_grant_covers_comes_back_approved_and_verifies(desk, client):
    agent = f"granted-{external_id()}"  # its own agent: the grant must allow no other test's call
    first = submit_one(client, agent=agent)
    desk.decide(first.approval_id, "approve", grant={"match": "exact", "scope": "agent", "max_uses": 1})
    covered = submit_one(client, agent=agent)
    assert covered.status == "approved"
    outcome = client.outcome(covered)
    verified = client.verify(outcome.decision, covered, current_arguments=ARGUMENTS)
    assert verified.verdict == "approve" and verified.approval_id == covered.approval_id
    client.guard(verified, ARGUMENTS)
    assert submit_one(client, agent=agent).status == "pending"  # its one use is spent
