"""A decision's input as one frozen value (`DecisionInput`), and the rules it must meet, in one
function, for every way a decision arrives.

The API serializer, the desk form and the terminal only parse (strings, JSON, a UUID); the
decide service builds one `DecisionInput`, which its check, its record and the signed payload
all read, and calls `decision_input_check` in its check step, so every door refuses the same
input with the same words. What needs the database or the tool (who may decide,
expiry, staleness, the tool's JSON Schema) stays in the service.

Field errors read as Django REST framework writes them, so that the API's 422
bodies are what its serializer used to answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from reviewdesk.approvals.models import KIND_VERDICTS, ApprovalRequest, Verdict
from reviewdesk.lib.errors import FIELD_ERRORS_DETAIL, Invalid
from reviewdesk.lib.limits import EXTERNAL_REF_MAX, NUL_REFUSED, TEXT_MAX, json_depth_exceeds, json_holds_nul


@dataclass(frozen=True)
class DeviceSignature:
    """What a client sends with a device-signed decision: the payload it was given by
    `/payload` and signed, the base64 signature, and its device key's id."""

    payload: dict[str, Any]
    signature: str
    key_id: str


@dataclass(frozen=True)
class DecisionInput:
    """What a reviewer decides, as a door hands it to the decide service: parsed, not yet
    checked (`decision_input_check` does that, so a field may still hold anything a client
    sent). `arguments` is None when none were sent; `answer` likewise."""

    verdict: Any
    checkpoint_id: str
    reason: Any = ""
    note: Any = ""
    arguments: Any = None
    external_ref: Any = ""
    answer: Any = None
    # A decision the reviewer's device key signed (the desk signs it otherwise).
    device: DeviceSignature | None = None
    # A standing grant made with an approve (`grants.create`).
    grant: Any = None

    def texts(self) -> dict[str, str]:
        """The reviewer's texts exactly as stored and signed."""
        return {"reason": self.reason, "note": self.note, "external_ref": self.external_ref.strip()}

    def arguments_to_run(self, approval: ApprovalRequest) -> Any:
        """The arguments the decision lets the tool run with: the edited ones for an edit."""
        return self.arguments if self.verdict == Verdict.EDIT else approval.arguments


def decision_input_check(decision: DecisionInput, *, kind: str) -> None:
    """Refuse a decision whose input breaks a rule; return None when it keeps them all.

    `arguments` is None when the caller sent none. Raises `Invalid`: with `errors`
    {field: [messages]} (code "invalid") for a bad field, code "verdict" for a
    verdict that does not answer this kind of request, and a plain `Invalid` for a
    confirm without its external reference. Field rules are reported together;
    the rules across fields only once every field is well formed.
    """
    verdict, arguments, answer = decision.verdict, decision.arguments, decision.answer
    errors: dict[str, list[str]] = {}
    if not isinstance(verdict, str) or verdict not in Verdict.values:
        errors["verdict"] = [f'"{verdict}" is not a valid choice.']
    for field, value, limit in (
        ("reason", decision.reason, TEXT_MAX),
        ("note", decision.note, TEXT_MAX),
        ("external_ref", decision.external_ref, EXTERNAL_REF_MAX),
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
    if verdict == Verdict.CONFIRM and not decision.external_ref.strip():
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
