"""A local OpenAI-compatible Chat Completions server for tests.

Real HTTP, real SSE streaming, real status codes: the `openai` client talks to
it exactly as it would to a hosted model. Only the judgement is scripted: each
request takes the next queued reply, served as one JSON body or, when the
request asks for `stream`, as server-sent chunks with tool-call arguments split
across several of them.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    status: int = 200
    error: str = ""
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def text(content: str) -> Reply:
    return Reply(content=content)


def calls(*tool_calls: tuple[str, dict[str, Any] | str], content: str | None = None) -> Reply:
    """Tool calls as (name, arguments); a str argument is sent verbatim (for malformed JSON)."""
    return Reply(content=content, tool_calls=list(tool_calls))


def error(status: int, message: str = "scripted failure", **headers: str) -> Reply:
    return Reply(status=status, error=message, headers=headers)


def slow(seconds: float, reply: Reply) -> Reply:
    reply.delay = seconds
    return reply


class LLMServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._counter = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._json(404, {"error": {"message": f"no route {self.path}"}})
                with server._lock:
                    server.requests.append(body)
                    reply = server.replies.popleft() if server.replies else error(500, "script exhausted")
                    server._counter += 1
                    number = server._counter
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.status != 200:
                    return self._json(
                        reply.status,
                        {"error": {"message": reply.error, "type": "scripted", "code": str(reply.status)}},
                        reply.headers,
                    )
                if body.get("stream"):
                    return self._stream(body, reply, number)
                return self._json(200, server.completion(body, reply, number))

            def _json(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, body: dict[str, Any], reply: Reply, number: int) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in server.chunks(body, reply, number):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def start(self) -> LLMServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.clear()
            self.replies.extend(replies)
            self.requests.clear()

    # --- the OpenAI wire format ---------------------------------------------------
    @staticmethod
    def _arguments(arguments: dict[str, Any] | str) -> str:
        return arguments if isinstance(arguments, str) else json.dumps(arguments)

    def completion(self, body: dict[str, Any], reply: Reply, number: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{number}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": self._arguments(arguments)},
                }
                for i, (name, arguments) in enumerate(reply.tool_calls)
            ]
        return {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "test-model"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def chunks(self, body: dict[str, Any], reply: Reply, number: int) -> list[dict[str, Any]]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": f"chatcmpl-{number}",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": body.get("model", "test-model"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        out = [chunk({"role": "assistant", "content": ""})]
        if reply.content:
            middle = len(reply.content) // 2
            out += [chunk({"content": reply.content[:middle]}), chunk({"content": reply.content[middle:]})]
        for i, (name, arguments) in enumerate(reply.tool_calls):
            raw = self._arguments(arguments)
            third = max(1, len(raw) // 3)
            pieces = [raw[:third], raw[third : 2 * third], raw[2 * third :]]
            out.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": f"call_{number}_{i}",
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            out += [
                chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                for piece in pieces
                if piece
            ]
        out.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
        return out
