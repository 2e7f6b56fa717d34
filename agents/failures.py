"""How a call through the gate can fail to run, and what each failure lets the loop do next."""

from __future__ import annotations


class DecisionRefused(Exception):
    """The decision does not authorise this call; the tool did not run."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ApprovalNeeded(DecisionRefused):
    """The tool's policy, asked again with the world as it stands just before the effect,
    wants a human for a call that has no decision: the call waits for one, like any other."""


class EffectUnknown(Exception):
    """A previous attempt may or may not have performed this effect: a human must say."""


class TransientFailure(Exception):
    """The tool failed transiently and its effect certainly did not happen; the ledger row
    says `retrying`. `call_retries` and `run_retries` count the failed tries so far, of
    this call and of the whole run, for the loop's retry budget."""

    def __init__(self, error: str, *, call_retries: int, run_retries: int) -> None:
        super().__init__(error)
        self.error = error
        self.call_retries = call_retries
        self.run_retries = run_retries


class RolledBack(Exception):
    """Carries a tool's failure out of the transaction it rolled back."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def describe(exc: Exception) -> str:
    """A failure as the ledger and the run's error keep it: its type, and its message if any."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
