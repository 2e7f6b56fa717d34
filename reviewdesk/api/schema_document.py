"""What the OpenAPI document says beyond the views' own descriptions (drf-spectacular's
postprocessing hook, named in `reviewdesk.conf.api`): the API's introduction with the error
codes, the problem+json media type on errors, POST bodies closed to unknown fields, and the two
SSE streams, which no DRF view serves."""

from __future__ import annotations

from reviewdesk.api.filters import SequencePage
from reviewdesk.api.schema import problem_response
from reviewdesk.lib.errors import ERROR_CODES


def error_codes_markdown() -> str:
    rows = "\n".join(
        f"| `{code}` | {status} | {meaning} |" for code, (status, meaning) in ERROR_CODES.items()
    )
    return "| code | status | meaning |\n|---|---|---|\n" + rows


DESCRIPTION = """\
Review Desk lets AI agents act only with a human's signed approval. Clients authenticate with
`Authorization: Bearer <token>`; a token carries scopes (`submit`, `review`, `audit`); each
operation names the scope it needs (`x-required-scopes`), reading needs any.

**Errors** are `application/problem+json` (RFC 9457) with a stable `code`:

{codes}

**Limits.** A body over `DESK_MAX_BODY_BYTES` (default 1 MiB) is 413 `body_too_large`; JSON nested
deeper than `DESK_JSON_MAX_DEPTH` (default 64) is 400 `too_deep`. POST bodies refuse unknown fields
(422 `invalid`); list endpoints and the streams refuse unknown query parameters (400 `bad_parameter`).

**Paging.** Every list answers `{{"results": [...], "next": URL or null}}`; follow `next` until it is
null. `limit` is 1 to `DESK_API_MAX_PAGE_SIZE` (default 200).

**Streams.** `GET /api/v1/runs/{{run_id}}/stream` and `GET /api/v1/stream` are Server-Sent Events
(`text/event-stream`) of the same desk events as `/events`: each event's `id` is its sequence number,
so a client that reconnects with `Last-Event-ID` (or `?after=`) misses and repeats nothing.
"""


def _stream_operation(operation_id: str, summary: str, *, with_run: bool) -> dict:
    parameters = [
        {
            "name": "after",
            "in": "query",
            "schema": {"type": "integer", "minimum": 0},
            "description": SequencePage().fields["after"].help_text,
        },
        {
            "name": "Last-Event-ID",
            "in": "header",
            "schema": {"type": "integer", "minimum": 0},
            "description": "resume after this sequence number (sent by EventSource on reconnect)",
        },
    ]
    if with_run:
        parameters.insert(
            0,
            {
                "name": "run_id",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "format": "uuid"},
            },
        )
    problem_ref = {"$ref": "#/components/schemas/Problem"}
    return {
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "description": (
                "Scope: any. Server-Sent Events: `id: SEQ`, `event: TYPE`, `data: {seq, type, data}` per event; "
                "a `: keep-alive` comment every DESK_SSE_HEARTBEAT_SECONDS. A query parameter other than "
                "`after` is 400 `bad_parameter`. A token's stream ends (`event: end`) within "
                "DESK_SSE_POLL_SECONDS of the token being revoked or expiring or its user deactivated. "
                "Served by the ASGI server only."
            ),
            "tags": ["v1"],
            "parameters": parameters,
            "security": [{"bearerAuth": []}, {"cookieAuth": []}],
            "x-required-scopes": [],
            "responses": {
                "200": {
                    "description": "an endless event stream",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                **{
                    str(status): {
                        "description": problem_response(status).description,
                        "content": {"application/problem+json": {"schema": problem_ref}},
                    }
                    for status in ((400, 401, 404) if with_run else (400, 401))
                },
            },
        }
    }


def postprocess(result: dict, generator, request, public) -> dict:
    """Describe what the views cannot: the error list, problem+json media types, the SSE streams."""
    result["info"]["description"] = DESCRIPTION.format(codes=error_codes_markdown())
    # POST bodies refuse unknown fields (StrictSerializer): say so, or clients would think extras pass.
    from reviewdesk.api.serializers import StrictSerializer

    schemas = result.get("components", {}).get("schemas", {})
    for strict in StrictSerializer.__subclasses__():
        name = strict.__name__.removesuffix("Serializer") + "Request"
        if name in schemas:
            schemas[name]["additionalProperties"] = False
    for path in result.get("paths", {}).values():
        for operation in path.values():
            for status, response in operation.get("responses", {}).items():
                content = response.get("content", {})
                if int(status) >= 400 and "application/json" in content:
                    content["application/problem+json"] = content.pop("application/json")
    result["paths"]["/api/v1/runs/{run_id}/stream"] = _stream_operation(
        "runs_stream", "Follow one run's desk events (Server-Sent Events)", with_run=True
    )
    result["paths"]["/api/v1/stream"] = _stream_operation(
        "stream", "Follow the desk events of every run this user may see (Server-Sent Events)", with_run=False
    )
    return result
