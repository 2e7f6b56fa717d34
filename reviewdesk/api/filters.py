"""Each API list's query parameters, declared once: one serializer per list, which both the view
(`read_filters`) and the OpenAPI document (`extend_schema(parameters=[...])`) read.

A parameter this list does not take, or a bad value, is 400 `bad_parameter` with a sentence
naming the parameter, so that a typo in a filter never returns everything unfiltered. Every
value arrives as text: each field here parses exactly one kind of text, and says what it wanted.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.request import Request

from reviewdesk.api.paging import parse_limit, parse_sequence
from reviewdesk.approvals.grants.access import GRANT_STATUSES
from reviewdesk.approvals.models import ApprovalKind, ApprovalStatus, GrantScope
from reviewdesk.lib.errors import BadRequest
from reviewdesk.runs.models import RunStatus

TEXT_FILTER_MAX = 200


class TextFilter(serializers.CharField):
    """1 to 200 characters, none of them U+0000."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, max_length=TEXT_FILTER_MAX, **kwargs)

    def run_validation(self, data: Any = empty) -> Any:
        # CharField answers an empty value itself ("may not be blank"); a filter says what it wants.
        if data is empty:
            return super().run_validation(data)
        value = self.to_internal_value(data)
        self.run_validators(value)
        return value

    def to_internal_value(self, data: Any) -> str:
        value = str(data)
        if not (0 < len(value) <= TEXT_FILTER_MAX):
            raise serializers.ValidationError(f"{self.field_name} must be 1 to {TEXT_FILTER_MAX} characters")
        if "\x00" in value:
            # `%00` decodes to U+0000, which PostgreSQL text cannot hold: comparing a column with
            # it raised DataError, a 500. No stored name or id contains one, so it matches nothing.
            raise serializers.ValidationError(f"{self.field_name} may not contain a NUL character")
        return value


class ChoiceFilter(serializers.ChoiceField):
    def __init__(self, choices: Any, **kwargs: Any) -> None:
        super().__init__(choices=list(choices), required=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if data not in self.choices:
            raise serializers.ValidationError(f"{self.field_name} must be one of {', '.join(self.choices)}")
        return str(data)


class ChoicesFilter(serializers.CharField):
    """One or more of `choices`, comma-separated ("approved,rejected"): a list, in the order given."""

    def __init__(self, choices: Any, **kwargs: Any) -> None:
        self.choices_allowed = list(choices)
        super().__init__(required=False, **kwargs)

    def run_validation(self, data: Any = empty) -> Any:
        return super().run_validation(data) if data is empty else self.to_internal_value(data)

    def to_internal_value(self, data: Any) -> list[str]:
        values = [value.strip() for value in str(data).split(",")]
        wrong = [value for value in values if value not in self.choices_allowed]
        if wrong or not values:
            raise serializers.ValidationError(
                f"{self.field_name} must be one or more of {', '.join(self.choices_allowed)}, comma-separated"
            )
        return list(dict.fromkeys(values))


class BooleanFilter(serializers.CharField):
    """true or false."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, **kwargs)

    def run_validation(self, data: Any = empty) -> Any:
        return super().run_validation(data) if data is empty else self.to_internal_value(data)

    def to_internal_value(self, data: Any) -> bool:
        if str(data) not in ("true", "false"):
            raise serializers.ValidationError(f"{self.field_name} must be true or false")
        return str(data) == "true"


class UUIDFilter(serializers.UUIDField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, **kwargs)

    def to_internal_value(self, data: Any) -> uuid.UUID:
        try:
            return uuid.UUID(str(data))
        except ValueError:
            raise serializers.ValidationError(f"{self.field_name} must be a UUID") from None


class TimeFilter(serializers.DateTimeField):
    """An RFC 3339 date-time; one without an offset is read as UTC."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, **kwargs)

    def to_internal_value(self, data: Any) -> datetime:
        try:
            parsed = parse_datetime(str(data))
        except ValueError:
            parsed = None
        if parsed is None:
            raise serializers.ValidationError(
                f"{self.field_name} must be an RFC 3339 date-time, e.g. 2026-01-31T12:00:00Z"
            )
        parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        try:
            # In UTC: PostgreSQL refuses offsets past ±15:59 that Python accepts (+20:02), and a
            # time that leaves year 1..9999 in UTC cannot be compared at all.
            return parsed.astimezone(UTC)
        except OverflowError:
            raise serializers.ValidationError(f"{self.field_name} is out of range once in UTC") from None


class LimitFilter(serializers.IntegerField):
    """The page size: 1 to DESK_API_MAX_PAGE_SIZE; DESK_API_PAGE_SIZE when not given."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, min_value=1, **kwargs)

    def to_internal_value(self, data: Any) -> int:
        try:
            return parse_limit(str(data))
        except BadRequest as exc:
            raise serializers.ValidationError(exc.detail) from None


class SequenceFilter(serializers.IntegerField):
    """A sequence number already seen (0: from the start)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, min_value=0, **kwargs)

    def to_internal_value(self, data: Any) -> int:
        try:
            return parse_sequence(str(data), self.field_name)
        except BadRequest as exc:
            raise serializers.ValidationError(exc.detail) from None


def read_filters(request: Request, filters: type[serializers.Serializer]) -> dict[str, Any]:
    """The list's query parameters as `filters` declares them, parsed; those not given are
    absent. 400 `bad_parameter` for a parameter it does not declare, or the first bad value."""
    refuse_unknown(request, filters)
    parsed = filters(data=request.query_params.dict())
    if not parsed.is_valid():
        messages = next(iter(parsed.errors.values()))
        raise BadRequest(str(messages[0]), code="bad_parameter")
    return dict(parsed.validated_data)


def refuse_unknown(request: Request, filters: type[serializers.Serializer]) -> None:
    """400 `bad_parameter` for a query parameter `filters` does not declare. A view that must
    say 403 or 404 before it judges the values (who may read the list) calls this first."""
    allowed = filters().fields
    unknown = sorted(set(request.query_params) - set(allowed))
    if unknown:
        raise BadRequest(
            f"unknown query parameter {', '.join(unknown)}; this endpoint takes {', '.join(sorted(allowed))}",
            code="bad_parameter",
        )


class CursorFilter(serializers.CharField):
    """Any text, as given (a NUL included): one this API did not issue is 400 `bad_cursor`,
    judged by `paging.keyset_page` where the cursor is read."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, allow_blank=True, **kwargs)

    def run_validation(self, data: Any = empty) -> Any:
        return super().run_validation(data) if data is empty else str(data)


# --- the page's own parameters ---------------------------------------------------------------


class Filters(serializers.Serializer):
    """A list's filters judged as the lists always judged them: its own first, in the order
    they are declared, then the parts it inherits (dates, then the page), so that of two bad
    values the 400 names the same one. DRF would put the inherited fields first."""

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        inherited = [name for base in type(self).__bases__ for name in getattr(base, "_declared_fields", {})]
        own = {name: field for name, field in fields.items() if name not in inherited}
        return own | {name: fields[name] for name in inherited}


class KeysetPage(Filters):
    """A newest-first list paged by an opaque cursor (`paging.keyset_page`)."""

    limit = LimitFilter(
        help_text="page size: 1 to DESK_API_MAX_PAGE_SIZE (200); default DESK_API_PAGE_SIZE (50)"
    )
    cursor = CursorFilter(help_text="the opaque cursor from a previous page's `next` link")


class CreatedBetween(Filters):
    created_after = TimeFilter(help_text="RFC 3339 date-time; only rows created at or after it")
    created_before = TimeFilter(help_text="RFC 3339 date-time; only rows created before it")


class SequencePage(Filters):
    """An oldest-first list after a sequence number (`paging.sequence_page`)."""

    limit = LimitFilter(
        help_text="page size: 1 to DESK_API_MAX_PAGE_SIZE (200); default DESK_API_PAGE_SIZE (50)"
    )
    after = SequenceFilter(help_text="the last sequence number already seen (0: from the start)")


# --- each list ---------------------------------------------------------------------------------


class RunFilters(CreatedBetween, KeysetPage):
    status = ChoiceFilter(RunStatus.values, help_text="only runs in this status")
    agent = TextFilter(help_text="only runs of this agent")


class RunEventFilters(SequencePage):
    type = TextFilter(help_text="only events of this type")


class ApprovalFilters(CreatedBetween, KeysetPage):
    status = ChoicesFilter(
        ApprovalStatus.values,
        help_text="only approvals in this status, or in any of several, comma-separated (approved,rejected)",
    )
    kind = ChoiceFilter(ApprovalKind.values, help_text="only approvals of this kind")
    agent = TextFilter(help_text="only approvals raised by runs of this agent")
    tool = TextFilter(help_text="only approvals of calls to this tool")
    run = UUIDFilter(help_text="only approvals of this run (its id)")
    consumed = BooleanFilter(
        help_text="false: only approvals none of whose decisions was consumed yet (an external "
        "framework's crash recovery: decided, not acted on); true: only those with one consumed"
    )


class GrantFilters(CreatedBetween, KeysetPage):
    status = ChoiceFilter(GRANT_STATUSES, help_text="only grants in this state")
    tool = TextFilter(help_text="only grants for this tool")
    scope = ChoiceFilter(GrantScope.values, help_text="only grants of this scope")
    run = UUIDFilter(help_text="only grants scoped to this run (its id)")


class AuditFilters(CreatedBetween, SequencePage):
    actor = TextFilter(help_text="only rows by this username (or system)")
    action = TextFilter(help_text="only rows of this action")
    subject_type = TextFilter(help_text="only rows about this kind of subject (run, approval, …)")
    subject_id = TextFilter(help_text="only rows about this subject (its id)")


class PageOnly(KeysetPage):
    """A list with no filters of its own (webhooks, a webhook's deliveries, the agents)."""
