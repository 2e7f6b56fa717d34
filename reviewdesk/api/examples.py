"""Examples in the OpenAPI document (reviewdesk/api/schema.py shows them with their operations)."""

from drf_spectacular.utils import OpenApiExample

SUBMIT_EXAMPLE = OpenApiExample(
    "a scripted run that emails a customer",
    request_only=True,
    value={
        "agent": "demo",
        "input": "Tell Ada her refund is on its way.",
        "model": {
            "provider": "scripted",
            "script": [
                {
                    "tool_calls": [
                        {
                            "name": "send_email",
                            "arguments": {
                                "to": "ada@example.com",
                                "subject": "Refund",
                                "body": "On its way.",
                            },
                        }
                    ]
                },
                {"content": "Emailed Ada."},
            ],
        },
    },
)
DECISION_EXAMPLE = OpenApiExample(
    "approve",
    request_only=True,
    value={
        "verdict": "approve",
        "reason": "looks right",
        "checkpoint_id": "6f1c2f3e-8a51-4c1d-9a55-0c9c1b0f9d4e",
    },
)
HANDOVER_EXAMPLE = OpenApiExample(
    "to the finance group",
    request_only=True,
    value={"to": "group:finance", "note": "over my limit; finance should look"},
)


GRANT_DECISION_EXAMPLE = OpenApiExample(
    "approve and always allow",
    request_only=True,
    value={
        "verdict": "approve",
        "checkpoint_id": "6f1c2f3e-8a51-4c1d-9a55-0c9c1b0f9d4e",
        "grant": {"match": {"to": {"endswith": "@example.com"}}, "scope": "agent", "max_uses": 20},
    },
)
PROBLEM_EXAMPLE = OpenApiExample(
    "a decision on an approval already decided",
    response_only=True,
    status_codes=["409"],
    value={
        "type": "about:blank",
        "title": "Conflict",
        "status": 409,
        "detail": "this approval was already approved",
        "code": "decided",
    },
)
