"""The one error type services raise; the API renders it as problem+json (RFC 9457).

Every problem the API sends carries a `code` from `ERROR_CODES` below: lowercase,
stable, documented in the OpenAPI document. A client branches on `code`, never on
`detail` (prose that may change). `tests/reviewdesk/api/test_errors.py` checks that
every `code=` written in the source is in this list.
"""

from __future__ import annotations

from typing import Any

# code → (HTTP status, what it means). The one list; the schema and docs/api.md quote it.
ERROR_CODES: dict[str, tuple[int, str]] = {
    "malformed_json": (400, "the body is not JSON"),
    "too_deep": (400, "the JSON nests deeper than DESK_JSON_MAX_DEPTH"),
    "bad_parameter": (400, "a query parameter is not one this endpoint accepts"),
    "bad_cursor": (400, "the paging cursor is not one this API issued"),
    "bad_idempotency_key": (
        400,
        "Idempotency-Key must be 1 to 200 characters, not counting surrounding spaces (blanks alone are refused)",
    ),
    "not_authenticated": (401, "no bearer token or session"),
    "authentication_failed": (401, "the token is unknown, revoked, expired or its user inactive"),
    "missing_scope": (403, "the token lacks the scope this endpoint needs"),
    "forbidden": (403, "this user may not do this"),
    "not_found": (404, "no such endpoint, or no such object that this user may see"),
    "method_not_allowed": (405, "the endpoint does not take this method"),
    "not_acceptable": (406, "the Accept header asks for a type this endpoint cannot send"),
    "conflict": (409, "the object's state does not allow this now"),
    "in_flight": (409, "a request with this Idempotency-Key is still in progress"),
    "decided": (409, "the approval was already decided"),
    "stale": (409, "the page or checkpoint this decision was made on is out of date"),
    "cancelled": (409, "the approval was cancelled with its run"),
    "voted": (409, "this reviewer already voted on this approval; its quorum needs another reviewer"),
    "rerun_too_early": (
        409,
        "a re-run of an effect of unknown outcome waits until the stale attempt can no longer act; "
        "errors.possible_at says when",
    ),
    "ended": (409, "the run has already ended"),
    "revoked": (409, "the grant was already revoked"),
    "not_ended": (409, "only a failed or cancelled run can be retried"),
    "active": (409, "the run is still active: a follow-up message waits until it has ended"),
    "not_succeeded": (
        409,
        "only a succeeded run takes a follow-up message; retry a failed or cancelled one first",
    ),
    "abandoned": (409, "that checkpoint belongs to an abandoned line of the run's history"),
    "external": (409, "an external run's framework does this itself (retry, follow-up), not the desk"),
    "not_external": (409, "only a call of an external run is consumed or reported through the API"),
    "consumed": (409, "the decision was already consumed: it authorises one execution"),
    "gone": (410, "the object no longer accepts this"),
    "expired": (410, "the approval has expired, or the decision is past its not_after"),
    "body_too_large": (413, "the body is larger than DESK_MAX_BODY_BYTES"),
    "unsupported_media_type": (415, "the body is not application/json"),
    "invalid": (422, "the body is JSON but not what this endpoint accepts; see `errors`"),
    "verdict": (422, "this verdict does not answer this kind of request"),
    "unchanged": (422, "an edit whose arguments are the call's own: approve it instead"),
    "bad_signature": (422, "a device signature, its key or what it signed does not hold"),
    "device_signature_required": (
        422,
        "this tool runs only on a decision signed by the reviewer's device key",
    ),
    "invalid_answer": (
        422,
        "the answer does not fit the question's options or JSON Schema; `detail` says why",
    ),
    "not_grantable": (422, "this tool is never grantable: every call of it asks a reviewer"),
    "arguments_sha256": (
        422,
        "a call's arguments_sha256 is not the SHA-256 of its arguments' RFC 8785 bytes as the desk computes it",
    ),
    "idempotency_key_reused": (422, "this Idempotency-Key was used with a different request"),
    "throttled": (429, "too many requests; see Retry-After"),
}


class DeskError(Exception):
    status = 400
    title = "Bad request"
    default_code = "bad_parameter"

    def __init__(self, detail: str, *, code: str | None = None, errors: Any = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.default_code
        self.errors = errors


class BadRequest(DeskError):
    """A malformed request: a query parameter or cursor this endpoint does not accept."""

    status, title, default_code = 400, "Malformed request", "bad_parameter"


class Invalid(DeskError):
    status, title, default_code = 422, "Invalid input", "invalid"


# The detail of a 422 whose `errors` name the fields that break a rule, as the API has always said it.
FIELD_ERRORS_DETAIL = "the request body does not match what this endpoint accepts"


class NotFound(DeskError):
    status, title, default_code = 404, "Not found", "not_found"


class CheckpointNotFound(NotFound):
    """A retry named a checkpoint its run does not hold (never, or no longer: pruned when the run
    ended). The run itself is there: a page says so, rather than "no such run"."""


class Forbidden(DeskError):
    status, title, default_code = 403, "Not allowed", "forbidden"


class Conflict(DeskError):
    status, title, default_code = 409, "Conflict", "conflict"


class Gone(DeskError):
    status, title, default_code = 410, "Gone", "gone"


class TooLarge(DeskError):
    status, title, default_code = 413, "Content too large", "body_too_large"


def explain(exc: DeskError) -> str:
    """An error for a person (the desk's pages, the terminal): field errors name their field;
    a list of errors follows the detail."""
    if isinstance(exc.errors, dict):
        return " ".join(f"{field}: {' '.join(map(str, problems))}" for field, problems in exc.errors.items())
    if isinstance(exc.errors, list):
        return exc.detail + "".join(f" {e}." for e in exc.errors)
    return exc.detail
