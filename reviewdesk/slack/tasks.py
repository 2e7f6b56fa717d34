"""Celery tasks: one attempt at a Slack message (post or redraw), and beat's sweep."""

from __future__ import annotations

from celery import shared_task

from reviewdesk.slack.delivery import REDRAW_TASK, SEND_TASK, message_send, messages_redraw, slack_sweep
from reviewdesk.slack.verify import seen_prune


@shared_task(name=SEND_TASK)
def send(message_id: str) -> str:
    return message_send(message_id=message_id)


@shared_task(name="slack.sweep")
def sweep() -> dict[str, int]:
    return {**slack_sweep(), "forgotten": seen_prune()}


@shared_task(name=REDRAW_TASK)
def redraw(approval_id: str) -> list[str]:
    return messages_redraw(approval_id=approval_id)
