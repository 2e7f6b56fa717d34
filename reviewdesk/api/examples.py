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
AGENTS_EXAMPLE = OpenApiExample(
    "the demo agent, two of its tools",
    response_only=True,
    status_codes=["200"],
    value={
        "results": [
            {
                "name": "demo",
                "requires_device_keys": False,
                "tools": [
                    {
                        "name": "send_email",
                        "description": "Send an email to a customer.",
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "to": {"type": "string"},
                                "subject": {"type": "string"},
                                "body": {"type": "string"},
                            },
                            "required": ["to", "subject", "body"],
                        },
                        "effect": "external",
                        "approval": "always",
                        "grantable": True,
                        "quorum": {"required": 1, "groups": []},
                        "requires_device_keys": False,
                        "output_trusted": False,
                        "aimed": ["/to"],
                        "second_opinion": False,
                        "source": {"kind": "module", "name": "agents.demo"},
                    },
                    {
                        "name": "refund_payment",
                        "description": "Refund part or all of an order.",
                        "parameters": {
                            "type": "object",
                            "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                            "required": ["order_id", "amount"],
                        },
                        "effect": "database",
                        "approval": "depends",
                        "grantable": True,
                        "quorum": {"required": 1, "groups": []},
                        "requires_device_keys": False,
                        "output_trusted": False,
                        "aimed": ["/order_id", "/amount"],
                        "second_opinion": False,
                        "source": {"kind": "module", "name": "agents.demo"},
                    },
                ],
            }
        ],
        "next": None,
    },
)
