"""The skeleton's two tasks (bench/skeleton.py): each pushes one message to the socket."""

from __future__ import annotations

from celery import shared_task
from channels.layers import get_channel_layer

from reviewdesk.events.services import _send

GROUP = "bench.skeleton"


@shared_task(name="bench.skeleton.run")
def run(run_id: str) -> None:
    _push("asked", run_id)


@shared_task(name="bench.skeleton.resume")
def resume(run_id: str) -> None:
    _push("done", run_id)


def _push(kind: str, run_id: str) -> None:
    """As the desk pushes an event: the committing thread PUBLISHes on the pub/sub layer."""
    _send(
        get_channel_layer(),
        GROUP,
        {"type": "floor.message", "text": f'{{"type": "{kind}", "run": "{run_id}"}}'},
    )
