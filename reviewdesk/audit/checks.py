"""System checks of the audit trail, run by `manage.py check` (with `--deploy` too) and by every
command that runs the checks first (migrate, runserver, create_token, ...)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register

from reviewdesk.audit.keys import audit_key_problem


@register(Tags.security)
def audit_key_provided(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A production process without the audit key could audit nothing, and so do nothing:
    stop before it starts, not at its first write. Commands that run no checks (`shell`,
    `dbshell`) still work, and `--skip-checks` runs any other."""
    problem = audit_key_problem()
    if problem is None:
        return []
    return [
        Error(
            problem,
            hint="Give every web and worker host the same key: DESK_AUDIT_KEY, or a file at DESK_AUDIT_KEY_FILE.",
            id="audit.E001",
        )
    ]
