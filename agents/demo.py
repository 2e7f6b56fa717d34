"""The demo agent: the worked example of declaring tools and an agent.

Its world (email, the demo ledger) is handed in by the host as `ctx.world`,
an object with the `DemoWorld` methods; `reviewdesk.demo.world` implements it
on Django's email backend and the database.
"""

from __future__ import annotations

import subprocess
from decimal import Decimal
from typing import Any, Protocol

from agents.registry import Agent, register
from agents.tools import ALWAYS, NEVER, Effect, Tool, ToolContext, ToolError

CUSTOMERS: dict[str, dict[str, Any]] = {
    "ada@example.com": {
        "name": "Ada Lovelace",
        "email": "ada@example.com",
        "orders": [{"order_id": "A-1001", "amount": "250.00"}, {"order_id": "A-1002", "amount": "40.00"}],
    },
    "grace@example.com": {
        "name": "Grace Hopper",
        "email": "grace@example.com",
        "orders": [{"order_id": "G-2001", "amount": "99.00"}],
    },
}
ORDERS = {order["order_id"]: order for c in CUSTOMERS.values() for order in c["orders"]}


class DemoWorld(Protocol):
    def send_email(self, *, to: str, subject: str, body: str, idempotency_key: str) -> str: ...

    def refund(self, *, order_id: str, amount: Decimal, idempotency_key: str) -> dict[str, Any]: ...

    def refunded(self, order_id: str) -> Decimal: ...


def lookup_customer(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    customer = CUSTOMERS.get(arguments["email"].lower())
    if customer is None:
        raise ToolError(f"no customer with email {arguments['email']}")
    return customer


def send_email(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    message_id = ctx.world.send_email(
        to=arguments["to"],
        subject=arguments["subject"],
        body=arguments["body"],
        idempotency_key=ctx.idempotency_key,
    )
    return {"sent": True, "to": arguments["to"], "message_id": message_id}


def refund_payment(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    order = ORDERS.get(arguments["order_id"])
    if order is None:
        raise ToolError(f"no order {arguments['order_id']}")
    amount = Decimal(str(arguments["amount"]))
    left = Decimal(order["amount"]) - ctx.world.refunded(order["order_id"])
    if amount > left:
        raise ToolError(f"refund {amount} exceeds what is left to refund on {order['order_id']} ({left})")
    return ctx.world.refund(order_id=order["order_id"], amount=amount, idempotency_key=ctx.idempotency_key)


def execute(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from django.conf import settings

    ctx.workdir.mkdir(parents=True, exist_ok=True)
    try:
        completed = subprocess.run(
            ["sh", "-c", arguments["command"]],
            cwd=ctx.workdir,
            capture_output=True,
            text=True,
            timeout=settings.DESK_EXECUTE_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired as exc:
        raise ToolError(f"command timed out after {exc.timeout}s") from None
    return {
        "exit_code": completed.returncode,
        "stdout": completed.stdout[-10_000:],
        "stderr": completed.stderr[-10_000:],
    }


def refund_needs_approval(arguments: dict[str, Any]) -> bool:
    return Decimal(str(arguments.get("amount", 0))) > 100


DEMO = register(
    Agent(
        name="demo",
        system_prompt=(
            "You are a customer-support agent. Look customers up before acting. "
            "Emails, large refunds and shell commands are reviewed by a human."
        ),
        tools=(
            Tool(
                name="lookup_customer",
                description="Find a customer and their orders by email address.",
                parameters={
                    "type": "object",
                    "properties": {"email": {"type": "string", "minLength": 3}},
                    "required": ["email"],
                    "additionalProperties": False,
                },
                effect=Effect.READ,
                approval=NEVER,
                func=lookup_customer,
            ),
            Tool(
                name="send_email",
                description="Send an email to a customer.",
                parameters={
                    "type": "object",
                    "properties": {
                        "to": {"type": "string", "minLength": 3},
                        "subject": {"type": "string", "minLength": 1, "maxLength": 200},
                        "body": {"type": "string"},
                    },
                    "required": ["to", "subject", "body"],
                    "additionalProperties": False,
                },
                effect=Effect.EXTERNAL,
                approval=ALWAYS,
                func=send_email,
            ),
            Tool(
                name="refund_payment",
                description="Refund part or all of an order. Refunds over 100 need approval.",
                parameters={
                    "type": "object",
                    "properties": {
                        "order_id": {"type": "string"},
                        "amount": {"type": "number", "exclusiveMinimum": 0},
                    },
                    "required": ["order_id", "amount"],
                    "additionalProperties": False,
                },
                effect=Effect.DATABASE,
                approval=refund_needs_approval,
                func=refund_payment,
            ),
            Tool(
                name="execute",
                description="Run a shell command in the run's working directory.",
                parameters={
                    "type": "object",
                    "properties": {"command": {"type": "string", "minLength": 1}},
                    "required": ["command"],
                    "additionalProperties": False,
                },
                effect=Effect.EXTERNAL,
                approval=ALWAYS,
                func=execute,
            ),
        ),
    )
)
