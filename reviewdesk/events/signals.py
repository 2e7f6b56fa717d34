"""Desk sockets re-check their rights the moment they may have lost them, not only at the next
heartbeat: a session ended (logout, or flushed by a password change), a user's groups changed
(the reviewer or admin role), a user was saved (deactivated). Each sends `desk.recheck` to the
user's sockets once the change commits; each socket checks its own session and role and closes
(4403) if they are gone. A socket of another, still valid session of the same user stays."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from django.contrib.auth import SESSION_KEY, get_user_model
from django.contrib.sessions.models import Session
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from reviewdesk.events.services import users_push

logger = logging.getLogger(__name__)
RECHECK = {"type": "desk.recheck"}
_paused: contextvars.ContextVar[bool] = contextvars.ContextVar("desk_recheck_paused", default=False)


@contextmanager
def rechecks_paused() -> Iterator[None]:
    """No re-check pushes inside: for `seed_demo`, which `make run` runs before Redis and the
    web tier are up (no socket can be open; a later one checks its rights when it connects)."""
    token = _paused.set(True)
    try:
        yield
    finally:
        _paused.reset(token)


def sockets_recheck(user_ids: Iterable[Any]) -> None:
    if _paused.get():
        return
    ids = sorted({int(pk) for pk in user_ids if pk is not None})
    if ids:
        transaction.on_commit(lambda: users_push(ids, RECHECK), robust=True)


def _session_deleted(sender, instance: Session, **kwargs) -> None:
    try:
        user_id = instance.get_decoded().get(SESSION_KEY)
    except Exception:  # a session that no longer decodes logs nobody in
        return
    sockets_recheck([user_id])


def _groups_changed(sender, instance, action: str, reverse: bool, pk_set, **kwargs) -> None:
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    if not reverse:  # user.groups.add/remove/clear(...)
        sockets_recheck([instance.pk])
    elif pk_set:  # group.user_set.add/remove(...): the users are the pks
        sockets_recheck(pk_set)


def _user_saved(sender, instance, created: bool, update_fields=None, **kwargs) -> None:
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return  # a login's own save changes no right
    sockets_recheck([instance.pk])


def connect() -> None:
    user_model = get_user_model()
    post_delete.connect(_session_deleted, sender=Session, dispatch_uid="desk-session-deleted")
    m2m_changed.connect(_groups_changed, sender=user_model.groups.through, dispatch_uid="desk-groups")
    post_save.connect(_user_saved, sender=user_model, dispatch_uid="desk-user-saved")
