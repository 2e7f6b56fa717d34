"""The one error type services raise; the API renders it as problem+json (RFC 9457)."""

from __future__ import annotations

from typing import Any


class DeskError(Exception):
    status = 400
    title = "Bad request"

    def __init__(self, detail: str, *, code: str | None = None, errors: Any = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.__class__.__name__
        self.errors = errors


class Invalid(DeskError):
    status, title = 422, "Invalid input"


class NotFound(DeskError):
    status, title = 404, "Not found"


class Forbidden(DeskError):
    status, title = 403, "Not allowed"


class Conflict(DeskError):
    status, title = 409, "Conflict"


class Gone(DeskError):
    status, title = 410, "Gone"
