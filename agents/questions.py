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

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from agents.tools import ALWAYS, Effect, Tool, ToolContext, ToolError

QUESTION_MAX = 2000
OPTION_MAX = 200
ANSWER_TEXT_MAX = 10_000
# A schema's regular expressions (`pattern`, the names in `patternProperties`) are the model's
# choice, and Python's `re` backtracks: `^(a+)+$` against 40 a's and a b runs for hours. Each is
# at most PATTERN_MAX characters, and an answer to a schema holding any is checked in a child
# process that is killed after PATTERN_CHECK_SECONDS (its start, ~0.2 s, included), so a
# reviewer's answer never holds a web worker longer than that. The stdlib has no regex timeout
# and `re` holds the GIL while it matches, so a thread would not do.
PATTERN_MAX = 200
PATTERN_CHECK_SECONDS = 3.0
_ROOT = str(Path(__file__).resolve().parents[1])
_CHILD = "import sys; sys.path.insert(0, sys.argv[1]); from agents.questions import _check_in_child; _check_in_child()"

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
            if too_long := _long_pattern(arguments["schema"]):
                return [
                    f"schema: a pattern may be at most {PATTERN_MAX} characters; {too_long[:40]!r}… is longer"
                ]
        return []


def schema_patterns(node: Any) -> list[str]:
    """Every regular expression in a schema, at any depth: `pattern` texts and the names in
    `patternProperties` (a `const` or `default` that looks like one is counted too: harmless)."""
    if isinstance(node, Mapping):
        own = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), Mapping):
            own += [name for name in node["patternProperties"] if isinstance(name, str)]
        return own + [p for value in node.values() for p in schema_patterns(value)]
    if isinstance(node, list):
        return [p for value in node for p in schema_patterns(value)]
    return []


def _long_pattern(schema: Any) -> str | None:
    return next((p for p in schema_patterns(schema) if len(p) > PATTERN_MAX), None)


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


def answer_problem(arguments: Mapping[str, Any], answer: Any, *, here: bool = False) -> str | None:
    """Why `answer` does not answer the question asked with `arguments`; None when it does.
    A schema holding a pattern is checked in a child process, under a time bound, unless `here`
    (the child itself)."""
    if "options" in arguments:
        options = list(arguments["options"])
        if answer not in options or not isinstance(answer, str):
            return f"the answer must be one of the options: {', '.join(options)}"
        return None
    if "schema" in arguments:
        if _long_pattern(arguments["schema"]):  # asked before patterns were limited: never run it
            return (
                f"the question's schema cannot be checked: a pattern is longer than {PATTERN_MAX} characters"
            )
        if schema_patterns(arguments["schema"]) and not here:
            return _answer_problem_in_child(arguments, answer)
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


def _answer_problem_in_child(arguments: Mapping[str, Any], answer: Any) -> str | None:
    """`answer_problem` in a child Python (isolated mode, an empty environment: it is handed
    the schema and the answer on stdin and nothing else), killed when it overruns."""
    request = json.dumps({"arguments": dict(arguments), "answer": answer}).encode()
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _CHILD, _ROOT],
            input=request,
            capture_output=True,
            timeout=PATTERN_CHECK_SECONDS,
            env={"PATH": os.defpath},
            check=False,
        )
    except subprocess.TimeoutExpired:  # run() has killed it
        return (
            f"the question's schema cannot be checked: its pattern took longer than "
            f"{PATTERN_CHECK_SECONDS:g} s to match the answer"
        )
    try:
        result = json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        result = None
    if done.returncode != 0 or not (result is None or isinstance(result, str)):
        return "the question's schema cannot be checked: its checker failed"
    return result


def _check_in_child() -> None:
    """The child's side of `_answer_problem_in_child`: {"arguments", "answer"} in, the problem out."""
    request = json.loads(sys.stdin.buffer.read())
    sys.stdout.write(json.dumps(answer_problem(request["arguments"], request["answer"], here=True)))
