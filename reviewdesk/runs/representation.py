"""How a run's change reads in a desk event (`run.updated`): its id, status, revision and error."""

from __future__ import annotations

from typing import Any

from reviewdesk.lib.times import rfc3339_sortable
from reviewdesk.runs.models import FollowUp, Run


def run_data(run: Run) -> dict[str, Any]:
    return {
        "id": str(run.id),
        "agent": run.agent,
        "kind": run.kind,
        "status": run.status,
        "revision": run.revision,
        "error": run.error,
        "updated_at": rfc3339_sortable(run.updated_at),
    }


def run_follow_up_data(run: Run, follow_up: FollowUp) -> dict[str, Any]:
    """`run.updated` when a follow-up message reopens a succeeded run (webhooks: `run.follow_up`)."""
    return {**run_data(run), "follow_up": {"number": follow_up.number, "position": follow_up.position}}
