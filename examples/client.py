#!/usr/bin/env python3
"""A Review Desk API client in one file: submit a task, follow its run, print the outcome.

    export DESK_TOKEN=...   # python manage.py create_token carol --scope submit
    python examples/client.py --url http://127.0.0.1:8000 "Tell Ada her refund is on its way."

It POSTs /api/v1/runs, then follows GET /api/v1/runs/{id}/stream (Server-Sent Events). When the
connection drops it reconnects with `Last-Event-ID: <last id seen>`, so no event is missed or
repeated. It stops when the run needs a human (status input_required: it prints what waits for
approval) or ends (it prints the output or the error). With --until-end it keeps following
through approvals until the run ends.

Exit status: 0 when the run succeeded or waits for approval, 1 when it failed or was cancelled,
2 on an API error. Needs only httpx and the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator

import httpx

ENDED = {"succeeded", "failed", "cancelled"}


def sse_events(response: httpx.Response) -> Iterator[tuple[str, str, dict]]:
    """(id, event type, data) for each event of a text/event-stream body."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if not line:  # a blank line ends an event
            if "data" in fields:
                yield fields.get("id", ""), fields.get("event", "message"), json.loads(fields["data"])
            fields = {}
        elif not line.startswith(":"):  # ":" starts a keep-alive comment
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def follow(client: httpx.Client, run_id: str, *, until_end: bool) -> str:
    """Follow the run's stream until it waits for approval (unless until_end) or ends; its status."""
    last_id, reconnects = None, 0
    while True:
        headers = {"Accept": "text/event-stream"}
        if last_id:
            headers["Last-Event-ID"] = last_id  # resume after the last event we saw
        try:
            with client.stream(
                "GET", f"/api/v1/runs/{run_id}/stream", headers=headers, timeout=None
            ) as response:
                if response.status_code != 200:
                    response.read()
                    raise SystemExit(f"stream refused: {response.status_code} {response.text}")
                for event_id, kind, message in sse_events(response):
                    last_id = event_id or last_id
                    if kind == "end":  # the server ended it: the token or the run is no longer ours
                        raise SystemExit(
                            "the desk ended the stream: the token was revoked or expired, or the run "
                            "is no longer yours to follow"
                        )
                    data = message["data"]
                    if kind == "approval.created":
                        print(
                            f"[{event_id}] waiting for approval: {data['tool']} {json.dumps(data['arguments'])}"
                        )
                    elif kind == "run.updated":
                        print(f"[{event_id}] run is {data['status']}")
                        if data["status"] in ENDED or (data["status"] == "input_required" and not until_end):
                            return data["status"]
                    else:
                        print(f"[{event_id}] {kind}")
            reason = "the server closed the stream"
        except (httpx.TransportError, httpx.StreamError) as error:
            reason = f"connection lost ({type(error).__name__})"
        print(f"{reason}; resuming after event {last_id}", file=sys.stderr)
        reconnects += 1
        if reconnects > 30:
            raise SystemExit("gave up after 30 reconnects")
        time.sleep(min(2.0, 0.2 * reconnects))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", help="what the agent should do")
    parser.add_argument("--url", default=os.environ.get("DESK_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("DESK_TOKEN"), help="or DESK_TOKEN")
    parser.add_argument("--agent", default="demo")
    parser.add_argument("--model", help='JSON, e.g. {"provider": "scripted", "script": [...]}')
    parser.add_argument("--until-end", action="store_true", help="keep following through approvals")
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("a token is needed: --token or DESK_TOKEN")

    headers = {"Authorization": f"Bearer {args.token}"}
    with httpx.Client(base_url=args.url, headers=headers, timeout=30) as client:
        body = {"agent": args.agent, "input": args.task}
        if args.model:
            body["model"] = json.loads(args.model)
        submitted = client.post("/api/v1/runs", json=body)
        if submitted.status_code != 201:  # errors are problem+json: branch on "code"
            problem = submitted.json()
            print(f"submit refused: {submitted.status_code} {problem.get('code')}: {problem.get('detail')}")
            for field, messages in (problem.get("errors") or {}).items():
                print(f"  {field}: {'; '.join(map(str, messages))}")
            return 2
        run_id = submitted.json()["id"]
        print(f"submitted run {run_id}")

        status = follow(client, run_id, until_end=args.until_end)
        run = client.get(f"/api/v1/runs/{run_id}").json()
        if status == "input_required":
            for approval in run["approvals"]:
                if approval["status"] == "pending":
                    print(
                        f"needs approval: {approval['tool']} — decide at {args.url}/approvals/{approval['id']}/"
                    )
            return 0
        print(f"run {status}: {run['output'] or run['error']}")
        return 0 if status == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
