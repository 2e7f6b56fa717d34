"""The approval gate: the only road from a tool call to its side effect.

It sits inside the tool's execution path, not in any view: whatever asked for
the call, a tool that needs approval runs only after the gate has verified an
Ed25519-signed decision bound to exactly this run, checkpoint, call, tool and
argument hash, consumed it, and written the ledger row; or, for a call a standing
grant allows, verified the grant (agents/grants.py) and counted its use with the row.
"""

from __future__ import annotations

from typing import Any

from agents.decisions import (
    ANSWER_VERDICTS,
    APPROVING_VERDICTS,
    RERUN_VERDICTS,
    SignedDecision,
    answer_matches,
)
from agents.failures import (
    ApprovalNeeded,
    DecisionRefused,
    EffectUnknown,
    RolledBack,
    TransientFailure,
    describe,
)
from agents.grants import GrantRefused, SignedGrant
from agents.ledger import CallBinding, Keyring, Ledger, LedgerEntry, LedgerStatus
from agents.questions import asks_human
from agents.tools import Effect, Tool, ToolContext, ToolError, ToolUnavailable
from agents.verifier import DecisionVerifier

__all__ = [
    "APPROVING_VERDICTS",
    "RERUN_VERDICTS",
    "ApprovalGate",
    "ApprovalNeeded",
    "CallBinding",
    "DecisionRefused",
    "EffectUnknown",
    "GrantRefused",
    "Keyring",
    "Ledger",
    "LedgerEntry",
    "LedgerStatus",
    "SignedDecision",
    "SignedGrant",
    "TransientFailure",
]


class ApprovalGate(DecisionVerifier):
    """The verifier (agents/verifier.py) plus the ledger: verify, consume, record, then run."""

    def __init__(self, *, ledger: Ledger, **verifier_options: Any) -> None:
        super().__init__(**verifier_options)
        self.ledger = ledger

    def execute(
        self,
        *,
        tool: Tool,
        binding: CallBinding,
        arguments: dict[str, Any],
        decision: SignedDecision | None,
        ctx: ToolContext,
        grant: SignedGrant | None = None,
    ) -> Any:
        """Run the tool at most once for this call; return its (possibly recorded) result.
        `grant`: a standing grant the host found for a call that would otherwise ask."""
        key = binding.idempotency_key
        entry = self.ledger.entry(key)
        if entry is not None and entry.status == LedgerStatus.CONFIRMED:
            return entry.result  # finished before: never run twice, reuse the result
        if asks_human(tool):
            return self._answer(binding, decision)
        if entry is not None and entry.status == LedgerStatus.RETRYING:
            return self._retry(
                tool=tool,
                binding=binding,
                entry=entry,
                arguments=arguments,
                decision=decision,
                ctx=ctx,
                grant=grant,
            )
        if entry is not None and not (
            entry.status == LedgerStatus.PENDING and tool.effect == Effect.IDEMPOTENT_EXTERNAL
        ):
            # A re-run applies to an effect a human found unknown. A `pending` one means the
            # previous attempt (perhaps itself a re-run) was cut short: that goes to a human again.
            if (
                entry.status == LedgerStatus.UNKNOWN
                and decision is not None
                and decision.verdict in RERUN_VERDICTS
            ):
                return self._rerun(tool=tool, binding=binding, decision=decision, ctx=ctx)
            if entry.status == LedgerStatus.PENDING:
                self.ledger.mark_unknown(key)
            raise EffectUnknown(f"{tool.name} may already have run for {binding.tool_call_id}")
        if decision is not None and decision.verdict in RERUN_VERDICTS:
            raise DecisionRefused("a re-run decision only applies to an effect whose outcome is unknown")

        arguments, grant = self._authority(
            tool=tool, binding=binding, arguments=arguments, decision=decision, grant=grant
        )

        if tool.effect == Effect.READ and decision is None and grant is None:
            # No ledger write fences this call, and none may have since the attempt began (one
            # resumed with the call still ready): check it still owns the run before it reads.
            self.ledger.check_owned()
            try:
                self._allow_without_human(tool, arguments, ctx)
                return _run(tool, arguments, ctx)
            except RolledBack as rolled_back:
                raise self._transient(binding, decision, rolled_back.cause) from rolled_back.cause
            except ToolUnavailable as exc:
                raise self._transient(binding, decision, exc) from exc
        if tool.effect in (Effect.READ, Effect.DATABASE):
            return self._in_transaction(
                tool=tool,
                binding=binding,
                arguments=arguments,
                decision=decision,
                ctx=ctx,
                mode="first",
                grant=grant,
            )

        if entry is None:
            try:
                with self.ledger.atomic():
                    self._authorise(decision, grant, binding, tool=tool, arguments=arguments, ctx=ctx)
                    self.ledger.record(
                        key,
                        binding=binding,
                        status=LedgerStatus.PENDING,
                        decision_id=_decision_id(decision),
                    )
            except RolledBack as rolled_back:  # the policy could not read the world: nothing ran
                raise self._transient(binding, decision, rolled_back.cause) from rolled_back.cause
        else:
            # An idempotent effect an earlier attempt left `pending` (its decision consumed
            # then): tried again under the same key, so this attempt's confirm must find it.
            # A call with neither a decision nor a grant is asked its policy now in force, as
            # a first try is (the agent may have been redeployed since the worker died); one
            # the policy sends to a human comes back here with that human's decision, consumed
            # with the adoption (votes the first try consumed stay as they are).
            try:
                with self.ledger.atomic():
                    if decision is None and grant is None:
                        self._allow_without_human(tool, arguments, ctx)
                    self._consume_unused(decision)
                    self.ledger.adopt(key)
            except RolledBack as rolled_back:  # the policy could not read the world: nothing ran
                raise self._transient(binding, decision, rolled_back.cause) from rolled_back.cause
        return self._external(tool=tool, binding=binding, arguments=arguments, decision=decision, ctx=ctx)

    def _authority(
        self,
        *,
        tool: Tool,
        binding: CallBinding,
        arguments: dict[str, Any],
        decision: SignedDecision | None,
        grant: SignedGrant | None,
        verdicts: tuple[str, ...] = APPROVING_VERDICTS,
    ) -> tuple[dict[str, Any], SignedGrant | None]:
        """What lets this call run, verified, for a first try and a retry alike: its signed
        decision (with its quorum's votes), else a standing grant, else nothing: then the
        tool's policy is asked where the call is authorised (`_allow_without_human`), in the
        transaction that runs or records it. Returns the arguments to run (the decision's: an
        edit's own) and the grant in use (None when a decision answers)."""
        if decision is not None:
            self.verify(decision, binding, verdicts=verdicts)
            self.verify_quorum(decision, binding, required=tool.quorum.approvals, verdicts=verdicts)
            return decision.arguments, None
        if grant is not None:
            self.verify_grant(grant, tool, binding, arguments)
            return arguments, grant
        return arguments, None

    def _in_transaction(
        self,
        *,
        tool: Tool,
        binding: CallBinding,
        arguments: dict[str, Any],
        decision: SignedDecision | None,
        ctx: ToolContext,
        mode: str,
        grant: SignedGrant | None = None,
    ) -> Any:
        """A READ or DATABASE effect: the effect, the consumption and the ledger row commit
        together, so any failure of the tool rolls all three back: certainly undone,
        hence retried as transient."""
        key = binding.idempotency_key
        try:
            with self.ledger.atomic():
                if mode == "rerun":
                    self._consume_rerun(tool, binding, decision)
                else:
                    if mode == "retry" and not self.ledger.resume_retry(key):
                        raise EffectUnknown(f"another attempt is already retrying {binding.tool_call_id}")
                    self._authorise(decision, grant, binding, tool=tool, arguments=arguments, ctx=ctx)
                try:
                    with self.ledger.atomic():  # a savepoint: a ToolError undoes the effect only
                        result = tool.run(arguments, ctx)
                except ToolError as exc:
                    result = {"error": str(exc)}
                except Exception as exc:
                    raise RolledBack(exc) from exc
                if mode != "first":
                    self.ledger.confirm(key, result=result)
                else:
                    self.ledger.record(
                        key,
                        binding=binding,
                        status=LedgerStatus.CONFIRMED,
                        decision_id=_decision_id(decision),
                        result=result,
                    )
        except RolledBack as rolled_back:
            raise self._transient(binding, decision, rolled_back.cause) from rolled_back.cause
        return result

    def _external(
        self,
        *,
        tool: Tool,
        binding: CallBinding,
        arguments: dict[str, Any],
        decision: SignedDecision | None,
        ctx: ToolContext,
    ) -> Any:
        """Run an external effect whose ledger row says `pending`, and classify how it ended."""
        key = binding.idempotency_key
        try:
            result = _run(tool, arguments, ctx)
        except ToolUnavailable as exc:
            raise self._transient(binding, decision, exc) from exc
        except Exception as exc:
            if tool.effect == Effect.IDEMPOTENT_EXTERNAL:
                # It took our idempotency key: a repeat is safe, whatever happened.
                raise self._transient(binding, decision, exc) from exc
            # Sent, perhaps: nobody can tell from here. A human reconciles it; never re-run blindly.
            self.ledger.mark_unknown(key)
            raise EffectUnknown(f"{tool.name} failed with its outcome unknown: {describe(exc)}") from exc
        self.ledger.confirm(key, result=result)
        return result

    def _retry(
        self,
        *,
        tool: Tool,
        binding: CallBinding,
        entry: LedgerEntry,
        arguments: dict[str, Any],
        decision: SignedDecision | None,
        ctx: ToolContext,
        grant: SignedGrant | None = None,
    ) -> Any:
        """Try again a call whose last try certainly did not take effect (`retrying`)."""
        # The decision is still bound to this call and in date (the first try consumed it): a
        # re-run's decision keeps its verdict.
        verdicts = (
            RERUN_VERDICTS
            if decision is not None and decision.verdict in RERUN_VERDICTS
            else APPROVING_VERDICTS
        )
        arguments, grant = self._authority(
            tool=tool, binding=binding, arguments=arguments, decision=decision, grant=grant, verdicts=verdicts
        )
        if tool.effect in (Effect.READ, Effect.DATABASE):
            # Its first try rolled back with its consumption (or grant use): consumed now, with the effect.
            return self._in_transaction(
                tool=tool,
                binding=binding,
                arguments=arguments,
                decision=decision,
                ctx=ctx,
                mode="retry",
                grant=grant,
            )
        # The decision was consumed with the first `pending`, or the grant's use counted with
        # it: a grant revoked or expired since allows no second try ("revocable at once").
        if grant is not None and not self.ledger.grant_live(grant.grant_id):
            raise GrantRefused("the grant was revoked or has expired since this call's first try")
        # The row goes back to pending before the effect is tried, so a crash from here on
        # leaves it for a human.
        try:
            with self.ledger.atomic():
                if not self.ledger.resume_retry(binding.idempotency_key):
                    raise EffectUnknown(f"another attempt is already retrying {binding.tool_call_id}")
                self._consume_unused(decision)
                if decision is None and grant is None:
                    self._allow_without_human(tool, arguments, ctx)
        except RolledBack as rolled_back:  # the policy could not read the world: nothing ran
            raise self._transient(binding, decision, rolled_back.cause) from rolled_back.cause
        return self._external(tool=tool, binding=binding, arguments=arguments, decision=decision, ctx=ctx)

    def _consume_unused(self, decision: SignedDecision | None) -> None:
        """Consume what the first try did not: a grant allowed it, and the decision was asked
        for when the grant no longer did. Votes the first try consumed stay as they are; the
        compare-and-set on the row (`resume_retry`) is what keeps tries one at a time."""
        for vote in () if decision is None else (decision, *decision.co_decisions):
            self.ledger.consume(vote.decision_id)

    def _transient(
        self, binding: CallBinding, decision: SignedDecision | None, exc: Exception
    ) -> TransientFailure:
        error = describe(exc)
        call_retries = self.ledger.note_retry(
            binding.idempotency_key, binding=binding, decision_id=_decision_id(decision), error=error
        )
        return TransientFailure(
            error, call_retries=call_retries, run_retries=self.ledger.retries_spent(binding.run_id)
        )

    def _rerun(self, *, tool: Tool, binding: CallBinding, decision: SignedDecision, ctx: ToolContext) -> Any:
        """Reviewers checked that an interrupted effect did not happen and signed a re-run. It
        makes the effect happen, so it needs what the call needed: the tool's quorum of distinct
        reviewers, each with a signed re-run of exactly this call (DESIGN: Quorum)."""
        self.verify(decision, binding, verdicts=RERUN_VERDICTS)
        self.verify_quorum(decision, binding, required=tool.quorum.approvals, verdicts=RERUN_VERDICTS)
        if tool.effect in (Effect.READ, Effect.DATABASE):
            return self._in_transaction(
                tool=tool,
                binding=binding,
                arguments=decision.arguments,
                decision=decision,
                ctx=ctx,
                mode="rerun",
            )
        with self.ledger.atomic():
            self._consume_rerun(tool, binding, decision)
        return self._external(
            tool=tool, binding=binding, arguments=decision.arguments, decision=decision, ctx=ctx
        )

    def _consume_rerun(self, tool: Tool, binding: CallBinding, decision: SignedDecision | None) -> None:
        """Consume the re-run and every co-vote of its quorum, or none: the caller's transaction
        rolls back those consumed before one found used."""
        if decision is None or not all(
            self.ledger.consume(vote.decision_id) for vote in (decision, *decision.co_decisions)
        ):
            # Used already: that re-run started and was cut short before a new
            # reconciliation could be saved. Back to a human; never run it again here.
            raise EffectUnknown(f"the authorised re-run of {tool.name} was interrupted")
        self.ledger.reopen(binding.idempotency_key)

    def _answer(self, binding: CallBinding, decision: SignedDecision | None) -> Any:
        """A question's result is the answer a reviewer signed, verified, consumed and recorded."""
        if decision is None:
            raise DecisionRefused("a question needs a signed answer and has none")
        self.verify(decision, binding, verdicts=ANSWER_VERDICTS)
        if not answer_matches(decision.payload, decision.answer):
            raise DecisionRefused("the answer does not match what the reviewer signed")
        with self.ledger.atomic():
            self._consume(decision)
            self.ledger.record(
                binding.idempotency_key,
                binding=binding,
                status=LedgerStatus.CONFIRMED,
                decision_id=decision.decision_id,
                result=decision.answer,
            )
        return decision.answer

    def escalate(self, binding: CallBinding) -> None:
        """Retries are spent and the tool's policy asks a human: the `retrying` row becomes
        `unknown`, which the desk shows as a reconciliation (re-run, or reject)."""
        self.ledger.mark_unknown(binding.idempotency_key)

    def _consume(self, decision: SignedDecision | None) -> None:
        """Consume the decision and, under a quorum, every co-decision: each authorises once."""
        votes = () if decision is None else (decision, *decision.co_decisions)
        for vote in votes:
            if not self.ledger.consume(vote.decision_id):
                raise DecisionRefused("decision has already been used")

    def _authorise(
        self,
        decision: SignedDecision | None,
        grant: SignedGrant | None,
        binding: CallBinding,
        *,
        tool: Tool,
        arguments: dict[str, Any],
        ctx: ToolContext,
    ) -> None:
        """Consume the decision, or count one use of the grant against its signed limit (the
        ledger re-reads the grant's row now, so a revoked, expired or used-up grant is refused),
        or, with neither, ask the tool's policy in this transaction."""
        if decision is None and grant is None:
            self._allow_without_human(tool, arguments, ctx)
        self._consume(decision)
        if grant is not None and not self.ledger.use_grant(
            grant.grant_id, binding=binding, max_uses=int(grant.payload["max_uses"])
        ):
            raise GrantRefused("the grant is revoked, expired or used up")

    def _allow_without_human(self, tool: Tool, arguments: dict[str, Any], ctx: ToolContext) -> None:
        """Raise ApprovalNeeded unless the tool's policy lets this call run with no human.

        Called inside the transaction that runs the effect (a database effect) or records it
        `pending` (an external one), so a policy that reads the world and locks what it read
        (a refund limit per order, across runs) holds that lock until the effect commits: two
        runs cannot both pass on the same "what is left" (docs/writing-an-agent.md)."""
        try:
            needs_human = tool.needs_approval(arguments, (), world=ctx.world)
        except ToolUnavailable as exc:  # the world could not be read (a lock timeout): try again
            raise RolledBack(exc) from exc
        if needs_human:
            raise ApprovalNeeded(f"{tool.name}'s policy asks a human for this call now")


def _decision_id(decision: SignedDecision | None) -> str | None:
    return None if decision is None else decision.decision_id


def _run(tool: Tool, arguments: dict[str, Any], ctx: ToolContext) -> Any:
    try:
        return tool.run(arguments, ctx)
    except ToolError as exc:
        return {"error": str(exc)}
