"""The API's JSON parser: documented limits on size and depth, each a precise 4xx.

A body longer than DESK_MAX_BODY_BYTES is 413 `body_too_large`; JSON nested deeper
than DESK_JSON_MAX_DEPTH is 400 `too_deep` (the C decoder's RecursionError, reached
near depth 1000, counts as too deep too, instead of becoming a 500); anything else
that is not JSON is 400 `malformed_json`, and so is JSON that no response could carry back:
NaN and Infinity (not JSON, though Python reads them), a number too large for a float (1e999
reads as infinity) and a lone surrogate escape ("\ud800": no UTF-8 encodes it). Stored in a
run's metadata or model on SQLite, such a value made every runs list that showed it a 500.
So is a string holding "\u0000": PostgreSQL's text and jsonb cannot store it (a 500 on insert).
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from reviewdesk.lib.errors import TooLarge
from reviewdesk.lib.limits import json_depth_exceeds, json_holds_nul


def body_too_large(length: int) -> TooLarge:
    return TooLarge(
        f"the body is {length} bytes; the limit is {settings.DESK_MAX_BODY_BYTES} (DESK_MAX_BODY_BYTES)"
    )


def loads_limited(raw: bytes) -> Any:
    """Decode JSON within the documented limits, or raise the precise error."""
    if len(raw) > settings.DESK_MAX_BODY_BYTES:
        raise body_too_large(len(raw))
    limit = settings.DESK_JSON_MAX_DEPTH
    too_deep = f"the JSON nests deeper than {limit} levels (DESK_JSON_MAX_DEPTH)"
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_not_json, parse_float=_finite)
    except RecursionError:
        raise ParseError(too_deep, code="too_deep") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ParseError(f"the body is not JSON: {exc}", code="malformed_json") from None
    if json_depth_exceeds(value, limit):
        raise ParseError(too_deep, code="too_deep")
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ParseError(
            "the body is not JSON a response can carry: a string holds a lone surrogate (\\ud800-\\udfff)",
            code="malformed_json",
        ) from None
    if json_holds_nul(value):
        raise ParseError(
            "the body is not JSON the desk can store: a string holds a NUL character (\\u0000)",
            code="malformed_json",
        )
    return value


def _not_json(constant: str) -> float:
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is too large for a number here")
    return number


class LimitedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        if stream is None:
            return None
        # One byte past the limit is enough to know the body is too large.
        return loads_limited(stream.read(settings.DESK_MAX_BODY_BYTES + 1))
