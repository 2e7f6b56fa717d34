"""The accounts app's hand-written SQL: each statement behind one named function, for a
measured reason given in its docstring (`lib.db_rows` is imported by the apps' `rows.py`
modules and nothing else)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from reviewdesk.accounts.models import ApiToken
from reviewdesk.accounts.roles import remember_group_names
from reviewdesk.lib.db_rows import Columns, column, fetchall, table


def token_for_digest(digest: str) -> ApiToken | None:
    """The unrevoked token with this SHA-256, its user with it and the names of the user's
    groups (`roles.group_names_of` answers from them for this request), in one hand-written
    statement: every API request asks, and the ORM's queries spent longer compiling than
    running (`make bench` #6: a fifth of the web's CPU on the bench's bare requests)."""
    user_model = get_user_model()
    token, user = Columns.of(ApiToken, "t"), Columns.of(user_model, "u")
    through = user_model.groups.through
    sql = (
        f"SELECT {token.sql}, {user.sql}, g.{column(Group, 'name')} FROM {table(ApiToken)} t "
        f"JOIN {table(user_model)} u ON u.{column(user_model, 'id')} = t.{column(ApiToken, 'user')} "
        f"LEFT JOIN {table(through)} m ON m.{column(through, 'user')} = u.{column(user_model, 'id')} "
        f"LEFT JOIN {table(Group)} g ON g.{column(Group, 'id')} = m.{column(through, 'group')} "
        f"WHERE t.{column(ApiToken, 'token_sha256')} = %s AND t.{column(ApiToken, 'revoked_at')} IS NULL"
    )
    rows = fetchall(sql, [digest])
    if not rows:
        return None
    found = token.build(rows[0])
    found.user = user.build(rows[0], token.width)
    remember_group_names(found.user, [row[-1] for row in rows if row[-1] is not None])
    return found
