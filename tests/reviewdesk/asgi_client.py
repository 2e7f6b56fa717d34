"""Django's own ASGI application called in-process as a server calls it: a fresh event loop,
no sync thread around it (the in-process ASGI tests share this)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass
class AsgiResponse:
    status: int
    headers: dict[str, str]


async def asgi_get(app, path: str, token: str, *, root_path: str = "") -> AsgiResponse:
    """One GET through the ASGI application with a bearer token."""
    return await asgi_request(app, "GET", path, token, root_path=root_path)


async def asgi_request(
    app, method: str, path: str, token: str, json_body: bytes = b"", *, root_path: str = ""
) -> AsgiResponse:
    """One request through the ASGI application with a bearer token (and a JSON body); with
    `root_path`, as a server mounting the desk there sends it (the path then starts with it)."""
    headers = [(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())]
    if json_body:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(json_body)).encode())]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": root_path + path,
        "raw_path": (root_path + path).encode(),
        "root_path": root_path,
        "query_string": b"",
        "headers": headers,
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 40000),
    }
    body = [{"type": "http.request", "body": json_body, "more_body": False}]
    sent: list[dict] = []

    async def receive() -> dict:
        return body.pop() if body else await asyncio.Future()  # then no disconnect

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    headers = {name.decode().lower(): value.decode() for name, value in sent[0].get("headers", [])}
    return AsgiResponse(sent[0]["status"], headers)
