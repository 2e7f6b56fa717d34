"""The desk events' hand-written SQL (`lib.db_rows` is imported by the apps' `rows.py` modules
and nothing else)."""

from __future__ import annotations

from reviewdesk.events.models import DeskEvent
from reviewdesk.lib.db_rows import insert


def event_insert(event: DeskEvent) -> DeskEvent:
    """A desk event, under the writers' lock: every change a browser sees writes one (several a
    cycle), and the ORM's INSERT compiled for longer than it ran."""
    return insert(event)
