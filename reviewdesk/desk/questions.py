"""A question on the desk: the form its options or JSON Schema call for, and the answer a
posted form stands for. Only parsing: whether the answer fits is the decide service's check.

Forms: options become buttons; a schema of a string, number, integer, boolean or enum becomes
one field; an object whose properties are all of those becomes one field each; any other
schema a JSON textarea. No options and no schema: a text answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.http import QueryDict

from reviewdesk.lib.errors import Invalid

SIMPLE = ("string", "number", "integer", "boolean")
FIELD_PREFIX = "answer."


def _field(name: str, label: str, schema: Any, required: bool) -> dict[str, Any] | None:
    if not isinstance(schema, Mapping):
        return None
    if isinstance(schema.get("enum"), list) and all(isinstance(v, str) for v in schema["enum"]):
        return {"name": name, "label": label, "type": "enum", "choices": schema["enum"], "required": required}
    if schema.get("type") in SIMPLE:
        return {"name": name, "label": label, "type": schema["type"], "required": required}
    return None


def question_form(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """How the page asks: {"mode": "options"|"fields"|"json"|"text", ...}."""
    if "options" in arguments:
        return {"mode": "options", "options": list(arguments["options"])}
    schema = arguments.get("schema")
    if schema is None:
        return {"mode": "text"}
    single = _field(FIELD_PREFIX, str(schema.get("title") or "Answer"), schema, True)
    if single is not None:
        return {"mode": "fields", "single": True, "fields": [single]}
    properties = schema.get("properties")
    if schema.get("type") == "object" and isinstance(properties, Mapping) and properties:
        required = set(schema.get("required") or ())
        fields = [
            _field(
                FIELD_PREFIX + name,
                str(sub.get("title") or name) if isinstance(sub, Mapping) else name,
                sub,
                name in required,
            )
            for name, sub in properties.items()
        ]
        if all(fields):
            return {"mode": "fields", "single": False, "fields": fields}
    return {"mode": "json", "schema": json.dumps(schema, indent=2)}


def posted_answer(post: QueryDict, arguments: Mapping[str, Any]) -> Any:
    """The answer the posted question form stands for."""
    form = question_form(arguments)
    if form["mode"] in ("options", "text"):
        return post.get("answer", "")
    if form["mode"] == "json":
        try:
            return json.loads(post.get("answer", ""))
        except (ValueError, RecursionError):
            raise Invalid("the answer is not valid JSON", code="invalid_answer") from None
    values = {f["name"]: _value(f, post) for f in form["fields"]}
    if form["single"]:
        return values[FIELD_PREFIX]
    return {name.removeprefix(FIELD_PREFIX): v for name, v in values.items() if v is not None}


def _value(field: Mapping[str, Any], post: QueryDict) -> Any:
    raw = post.get(field["name"])
    if field["type"] == "boolean":
        return raw == "true"
    if raw is None or raw == "":
        return None if not field["required"] or field["type"] != "string" else ""
    if field["type"] in ("number", "integer"):
        try:
            number = float(raw)
        except ValueError:
            raise Invalid(f"{field['label']}: {raw!r} is not a number", code="invalid_answer") from None
        return int(number) if field["type"] == "integer" and number.is_integer() else number
    return raw
