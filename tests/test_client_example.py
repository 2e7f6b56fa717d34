"""examples/client.py's reading of the stream, in-process: the desk's own ending bytes
(`event: end`, reviewdesk/api/views/streams.py) served by httpx's MockTransport, no desk behind it.
tests/e2e/test_api_client_example.py runs the client against the real stack."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import httpx
import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "client.py"
END = b"event: end\ndata: {}\n\n"  # what the desk sends when the caller may no longer read


def load_example():
    spec = importlib.util.spec_from_file_location("client_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_source_still_ends_streams_with_these_bytes():
    source = (Path(__file__).resolve().parents[1] / "reviewdesk" / "api" / "views" / "streams.py").read_text()
    assert r'b"event: end\ndata: {}\n\n"' in source


def test_a_stream_the_desk_ends_stops_the_client_with_why_not_a_traceback():
    event = b'id: 7\nevent: run.updated\ndata: {"seq": 7, "type": "run.updated", "data": {"status": "running"}}\n\n'
    served = []

    def handler(request: httpx.Request) -> httpx.Response:
        served.append(request.url.path)
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=event + END)

    client = httpx.Client(base_url="http://desk.test", transport=httpx.MockTransport(handler))
    with pytest.raises(SystemExit) as ended:
        load_example().follow(client, "run-1", until_end=True)

    assert "ended the stream" in str(ended.value) and "revoked" in str(ended.value)
    assert served == ["/api/v1/runs/run-1/stream"]  # once: an ended stream is not reconnected
