"""Questions: a tool whose "approval" is a human's answer, and the answer is its result.

    ask_human(question, options=[...])   the answer is one of the options
    ask_human(question, schema={...})    the answer is any JSON value the JSON Schema accepts
    ask_human(question)                  the answer is a non-empty string

The call waits like any gated call (an interrupt of kind `question`); a reviewer answers
with the verdict `answer`; the signed decision binds the answer's SHA-256 and the gate,
after verifying it, hands the answer to the model as the call's result. The tool's own
function never runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from agents.tools import ALWAYS, Effect, Tool, ToolContext, ToolError

QUESTION_MAX = 2000
OPTION_MAX = 200
ANSWER_TEXT_MAX = 10_000

ASK_HUMAN_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "minLength": 1, "maxLength": QUESTION_MAX},
        "options": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": OPTION_MAX},
            "minItems": 2,
            "maxItems": 20,
            "uniqueItems": True,
        },
        "schema": {"type": "object", "description": "a JSON Schema (2020-12) the answer must satisfy"},
    },
    "required": ["question"],
    "additionalProperties": False,
}


def _never_runs(arguments: dict[str, Any], ctx: ToolContext) -> Any:
    raise ToolError("a question is answered by a human, never run")


@dataclass(frozen=True)
class QuestionTool(Tool):
    """A tool that asks a human: always interrupts; its result is the signed answer."""

    def validation_errors(self, arguments: Any) -> list[str]:
        errors = super().validation_errors(arguments)
        if errors or not isinstance(arguments, Mapping):
            return errors
        if "options" in arguments and "schema" in arguments:
            return ["(root): give options or a schema, not both"]
        if "schema" in arguments:
            try:
                jsonschema.Draft202012Validator.check_schema(arguments["schema"])
            except jsonschema.SchemaError as exc:
                return [f"schema: not a valid JSON Schema: {exc.message}"]
            unresolved = unresolvable_refs(arguments["schema"])
            if unresolved:
                return [f"schema: a $ref must point inside the schema; cannot resolve {unresolved[0]!r}"]
        return []


def _refs(node: Any) -> list[str]:
    """Every "$ref" / "$dynamicRef" text in a schema, at any depth."""
    if isinstance(node, Mapping):
        own = [v for k, v in node.items() if k in ("$ref", "$dynamicRef") and isinstance(v, str)]
        return own + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def unresolvable_refs(schema: Any) -> list[str]:
    """The references in `schema` that do not resolve within it. A question's schema stands
    alone: a reference elsewhere (a URL, a URN) would fail every answer, or make the desk fetch it."""
    resolver = Registry().with_resource("", DRAFT202012.create_resource(schema)).resolver()
    unresolved = []
    for ref in _refs(schema):
        try:
            resolver.lookup(ref)
        except Unresolvable:
            unresolved.append(ref)
    return unresolved


def ask_human_tool(*, response_target_seconds: int | None = None) -> QuestionTool:
    return QuestionTool(
        name="ask_human",
        description=(
            "Ask a human reviewer a question and wait for the answer. Give `options` (the answer "
            "is one of them) or a JSON `schema` (the answer satisfies it); with neither, the "
            "answer is free text."
        ),
        parameters=ASK_HUMAN_PARAMETERS,
        effect=Effect.READ,
        approval=ALWAYS,
        func=_never_runs,
        response_target_seconds=response_target_seconds,
    )


def asks_human(tool: Tool | None) -> bool:
    return isinstance(tool, QuestionTool)


def answer_problem(arguments: Mapping[str, Any], answer: Any) -> str | None:
    """Why `answer` does not answer the question asked with `arguments`; None when it does."""
    if "options" in arguments:
        options = list(arguments["options"])
        if answer not in options or not isinstance(answer, str):
            return f"the answer must be one of the options: {', '.join(options)}"
        return None
    if "schema" in arguments:
        # An empty registry: a reference is never fetched from elsewhere.
        validator = jsonschema.Draft202012Validator(arguments["schema"], registry=Registry())
        try:
            errors = sorted(validator.iter_errors(answer), key=lambda e: list(e.path))
        except Unresolvable as exc:  # asked before refs were checked at ask time
            return f"the question's schema cannot be checked: {exc}"
        except RecursionError:
            # A $ref inside the schema may still lead back to itself ({"$ref": "#"}): valid,
            # and it resolves, but checking any answer against it never ends.
            return "the question's schema cannot be checked: it refers to itself without end"
        if errors:
            where = "/".join(str(p) for p in errors[0].path) or "(root)"
            return f"the answer does not match the question's schema: {where}: {errors[0].message}"
        return None
    if not isinstance(answer, str) or not answer.strip():
        return "the answer must be a non-empty text"
    if len(answer) > ANSWER_TEXT_MAX:
        return f"the answer is longer than {ANSWER_TEXT_MAX} characters"
    return None
