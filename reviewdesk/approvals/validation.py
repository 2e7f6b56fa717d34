"""The rules a decision's input must meet, in one function, for every way a decision arrives.

The API serializer and the desk form only parse (strings, JSON, a UUID); the decide
service calls `decision_input_check` in its check step, so both refuse the same
input with the same words. What needs the database or the tool (who may decide,
expiry, staleness, the tool's JSON Schema) stays in the service.

Field errors read as Django REST framework writes them, so that the API's 422
bodies are what its serializer used to answer.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from reviewdesk.approvals.models import KIND_VERDICTS, Verdict
from reviewdesk.lib.errors import Invalid
from reviewdesk.lib.jsonlimits import json_depth_exceeds, json_holds_nul

TEXT_MAX = 10_000  # a reason or a note
EXTERNAL_REF_MAX = 200

# A text holding U+0000: PostgreSQL text cannot store it (the insert raised DataError, a 500).
# DRF's words, so the API's own fields and the desk's forms say the same.
NUL_REFUSED = "Null characters are not allowed."

# The problem+json detail of a body that breaks a field rule, as the API has always said it.
FIELD_ERRORS_DETAIL = "the request body does not match what this endpoint accepts"


def decision_input_check(
    *,
    kind: str,
    verdict: Any,
    reason: Any = "",
    note: Any = "",
    external_ref: Any = "",
    arguments: Any = None,
    answer: Any = None,
) -> None:
    """Refuse a decision whose input breaks a rule; return None when it keeps them all.

    `arguments` is None when the caller sent none. Raises `Invalid`: with `errors`
    {field: [messages]} (code "invalid") for a bad field, code "verdict" for a
    verdict that does not answer this kind of request, and a plain `Invalid` for a
    confirm without its external reference. Field rules are reported together;
    the rules across fields only once every field is well formed.
    """
    errors: dict[str, list[str]] = {}
    if not isinstance(verdict, str) or verdict not in Verdict.values:
        errors["verdict"] = [f'"{verdict}" is not a valid choice.']
    for field, value, limit in (
        ("reason", reason, TEXT_MAX),
        ("note", note, TEXT_MAX),
        ("external_ref", external_ref, EXTERNAL_REF_MAX),
    ):
        if not isinstance(value, str):
            errors[field] = ["Not a valid string."]
        elif len(value) > limit:
            errors[field] = [f"Ensure this field has no more than {limit} characters."]
        elif "\x00" in value:
            errors[field] = [NUL_REFUSED]
    # JSON the API's parser screens already; the desk's forms post theirs as text.
    for field, value in (("arguments", arguments), ("answer", answer)):
        if json_holds_nul(value):
            errors[field] = [NUL_REFUSED]
    if errors:
        raise Invalid(FIELD_ERRORS_DETAIL, code="invalid", errors=errors)

    if verdict == Verdict.EDIT and not isinstance(arguments, dict):
        raise Invalid(
            FIELD_ERRORS_DETAIL,
            code="invalid",
            errors={"arguments": ["an edit needs the changed arguments as an object"]},
        )
    if verdict == Verdict.EDIT and json_depth_exceeds(arguments, settings.DESK_JSON_MAX_DEPTH):
        raise Invalid(
            FIELD_ERRORS_DETAIL,
            code="invalid",
            errors={"arguments": [f"the arguments nest deeper than {settings.DESK_JSON_MAX_DEPTH} levels"]},
        )
    if verdict != Verdict.EDIT and arguments is not None:
        raise Invalid(
            FIELD_ERRORS_DETAIL, code="invalid", errors={"arguments": ["only an edit carries arguments"]}
        )

    _answer_check(verdict, answer)
    allowed = KIND_VERDICTS[kind]
    if verdict not in allowed:
        raise Invalid(f"a {kind} request is answered with {', '.join(allowed)}", code="verdict")
    if verdict == Verdict.CONFIRM and not external_ref.strip():
        raise Invalid("marking an effect done needs its external reference (where it is recorded)")


def _answer_check(verdict: str, answer: Any) -> None:
    """An answer comes with the verdict answer, and only with it (None: none sent). Whether it
    answers the question (its options or schema) is the service's check: it needs the request."""
    if verdict == Verdict.ANSWER and answer is None:
        raise Invalid(FIELD_ERRORS_DETAIL, code="invalid", errors={"answer": ["an answer needs its answer"]})
    if verdict != Verdict.ANSWER and answer is not None:
        raise Invalid(FIELD_ERRORS_DETAIL, code="invalid", errors={"answer": ["only an answer carries one"]})
    if json_depth_exceeds(answer, settings.DESK_JSON_MAX_DEPTH):
        raise Invalid(
            FIELD_ERRORS_DETAIL,
            code="invalid",
            errors={"answer": [f"the answer nests deeper than {settings.DESK_JSON_MAX_DEPTH} levels"]},
        )
