"""Standing grants in the runtime: the constraint language, what the gate refuses (and that
refused means not run), the use limit, and the loop asking a human when a grant fails."""

from __future__ import annotations

import atexit
import base64
import shutil
import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agents.canonical import sha256_hex
from agents.decisions import sign_payload
from agents.gate import ApprovalGate, CallBinding, GrantRefused, TransientFailure
from agents.grants import SignedRevocation, constraint_errors, constraints_match, revocation_payload, revokes
from agents.loop import Finished, Waiting, advance
from agents.providers.scripted import ScriptedProvider
from agents.registry import get_agent
from agents.routing import Quorum
from agents.sandbox import shared_tmp_dir
from agents.state import CallStatus
from agents.testing.host import InMemoryHost
from agents.testing.keys import StaticKeyring, generate_signing_key, sign_decision, sign_grant
from agents.testing.ledger import InMemoryLedger
from agents.testing.world import RecordingWorld
from agents.tools import ToolContext, ToolUnavailable

DEMO = get_agent("demo")
SEND_EMAIL = DEMO.tool("send_email")
EXECUTE = DEMO.tool("execute")
SCRATCH = Path(tempfile.mkdtemp(prefix="grants-", dir=shared_tmp_dir()))
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)
EMAIL = {"to": "ada@example.com", "subject": "Hi", "body": "x"}
NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
RUN = "run-1"


# --- the constraint language ------------------------------------------------------------


@pytest.mark.parametrize(
    "constraints, field",
    [
        ({"to": {"regex": ".*"}}, "to"),
        ({"cc": {"eq": "x"}}, "cc"),
        ({"to": {"lte": "x"}}, "to"),
        ({"to": {"endswith": ""}}, "to"),
        ({"to": {"in": []}}, "to"),
        ({"to": {"eq": {"nested": 1}}}, "to"),
        ({"to": {"eq": 2**60}}, "to"),
        ({"to": {}}, "to"),
        ({}, "match"),
        ("to ends with example.com", "match"),
    ],
)
def test_a_constraint_that_is_not_in_the_language_is_named_by_field(constraints, field):
    assert field in constraint_errors(constraints, SEND_EMAIL.parameters)


@pytest.mark.parametrize("operand", [2**60, -(2**60), float("inf"), float("nan")])
def test_a_number_bound_outside_canonical_json_is_named_not_signed(operand):
    # lte/gte are signed like eq: a bound RFC 8785 cannot write would fail at signing (a 500)
    errors = constraint_errors({"amount": {"lte": operand}}, DEMO.tool("refund_payment").parameters)
    assert "amount" in errors
    assert constraint_errors({"amount": {"gte": 2**53 - 1}}, DEMO.tool("refund_payment").parameters) == {}


def test_a_constraint_in_the_language_has_no_errors():
    constraints = {"to": {"endswith": "@example.com", "startswith": "a"}, "subject": {"in": ["Hi", "Hello"]}}
    assert constraint_errors(constraints, SEND_EMAIL.parameters) == {}


@pytest.mark.parametrize(
    "constraints, arguments, matches",
    [
        ({"to": {"endswith": "@example.com"}}, {"to": "ada@example.com"}, True),
        ({"to": {"endswith": "@example.com"}}, {"to": "ada@example.com.evil.org"}, False),
        ({"to": {"startswith": "ada@"}}, {"to": "bob@example.com"}, False),
        ({"amount": {"lte": 50}}, {"amount": 50}, True),
        ({"amount": {"lte": 50}}, {"amount": 50.01}, False),
        ({"amount": {"gte": 10, "lte": 50}}, {"amount": 9}, False),
        ({"amount": {"lte": 50}}, {"amount": "1"}, False),  # a string is no number
        ({"amount": {"lte": 50}}, {"amount": True}, False),  # nor is a boolean
        ({"amount": {"eq": 1}}, {"amount": 1.0}, True),  # canonical JSON: 1 and 1.0 are one number
        ({"amount": {"eq": 1}}, {"amount": True}, False),
        ({"order_id": {"in": ["A-1", "A-2"]}}, {"order_id": "A-2"}, True),
        ({"order_id": {"in": ["A-1", "A-2"]}}, {"order_id": "A-3"}, False),
        ({"order_id": {"eq": "A-1"}}, {}, False),  # a missing argument never matches
        ({"to": {"endswith": "@example.com"}}, {"to": None}, False),
    ],
)
def test_constraints_match_exactly_as_documented(constraints, arguments, matches):
    assert constraints_match(constraints, arguments) is matches


# --- the gate -------------------------------------------------------------------------


class Gate:
    def __init__(self, *, agent: str = "demo", allowed: frozenset[str] = frozenset({"alice"})) -> None:
        self.key, self.key_id = generate_signing_key()
        self.world = RecordingWorld()
        self.ledger = InMemoryLedger(resources=[self.world])
        self.gate = ApprovalGate(
            keyring=StaticKeyring.of(self.key),
            ledger=self.ledger,
            reviewer_allowed=lambda reviewer, run_id, request_id: reviewer in allowed,
            grantor_allowed=lambda reviewer, run_id, *_: reviewer in allowed,
            now=lambda: NOW,
            agent=agent,
        )

    def grant(self, **options):
        options.setdefault("run_id", RUN)
        options.setdefault("expires_at", NOW + timedelta(hours=1))
        options.setdefault("arguments", EMAIL)
        return sign_grant(self.key, key_id=self.key_id, tool=options.pop("tool", "send_email"), **options)

    def run(self, grant, *, call="call_0_0", tool=SEND_EMAIL, arguments=EMAIL, run_id=RUN):
        binding = CallBinding(run_id=run_id, checkpoint_id=None, tool_call_id=call, tool=tool.name)
        ctx = ToolContext(
            run_id=run_id,
            tool_call_id=call,
            idempotency_key=binding.idempotency_key,
            # The module's own directory: were a refusal here ever to fail (a mutant), `execute`
            # would run in it, never in the machine's /tmp.
            workdir=SCRATCH / run_id,
            world=self.world,
        )
        return self.gate.execute(
            tool=tool, binding=binding, arguments=dict(arguments), decision=None, ctx=ctx, grant=grant
        )


def test_a_valid_grant_runs_the_call_and_counts_one_use_with_the_ledger_row():
    desk = Gate()
    grant = desk.grant()
    assert desk.run(grant)["sent"] is True
    assert desk.ledger.grant_uses[grant.grant_id] == [f"{RUN}:call_0_0"]
    assert desk.ledger.rows[f"{RUN}:call_0_0"].status == "confirmed"


def test_a_tampered_grant_signature_is_refused_and_nothing_runs():
    desk = Gate()
    grant = desk.grant()
    signature = bytearray(base64.b64decode(grant.signature))
    signature[0] ^= 1
    with pytest.raises(GrantRefused, match="signature"):
        desk.run(replace(grant, signature=base64.b64encode(bytes(signature)).decode()))
    assert desk.world.emails == [] and desk.ledger.rows == {} and desk.ledger.grant_uses == {}


def test_a_grant_whose_payload_was_widened_after_signing_is_refused():
    desk = Gate()
    grant = desk.grant(max_uses=1)
    widened = replace(grant, payload={**grant.payload, "max_uses": 1000})
    with pytest.raises(GrantRefused, match="signature"):
        desk.run(widened)
    assert desk.world.emails == []


def test_a_grant_signed_by_an_unknown_key_is_refused():
    desk = Gate()
    other, other_id = generate_signing_key()
    grant = sign_grant(
        other,
        key_id=other_id,
        tool="send_email",
        run_id=RUN,
        arguments=EMAIL,
        expires_at=NOW + timedelta(hours=1),
    )
    with pytest.raises(GrantRefused, match="unknown signing key"):
        desk.run(grant)


def test_a_decision_is_no_grant():
    desk = Gate()
    decision = sign_decision(
        desk.key,
        key_id=desk.key_id,
        run_id=RUN,
        checkpoint_id=None,
        tool_call_id="call_0_0",
        tool="send_email",
        arguments=EMAIL,
    )
    grant = sign_grant(desk.key, key_id=desk.key_id, tool="send_email", run_id=RUN, arguments=EMAIL)
    forged = replace(
        grant, payload={**decision.payload, "grant_id": grant.grant_id}, signature=decision.signature
    )
    with pytest.raises(GrantRefused):
        desk.run(forged)
    assert desk.world.emails == []


def test_an_expired_grant_is_refused_by_the_gate():
    desk = Gate()
    with pytest.raises(GrantRefused, match="expired"):
        desk.run(desk.grant(expires_at=NOW))
    assert desk.world.emails == []


def test_a_run_scoped_grant_is_refused_on_another_run():
    desk = Gate()
    with pytest.raises(GrantRefused, match="another run"):
        desk.run(desk.grant(), run_id="run-2")


def test_an_agent_scoped_grant_is_refused_for_another_agent():
    desk = Gate(agent="other")
    with pytest.raises(GrantRefused, match="another agent"):
        desk.run(desk.grant(scope="agent"))


def test_an_exact_grant_is_refused_for_other_arguments_and_a_pattern_for_broken_constraints():
    desk = Gate()
    with pytest.raises(GrantRefused, match="arguments differ"):
        desk.run(desk.grant(), arguments={**EMAIL, "body": "y"})
    pattern = desk.grant(arguments=None, constraints={"to": {"endswith": "@example.org"}})
    with pytest.raises(GrantRefused, match="constraints"):
        desk.run(pattern)
    assert desk.world.emails == []


def test_a_grant_from_someone_who_may_not_decide_the_run_is_refused():
    desk = Gate(allowed=frozenset({"bob"}))
    with pytest.raises(GrantRefused, match="grantor"):
        desk.run(desk.grant(granted_by="alice"))


def test_a_never_grantable_tool_is_refused_whatever_the_grant():
    desk = Gate()
    grant = desk.grant(tool="execute", arguments={"command": "true"})
    with pytest.raises(GrantRefused, match="never grantable"):
        desk.run(grant, tool=EXECUTE, arguments={"command": "true"})


def test_a_quorum_tool_is_refused_a_grant_even_when_it_forgot_grantable_false():
    two_person = replace(SEND_EMAIL, quorum=Quorum(approvals=2))
    assert two_person.grantable and not two_person.accepts_grants
    desk = Gate()
    with pytest.raises(GrantRefused, match="never grantable"):
        desk.run(desk.grant(), tool=two_person)
    assert desk.world.emails == []


def test_a_quorum_tool_is_not_even_looked_up_for_a_grant():
    host = InMemoryHost()
    host.allow("send_email", arguments=EMAIL)
    tools = tuple(replace(t, quorum=Quorum(approvals=2)) if t.name == "send_email" else t for t in DEMO.tools)
    script = [{"tool_calls": [{"name": "send_email", "arguments": EMAIL}]}, {"content": "ok"}]
    outcome = advance(agent=replace(DEMO, tools=tools), provider=ScriptedProvider(script), host=host)
    assert isinstance(outcome, Waiting) and host.state().batch[0].grant_id is None


def test_a_grant_is_refused_past_its_signed_use_limit():
    desk = Gate()
    grant = desk.grant(max_uses=2)
    desk.run(grant, call="call_0_0")
    desk.run(grant, call="call_0_1")
    with pytest.raises(GrantRefused, match="used up"):
        desk.run(grant, call="call_0_2")
    assert len(desk.world.emails) == 2


def test_a_revoked_grant_is_refused_at_its_use():
    desk = Gate()
    grant = desk.grant()
    desk.ledger.revoked.add(grant.grant_id)
    with pytest.raises(GrantRefused, match="revoked"):
        desk.run(grant)
    assert desk.world.emails == []


def test_a_grant_for_one_tool_is_refused_for_another_whose_arguments_share_its_field_names():
    """A pattern over `to` and an exact argument hash say nothing of the tool: the signed tool
    name does. Another grantable tool taking the same fields (here a text message) is refused."""
    send_sms = replace(SEND_EMAIL, name="send_sms")
    desk = Gate()
    pattern = desk.grant(arguments=None, constraints={"to": {"endswith": "@example.com"}}, max_uses=5)
    with pytest.raises(GrantRefused, match="another tool"):
        desk.run(pattern, tool=send_sms, call="call_0_0")
    with pytest.raises(GrantRefused, match="another tool"):
        desk.run(desk.grant(), tool=send_sms, call="call_0_1")  # the same arguments, hash and all
    assert desk.world.emails == [] and desk.ledger.rows == {} and desk.ledger.grant_uses == {}
    assert desk.run(pattern, call="call_0_2")["sent"] is True  # its own tool: allowed


def test_a_retry_under_a_grant_that_has_since_expired_is_refused_and_sends_nothing():
    """The first try of a granted email failed certainly unsent (its use counted); by its retry
    the grant's signed expiry has passed. The ledger here knows nothing of expiry (only
    revocations), so it is the gate's own check of the signed payload that refuses it."""
    desk = Gate()
    grant = desk.grant(expires_at=NOW + timedelta(minutes=5))

    def unavailable(arguments, ctx):
        raise ToolUnavailable("mail server down")

    with pytest.raises(TransientFailure):
        desk.run(grant, tool=replace(SEND_EMAIL, func=unavailable))
    assert desk.ledger.rows[f"{RUN}:call_0_0"].status == "retrying"
    desk.gate.now = lambda: NOW + timedelta(minutes=6)
    with pytest.raises(GrantRefused, match="expired"):
        desk.run(grant)
    assert desk.world.emails == [] and desk.ledger.rows[f"{RUN}:call_0_0"].status == "retrying"


def test_a_revocation_revokes_only_the_grant_it_names_and_only_when_its_signature_verifies():
    key, key_id = generate_signing_key()
    keyring = StaticKeyring.of(key)
    payload = revocation_payload(grant_id="g-1", revoked_by="alice", revoked_at=NOW, key_id=key_id)
    signed = SignedRevocation(payload=payload, signature=sign_payload(key, payload))
    assert payload["type"] == "grant-revocation" and payload["revoked_at"] == "2030-01-02T03:04:05Z"
    assert revokes(signed, "g-1", keyring=keyring)
    assert not revokes(signed, "g-2", keyring=keyring)  # another grant's
    forged = SignedRevocation(payload={**payload, "grant_id": "g-2"}, signature=signed.signature)
    assert not revokes(forged, "g-2", keyring=keyring)  # the signature covers the grant id
    other, other_id = generate_signing_key()
    unknown = {**payload, "key_id": other_id}
    assert not revokes(SignedRevocation(unknown, sign_payload(other, unknown)), "g-1", keyring=keyring)
    grant = sign_grant(key, key_id=key_id, tool="send_email", run_id=RUN, arguments=EMAIL, grant_id="g-1")
    assert not revokes(
        SignedRevocation(grant.payload, grant.signature), "g-1", keyring=keyring
    )  # no revocation


# --- the loop -------------------------------------------------------------------------


def emails(n: int) -> list[dict]:
    return [{"tool_calls": [{"name": "send_email", "arguments": EMAIL}]} for _ in range(n)] + [
        {"content": "Done."}
    ]


def test_the_loop_runs_a_granted_call_without_raising_an_approval_up_to_the_limit_then_asks():
    host = InMemoryHost()
    grant = host.allow("send_email", arguments=EMAIL, max_uses=2)
    outcome = advance(agent=DEMO, provider=ScriptedProvider(emails(3)), host=host)
    assert isinstance(outcome, Waiting)
    assert len(host.world.emails) == 2 and len(host.approvals) == 1
    assert host.ledger.grant_uses[grant.grant_id] == [f"{host.run_id}:call_0_0", f"{host.run_id}:call_1_0"]
    host.approve(outcome.call_ids[0])
    assert advance(agent=DEMO, provider=ScriptedProvider(emails(3)), host=host) == Finished("Done.")
    assert len(host.world.emails) == 3


def test_a_grant_revoked_between_finding_and_using_it_asks_a_human_instead():
    host = InMemoryHost()
    grant = host.allow("send_email", arguments=EMAIL)
    real_grant = host.grant

    def revoke_then_load(grant_id):
        host.ledger.revoked.add(grant_id)  # revoked after the lookup, before the gate uses it
        return real_grant(grant_id)

    host.grant = revoke_then_load
    outcome = advance(agent=DEMO, provider=ScriptedProvider(emails(1)), host=host)
    assert isinstance(outcome, Waiting)
    assert host.world.emails == [] and not host.ledger.grant_uses.get(grant.grant_id)
    state = host.state()
    assert state.batch[0].status == CallStatus.AWAITING and state.batch[0].grant_id is None


def test_a_tampered_grant_found_by_the_host_asks_a_human_and_never_runs():
    host = InMemoryHost()
    grant = host.allow("send_email", arguments=EMAIL)
    host.grants[grant.grant_id] = replace(grant, payload={**grant.payload, "max_uses": 999})
    outcome = advance(agent=DEMO, provider=ScriptedProvider(emails(1)), host=host)
    assert isinstance(outcome, Waiting) and host.world.emails == []
    assert host.approval(outcome.call_ids[0]).name == "send_email"


def test_a_never_grantable_tool_is_not_even_looked_up():
    host = InMemoryHost()
    host.allow("execute", arguments={"command": "true"})
    script = [{"tool_calls": [{"name": "execute", "arguments": {"command": "true"}}]}, {"content": "ok"}]
    outcome = advance(agent=DEMO, provider=ScriptedProvider(script), host=host)
    assert isinstance(outcome, Waiting) and host.state().batch[0].grant_id is None


def test_the_exact_grant_binds_the_argument_hash():
    host = InMemoryHost()
    grant = host.allow("send_email", arguments=EMAIL)
    assert grant.payload["arguments_sha256"] == sha256_hex(EMAIL) and grant.payload["match"] == "exact"
