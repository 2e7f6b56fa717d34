"""The webhooks' hand-written SQL: each statement behind one named function, for a reason
given in its docstring (`lib.db_rows` is imported by the apps' `rows.py` modules and nothing
else)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model

from reviewdesk.lib.db_rows import Columns, column, fetchall, for_update_of, prep, table
from reviewdesk.runs.models import Run
from reviewdesk.webhooks.models import WebhookEndpoint


def submitter_has_live_endpoint(run_id: Any, seq: int) -> bool:
    """Whether the run's submitter, active, has an enabled endpoint registered before event
    `seq`. One hand-written statement: it is asked under the writers' lock for every event a
    webhook may be told of, where compiling the ORM's query cost more than running it."""
    user_model = get_user_model()
    submitter = f"(SELECT {column(Run, 'submitted_by')} FROM {table(Run)} WHERE {column(Run, 'id')} = %s)"
    sql = (
        f"SELECT 1 FROM {table(WebhookEndpoint)} e JOIN {table(user_model)} u "
        f"ON u.{column(user_model, 'id')} = e.{column(WebhookEndpoint, 'owner')} "
        f"WHERE e.{column(WebhookEndpoint, 'owner')} = {submitter} AND u.{column(user_model, 'is_active')} = %s "
        f"AND e.{column(WebhookEndpoint, 'disabled_at')} IS NULL AND e.{column(WebhookEndpoint, 'since_seq')} < %s "
        "LIMIT 1"
    )
    return bool(fetchall(sql, [prep(Run, "id", run_id), True, seq]))


def endpoints_of_submitter(run_id: Any) -> tuple[list[WebhookEndpoint], tuple[str, bool]]:
    """The run's submitter's endpoints that are not disabled, none when the submitter was
    deactivated (offboarding ends their feed as it ends their logins, tokens, streams and
    sockets), and (their username, whether they are an admin). One hand-written statement,
    its endpoint rows locked: a deletion waits for the dispatch, so that no delivery names a
    deleted endpoint."""
    user_model = get_user_model()
    endpoint = Columns.of(WebhookEndpoint, "e")
    user_id, username = column(user_model, "id"), column(user_model, user_model.USERNAME_FIELD)
    submitter = f"(SELECT {column(Run, 'submitted_by')} FROM {table(Run)} WHERE {column(Run, 'id')} = %s)"
    sql = (
        f"SELECT {endpoint.sql}, u.{username}, u.{column(user_model, 'is_staff')} "
        f"FROM {table(WebhookEndpoint)} e JOIN {table(user_model)} u ON u.{user_id} = e.{column(WebhookEndpoint, 'owner')} "
        f"WHERE e.{column(WebhookEndpoint, 'owner')} = {submitter} "
        f"AND u.{column(user_model, 'is_active')} = %s "
        f"AND e.{column(WebhookEndpoint, 'disabled_at')} IS NULL{for_update_of('e')}"
    )
    rows = fetchall(sql, [prep(Run, "id", run_id), True])
    if not rows:
        return [], ("", False)
    owner = (rows[0][-2], bool(rows[0][-1]))  # an owner read here is active: admin is staff
    return [endpoint.build(row) for row in rows], owner
