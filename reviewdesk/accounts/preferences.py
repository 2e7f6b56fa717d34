"""A reviewer's notification settings: how they hear of what waits for them.

Read by the notifications (approvals/lifecycle/notify.py), changed only by their owner on
`/settings/` through `preference_update`, which checks every field and audits the change like
the other changes to a user's account (accounts/services.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import transaction

from reviewdesk.accounts.models import NotificationPreference, NotifyMode
from reviewdesk.audit.services import audit_record

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# A digest at most once a minute (a tick looks every DESK_NOTIFY_DIGEST_TICK_SECONDS), at
# least once a day: past that an item would expire unannounced (DESK_APPROVAL_TTL_SECONDS).
DIGEST_MINUTES_MIN = 1
DIGEST_MINUTES_MAX = 1440
# The fields a reviewer sets, as the audit row names them.
FIELDS = ("mode", "digest_minutes", "immediate_assigned", "immediate_expiring")


def preference_of(user: User) -> NotificationPreference:
    """The user's settings: their row, or (unsaved) the defaults."""
    found = NotificationPreference.objects.filter(user=user).first()
    return found if found is not None else NotificationPreference(user=user)


def preferences_of(users: list[Any]) -> dict[Any, NotificationPreference]:
    """Each user's settings by user id, in one read (the defaults for those without a row)."""
    rows = {p.user_id: p for p in NotificationPreference.objects.filter(user__in=[u.pk for u in users])}
    return {u.pk: rows.get(u.pk) or NotificationPreference(user=u) for u in users}


def digest_minutes_of(preference: NotificationPreference) -> int:
    """The interval the user chose, or the desk's default."""
    if preference.digest_minutes is None:
        return settings.DESK_NOTIFY_DIGEST_MINUTES
    return preference.digest_minutes


@dataclass(frozen=True)
class PreferenceChange:
    """What the form asked for, checked: the values, or the reasons they were refused."""

    values: dict[str, Any]
    errors: list[str]


def preference_parse(form: Mapping[str, Any]) -> PreferenceChange:
    """The settings a submitted form asks for (a QueryDict or a dict of strings). An empty
    interval means the desk's default; an unticked box (absent) means off."""
    errors = []
    mode = str(form.get("mode", ""))
    if mode not in NotifyMode.values:
        errors.append("Choose how you hear of new items: " + ", ".join(NotifyMode.labels).lower() + ".")
    raw = str(form.get("digest_minutes", "")).strip()
    minutes: int | None = None
    if raw:
        try:
            minutes = int(raw)
        except ValueError:
            errors.append("The digest interval is a whole number of minutes.")
        else:
            if not DIGEST_MINUTES_MIN <= minutes <= DIGEST_MINUTES_MAX:
                errors.append(
                    f"The digest interval is between {DIGEST_MINUTES_MIN} and {DIGEST_MINUTES_MAX} minutes."
                )
    values = {
        "mode": mode,
        "digest_minutes": minutes,
        "immediate_assigned": form.get("immediate_assigned") == "on",
        "immediate_expiring": form.get("immediate_expiring") == "on",
    }
    return PreferenceChange(values=values, errors=errors)


def preference_update(*, user: User, change: PreferenceChange, via: str = "") -> NotificationPreference:
    """Save `change` (checked by `preference_parse`, free of errors) as `user`'s own settings,
    and audit what changed. Only ever the caller's own: the page passes `request.user`."""
    if change.errors:
        raise ValueError("; ".join(change.errors))
    with transaction.atomic():
        preference, _ = NotificationPreference.objects.select_for_update().get_or_create(user=user)
        before = {name: getattr(preference, name) for name in FIELDS}
        for name in FIELDS:
            setattr(preference, name, change.values[name])
        changed = {name: change.values[name] for name in FIELDS if before[name] != change.values[name]}
        if changed:
            preference.save(update_fields=[*changed, "updated_at"])
            audit_record(
                actor=user,
                action="notification_settings.changed",
                subject_type="user",
                subject_id=user.pk,
                data={"user": user.get_username(), "changed": changed, "via": via},
            )
    return preference
