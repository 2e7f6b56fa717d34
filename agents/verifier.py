"""Verifying what authorises a call: a signed decision bound to exactly this call, a quorum
of them, the signed texts about to reach the model, or a standing grant. The approval gate
(agents/gate.py) verifies through this before it consumes anything or runs a tool.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from agents.canonical import sha256_hex
from agents.decisions import (
    APPROVING_VERDICTS,
    SignedDecision,
    is_device_signed,
    payload_version,
    signature_valid,
    signed_texts_mismatch,
)
from agents.failures import DecisionRefused
from agents.grants import GrantRefused, SignedGrant, verify_grant
from agents.ledger import CallBinding, Keyring
from agents.tools import Tool
from agents.trust import DeviceRefused, DeviceTrust, verify_with_trust


def _utcnow() -> datetime:
    return datetime.now(UTC)


class DecisionVerifier:
    """Checks that a signed decision (or a quorum of them, or a standing grant) authorises
    exactly one call. Reads nothing but its arguments, its keyring and its callbacks."""

    def __init__(
        self,
        *,
        keyring: Keyring,
        # (reviewer, run id, request id): may this reviewer still decide that request of the run?
        reviewer_allowed: Callable[[str, str, str], bool],
        # (reviewer, run id): may the reviewer who made a grant still decide this run's calls?
        grantor_allowed: Callable[[str, str, str, Any], bool],
        now: Callable[[], datetime] = _utcnow,
        agent: str = "",
        device_trust: DeviceTrust | None = None,
        device_required: Callable[[str], bool] = lambda tool: False,
    ) -> None:
        self.keyring = keyring
        self.reviewer_allowed = reviewer_allowed
        self.grantor_allowed = grantor_allowed
        self.now = now
        self.agent = agent  # the run's agent, which an agent-scoped grant must name
        # Device keys (agents.trust): the pinned roots and the records vouching for a key, and
        # which tools (by name) accept only a decision signed by the reviewer's own device.
        self.device_trust = device_trust
        self.device_required = device_required

    def verify(
        self,
        decision: SignedDecision,
        binding: CallBinding,
        *,
        verdicts: tuple[str, ...] = APPROVING_VERDICTS,
    ) -> None:
        """Raise DecisionRefused unless `decision` authorises exactly this call."""
        payload = self._signed_payload(decision)
        if self.device_required(binding.tool) and not is_device_signed(payload):
            raise DecisionRefused(f"{binding.tool} requires a decision signed by the reviewer's device key")
        expected = {
            "decision_id": decision.decision_id,
            "run_id": binding.run_id,
            "checkpoint_id": binding.checkpoint_id,
            "tool_call_id": binding.tool_call_id,
            "tool": binding.tool,
            "verdict": decision.verdict,
            "arguments_sha256": sha256_hex(decision.arguments),
        }
        for name, value in expected.items():
            if payload.get(name) != value:
                raise DecisionRefused(f"decision is not bound to this call ({name} differs)")
        if decision.verdict not in verdicts:
            raise DecisionRefused(f"verdict {decision.verdict!r} does not approve this call")
        try:
            not_after = datetime.fromisoformat(payload["not_after"])
        except (KeyError, TypeError, ValueError):
            raise DecisionRefused("decision has no valid not_after") from None
        if not_after.tzinfo is None:  # comparing it with an aware now() would raise TypeError
            raise DecisionRefused("decision has no valid not_after (no time zone)")
        if self.now() >= not_after:
            raise DecisionRefused("decision has expired")
        reviewer, request_id = str(payload.get("reviewer")), str(payload.get("request_id"))
        if not self.reviewer_allowed(reviewer, binding.run_id, request_id):
            raise DecisionRefused("reviewer is no longer allowed to approve this run")

    def verify_quorum(
        self,
        decision: SignedDecision,
        binding: CallBinding,
        *,
        required: int,
        verdicts: tuple[str, ...] = APPROVING_VERDICTS,
    ) -> None:
        """Raise DecisionRefused unless `required` different reviewers each signed a decision of
        `verdicts` (an approval; for a re-run, a re-run) for exactly this call and these
        arguments: `decision` (verified by the caller) and its co-decisions. One reviewer's two
        decisions count once."""
        reviewers = {str(decision.payload.get("reviewer"))}
        for vote in decision.co_decisions:
            self.verify(vote, binding, verdicts=verdicts)
            if sha256_hex(vote.arguments) != sha256_hex(decision.arguments):
                raise DecisionRefused("the quorum's approvals are not for the same arguments")
            reviewers.add(str(vote.payload.get("reviewer")))
        if len(reviewers) < required:
            raise DecisionRefused(
                f"this call needs approvals from {required} different reviewers; it has {len(reviewers)}"
            )

    def verify_texts(self, decision: SignedDecision, binding: CallBinding, **texts: str) -> None:
        """Raise DecisionRefused unless `decision` is signed for this call and its signature
        covers exactly `texts` (reason=, note=, external_ref=), the words about to reach the
        model in the reviewer's name. Any verdict: a rejection's reason is checked too."""
        payload = self._signed_payload(decision)
        for name, value in (
            ("decision_id", decision.decision_id),
            ("run_id", binding.run_id),
            ("tool_call_id", binding.tool_call_id),
            ("verdict", decision.verdict),
        ):
            if payload.get(name) != value:
                raise DecisionRefused(f"decision is not bound to this call ({name} differs)")
        mismatch = signed_texts_mismatch(payload, **texts)
        if mismatch is not None:
            raise DecisionRefused(f"the decision's {mismatch} does not match what the reviewer signed")

    def _signed_payload(self, decision: SignedDecision) -> dict[str, Any]:
        """The decision's payload, once its key is known and its signature verifies."""
        payload = decision.payload
        if is_device_signed(payload):
            try:
                return verify_with_trust(self.device_trust, decision, now=self.now())
            except DeviceRefused as exc:
                raise DecisionRefused(exc.reason) from None
        public_key = self.keyring.public_key(decision.key_id)
        if public_key is None:
            raise DecisionRefused(f"unknown signing key {decision.key_id!r}")
        if payload.get("key_id") != decision.key_id:
            raise DecisionRefused("key id does not match the signed payload")
        if not signature_valid(public_key, payload, decision.signature):
            raise DecisionRefused("signature does not verify")
        if payload_version(payload) is None:
            raise DecisionRefused(f"unknown decision payload version {payload.get('version')!r}")
        return payload

    def verify_grant(self, grant: SignedGrant, tool: Tool, binding: CallBinding, arguments: Any) -> None:
        """Raise GrantRefused unless `grant` is signed, in date and covers exactly this call.
        Its uses and revocation are checked by the ledger when the use is recorded."""
        if self.device_required(binding.tool):  # a grant is server-signed: no device vouches for it
            raise GrantRefused(f"{binding.tool} requires a decision signed by the reviewer's device key")
        verify_grant(
            grant,
            grantable=tool.accepts_grants,
            keyring=self.keyring,
            agent=self.agent,
            binding=binding,
            arguments=arguments,
            now=self.now(),
            grantor_allowed=self.grantor_allowed,
        )
