"""An SSE endpoint driven through the desk's ASGI application in the test's own event loop: the
request sent, the client kept connected, and what the server sent collected."""

from __future__ import annotations

import asyncio
from typing import Any


class StreamCall:
    """One GET of `path` (with `query` and extra `headers`) as an ASGI server would make it."""

    def __init__(self, path: str, headers: list[tuple[bytes, bytes]], query: bytes = b"") -> None:
        self.sent: list[dict[str, Any]] = []
        self._opened = False
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": query,
            "server": ("testserver", 80),
            "client": ("127.0.0.1", 1),
            "headers": [(b"host", b"testserver"), *headers],
        }

    async def receive(self) -> dict[str, Any]:
        if not self._opened:
            self._opened = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Future()  # the client stays
        raise AssertionError("unreachable")

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def start(self) -> asyncio.Future:
        """The application serving this call, as a task of the running loop."""
        from reviewdesk.asgi import application

        return asyncio.ensure_future(application(self.scope, self.receive, self.send))

    @property
    def status(self) -> int | None:
        return self.sent[0]["status"] if self.sent else None

    def body(self) -> bytes:
        """What the response's body messages carried."""
        return b"".join(message.get("body", b"") for message in self.sent[1:])
