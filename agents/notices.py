"""What the turn loop tells the model in the desk's own words: a rejection, a long wait."""

from __future__ import annotations

from datetime import datetime, timedelta

from agents.state import CallState, CallStatus


def rejection(call: CallState, reason: str) -> str:
    reason = reason or "no reason given"
    if call.status == CallStatus.UNKNOWN:
        return (
            "This call was interrupted and it is unknown whether it took effect; "
            f"a reviewer chose not to run it again: {reason}"
        )
    return f"A reviewer rejected this call: {reason}"


def wait_notice(waiting_since: str | None, now: datetime, after: timedelta) -> str | None:
    """A note for the model when the run waited `after` or longer for a human."""
    if not waiting_since:
        return None
    waited = now - datetime.fromisoformat(waiting_since)
    if waited < after:
        return None
    return (
        f"[Review Desk] This run waited {duration(waited)} for human review before resuming. "
        "Facts you looked up before the wait may have changed; check them again before relying on them."
    )


def duration(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    parts = [f"{days} d"] * bool(days) + [f"{hours} h"] * bool(hours) + [f"{minutes} min"]
    return " ".join(parts)
