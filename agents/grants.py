"""Standing grants ("always allow"): the runtime's half of the contract.

A reviewer who approves a call may allow, ahead of time, calls like it: the exact
same call (the tool and the SHA-256 of its RFC 8785 canonical arguments), or the
tool with constraints over its arguments. A grant has a scope (this run, this
agent, every agent with a tool of that name), an expiry and a use limit. It is
signed with the desk's Ed25519 key like a decision, over the payload built here,
so the desk (which signs) and the gate (which verifies) cannot drift apart.

The constraint language is small on purpose: top-level argument names, each with
one or more of six operators, all of which must hold:

    {"to": {"endswith": "@example.com"}, "amount": {"lte": 50}}

    eq          equal as canonical JSON (so 1 and 1.0 are equal, true and 1 are not)
    in          equal to one of a list of values
    startswith  a string argument starts with the string
    endswith    a string argument ends with the string
    lte, gte    a number argument is <= or >= the number

A missing argument, or one of the wrong type for its operator, never matches.

A grant payload says `"type": "grant"` and has no `decision_id`; a decision's has
no `type` and no `grant_id`: neither verifies as the other.

Revoking a grant signs a revocation with the same key (`"type": "grant-revocation"`: the
grant id, who revoked it and when). The ledger refuses a grant that any revocation it holds
names and that verifies under the keyring (`revokes`), whatever the grant's row says: clearing
a database column does not bring back a consent its grantor withdrew.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from agents.canonical import canonical_json, sha256_hex
from agents.decisions import rfc3339_signed, signature_valid
from agents.failures import DecisionRefused
from agents.ledger import CallBinding, Keyring
from agents.registry import Agent
from agents.state import CallState, CallStatus

GRANT_PAYLOAD_TYPE = "grant"
GRANT_PAYLOAD_VERSION = 1
REVOCATION_PAYLOAD_TYPE = "grant-revocation"
REVOCATION_PAYLOAD_VERSION = 1
MATCH_EXACT = "exact"
MATCH_CONSTRAINTS = "constraints"

STRING_OPERATORS = ("startswith", "endswith")
NUMBER_OPERATORS = ("lte", "gte")
OPERATORS = ("eq", "in", *STRING_OPERATORS, *NUMBER_OPERATORS)
MAX_CONSTRAINED_FIELDS = 20
MAX_IN_VALUES = 100
MAX_OPERAND_CHARS = 1000


class GrantScope(StrEnum):
    RUN = "run"  # only the run whose approval created it
    AGENT = "agent"  # any run of that agent
    GLOBAL = "global"  # any run of any agent, for a tool of that name


@dataclass(frozen=True)
class SignedGrant:
    """A grant as the gate receives it."""

    grant_id: str
    payload: dict[str, Any]
    signature: str  # base64
    key_id: str


@dataclass(frozen=True)
class SignedRevocation:
    """A grant's revocation as stored and pinned: its payload and the desk key's signature."""

    payload: dict[str, Any]
    signature: str  # base64


class GrantRefused(DecisionRefused):
    """The grant does not allow this call; the tool did not run. The loop asks a human instead
    (a host that does not catch it fails the call as for any refused decision)."""


# --- constraints ------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | bool) or _is_number(value)


def _operand_error(operator: str, operand: Any) -> str | None:
    if operator in STRING_OPERATORS:
        if not isinstance(operand, str) or not operand:
            return f"{operator} needs a non-empty string"
        return None if len(operand) <= MAX_OPERAND_CHARS else f"{operator}: the string is too long"
    if operator in NUMBER_OPERATORS:
        if not _is_number(operand):
            return f"{operator} needs a number"
        values = [operand]  # and canonical, as for eq: it is signed (2**60 and 1e999 are not)
    elif operator == "in":
        if not isinstance(operand, list) or not 0 < len(operand) <= MAX_IN_VALUES:
            return f"in needs a list of 1 to {MAX_IN_VALUES} values"
        values = operand
    else:
        values = [operand]
    if not all(_is_scalar(v) and len(str(v)) <= MAX_OPERAND_CHARS for v in values):
        return f"{operator} compares with strings, numbers, booleans or null only"
    try:
        canonical_json(values)  # it is signed and compared as RFC 8785 JSON: 2**53 and beyond cannot be
    except ValueError:
        return f"{operator}: a value is not representable as canonical JSON (RFC 8785)"
    return None


def constraint_errors(constraints: Any, parameters: Mapping[str, Any]) -> dict[str, list[str]]:
    """Why `constraints` is not a valid pattern for a tool whose JSON Schema is `parameters`,
    by field ({} when valid). Fields must be the tool's declared top-level properties."""
    if not isinstance(constraints, dict) or not constraints:
        return {"match": ['"exact", or an object of constraints over the arguments with at least one field']}
    if len(constraints) > MAX_CONSTRAINED_FIELDS:
        return {"match": [f"at most {MAX_CONSTRAINED_FIELDS} constrained fields"]}
    known = set((parameters.get("properties") or {}).keys())
    errors: dict[str, list[str]] = {}
    for field, rules in constraints.items():
        problems: list[str] = []
        if field not in known:
            problems.append(f"the tool has no argument {field!r}")
        elif not isinstance(rules, dict) or not rules:
            problems.append(f"an object of operators ({', '.join(OPERATORS)})")
        else:
            for operator, operand in rules.items():
                if operator not in OPERATORS:
                    problems.append(f"unknown operator {operator!r} (known: {', '.join(OPERATORS)})")
                elif (error := _operand_error(operator, operand)) is not None:
                    problems.append(error)
        if problems:
            errors[str(field)] = problems
    return errors


def _holds(operator: str, operand: Any, value: Any) -> bool:
    if operator == "eq":
        return canonical_json(value) == canonical_json(operand)
    if operator == "in":
        return any(canonical_json(value) == canonical_json(option) for option in operand)
    if operator in STRING_OPERATORS:
        if not isinstance(value, str):
            return False
        return value.startswith(operand) if operator == "startswith" else value.endswith(operand)
    if operator in NUMBER_OPERATORS:
        if not _is_number(value):
            return False
        return bool(value <= operand) if operator == "lte" else bool(value >= operand)
    return False  # an operator this code does not know allows nothing


def constraints_match(constraints: Mapping[str, Any], arguments: Mapping[str, Any]) -> bool:
    """Whether every constraint holds for `arguments` (unconstrained arguments are free)."""
    for field, rules in constraints.items():
        if field not in arguments or not isinstance(rules, dict):
            return False
        if not all(_holds(op, operand, arguments[field]) for op, operand in rules.items()):
            return False
    return True


# --- the signed record -------------------------------------------------------------


def grant_payload(
    *,
    grant_id: str,
    tool: str,
    agent: str,
    scope: str,
    run_id: str | None,
    arguments_sha256: str | None,
    constraints: dict[str, Any] | None,
    max_uses: int,
    issued_at: datetime,
    expires_at: datetime,
    granted_by: str,
    approval_id: str,
    key_id: str,
    nonce: str | None = None,
) -> dict[str, Any]:
    """The payload a grant's signature covers. Exactly one of `arguments_sha256` (an exact
    grant) and `constraints` (a pattern) is given; `run_id` only for scope `run`."""
    if (arguments_sha256 is None) == (constraints is None):
        raise ValueError("a grant is exact (arguments_sha256) or a pattern (constraints), not both")
    return {
        "type": GRANT_PAYLOAD_TYPE,
        "version": GRANT_PAYLOAD_VERSION,
        "grant_id": str(grant_id),
        "tool": tool,
        "agent": agent,
        "scope": str(scope),
        "run_id": None if run_id is None else str(run_id),
        "match": MATCH_EXACT if constraints is None else MATCH_CONSTRAINTS,
        "arguments_sha256": arguments_sha256,
        "constraints": constraints,
        "max_uses": max_uses,
        "issued_at": rfc3339_signed(issued_at),
        "expires_at": rfc3339_signed(expires_at),
        "granted_by": granted_by,
        "approval_id": str(approval_id),
        "nonce": nonce if nonce is not None else secrets.token_hex(16),
        "key_id": key_id,
    }


def revocation_payload(
    *, grant_id: str, revoked_by: str, revoked_at: datetime, key_id: str
) -> dict[str, Any]:
    """The payload a grant revocation's signature covers: which grant, who ended it, when."""
    return {
        "type": REVOCATION_PAYLOAD_TYPE,
        "version": REVOCATION_PAYLOAD_VERSION,
        "grant_id": str(grant_id),
        "revoked_by": revoked_by,
        "revoked_at": rfc3339_signed(revoked_at),
        "key_id": key_id,
    }


def revokes(revocation: SignedRevocation, grant_id: str, *, keyring: Keyring) -> bool:
    """Whether `revocation` revokes the grant `grant_id`: it names it and verifies under a key of
    the keyring. Anything else (another grant, a forged or damaged record) revokes nothing."""
    payload = revocation.payload
    if not isinstance(payload, dict) or payload.get("type") != REVOCATION_PAYLOAD_TYPE:
        return False
    if payload.get("grant_id") != str(grant_id):
        return False
    public_key = keyring.public_key(str(payload.get("key_id")))
    return public_key is not None and signature_valid(public_key, payload, str(revocation.signature))


def grant_mismatch(
    payload: Mapping[str, Any], *, agent: str, run_id: str, tool: str, arguments: Any
) -> str | None:
    """Why the grant's payload does not cover this call (its scope, tool or arguments), or None."""
    if payload.get("tool") != tool:
        return "it is for another tool"
    scope = payload.get("scope")
    if scope == GrantScope.RUN:
        if payload.get("run_id") != run_id:
            return "it is for another run"
    elif scope == GrantScope.AGENT:
        if payload.get("agent") != agent:
            return "it is for another agent"
    elif scope != GrantScope.GLOBAL:
        return f"unknown scope {scope!r}"
    if payload.get("match") == MATCH_EXACT:
        return None if payload.get("arguments_sha256") == sha256_hex(arguments) else "the arguments differ"
    constraints = payload.get("constraints")
    if payload.get("match") != MATCH_CONSTRAINTS or not isinstance(constraints, dict) or not constraints:
        return "it has no valid match"
    return None if constraints_match(constraints, arguments) else "the arguments break its constraints"


def verify_grant(
    grant: SignedGrant,
    *,
    keyring: Keyring,
    agent: str,
    binding: CallBinding,
    arguments: Any,
    now: datetime,
    grantor_allowed: Callable[[str, str, str, Any], bool],
    grantable: bool = True,
) -> dict[str, Any]:
    """The grant's signed payload, once it verifies and covers this call now; else GrantRefused.

    Its remaining uses and revocation live in the ledger: the gate asks it, in the same
    transaction as the ledger row (`Ledger.use_grant`). `grantable` is the tool's attribute."""
    if not grantable:
        raise GrantRefused(f"{binding.tool} is never grantable")
    public_key = keyring.public_key(grant.key_id)
    if public_key is None:
        raise GrantRefused(f"unknown signing key {grant.key_id!r}")
    payload = grant.payload
    if payload.get("key_id") != grant.key_id or payload.get("grant_id") != grant.grant_id:
        raise GrantRefused("the grant's id or key id does not match its signed payload")
    if not signature_valid(public_key, payload, grant.signature):
        raise GrantRefused("the grant's signature does not verify")
    if payload.get("type") != GRANT_PAYLOAD_TYPE or payload.get("version") != GRANT_PAYLOAD_VERSION:
        raise GrantRefused("not a grant payload this code knows")
    mismatch = grant_mismatch(
        payload, agent=agent, run_id=binding.run_id, tool=binding.tool, arguments=arguments
    )
    if mismatch is not None:
        raise GrantRefused(f"the grant does not cover this call: {mismatch}")
    try:
        expires_at = datetime.fromisoformat(str(payload["expires_at"]))
    except (KeyError, ValueError):
        raise GrantRefused("the grant has no valid expiry") from None
    if expires_at.tzinfo is None or now >= expires_at:
        raise GrantRefused("the grant has expired")
    if type(payload.get("max_uses")) is not int or payload["max_uses"] < 1:
        raise GrantRefused("the grant has no valid use limit")
    # Four eyes, assignment and routing hold for grants too: it allows only calls its grantor
    # could decide (grantor, run id, tool, arguments).
    if not grantor_allowed(str(payload.get("granted_by")), binding.run_id, binding.tool, arguments):
        raise GrantRefused("the grantor may not decide this call")
    return payload


# --- finding a grant for a call (the loop's side; the gate still verifies) -----------------


class GrantSource(Protocol):
    """The host's half (part of agents.loop.Host)."""

    def grant_for(self, call: CallState) -> str | None:
        """The id of a live standing grant that matches this call, which would otherwise ask
        a human; None when there is none. The gate verifies it before the call runs."""
        ...

    def grant(self, grant_id: str) -> SignedGrant | None:
        """The signed grant, as stored (revoked or not: the ledger checks that at use time)."""
        ...


def allow_by_grants(agent: Agent, host: GrantSource, batch: list[CallState]) -> None:
    """Each call of a fresh batch that would ask a human, and that a live grant matches, is
    ready to run under that grant (its id kept in the checkpoint) instead of asking."""
    for call in batch:
        tool = agent.tool(call.name)
        if call.status != CallStatus.AWAITING or tool is None or not tool.accepts_grants:
            continue
        call.grant_id = host.grant_for(call)
        if call.grant_id is not None:
            call.status = CallStatus.READY


def grant_of(host: GrantSource, call: CallState) -> SignedGrant:
    """The grant a ready call runs under; GrantRefused when it is gone."""
    grant = host.grant(str(call.grant_id))
    if grant is None:
        raise GrantRefused(f"grant {call.grant_id} is gone")
    return grant
