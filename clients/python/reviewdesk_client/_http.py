"""HTTP to the desk: the bearer token, problem+json answers as DeskError, and retries where a
retry cannot do a thing twice (reads; any request that never reached the desk)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx

from reviewdesk_client.errors import DeskError

USER_AGENT = "reviewdesk-client/0.1"
RETRIES = 3
RETRY_STATUSES = (502, 503, 504)


class Http:
    def __init__(self, url: str, token: str | None, client: httpx.Client | None = None, timeout: float = 30):
        self.url = url.rstrip("/")
        self.token = token
        self._own = client is None
        self.client = client or httpx.Client(timeout=timeout)

    def close(self) -> None:
        if self._own:
            self.client.close()

    def headers(self, extra: Mapping[str, str] | None = None, *, auth: bool = True) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if auth and self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        headers.update(extra or {})
        return headers

    def get(self, path: str, *, params: Mapping[str, Any] | None = None, auth: bool = True) -> Any:
        return self.request("GET", path, params=params, auth=auth)

    def post(self, path: str, body: Any, *, headers: Mapping[str, str] | None = None) -> Any:
        return self.request("POST", path, json=body, headers=headers)

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        auth: bool = True,
    ) -> Any:
        """The answer's JSON; raises DeskError for an error status or an unreachable desk."""
        url = path if path.startswith("http") else self.url + path
        for attempt in range(RETRIES):
            try:
                response = self.client.request(
                    method, url, json=json, params=params, headers=self.headers(headers, auth=auth)
                )
            except httpx.ConnectError as error:  # never reached the desk: safe to send again
                if attempt == RETRIES - 1:
                    raise DeskError(0, "unreachable", str(error)) from error
            except httpx.TransportError as error:  # may have reached it: only a read is repeated
                if method != "GET" or attempt == RETRIES - 1:
                    raise DeskError(0, "transport", str(error)) from error
            else:
                if response.status_code in RETRY_STATUSES and method == "GET" and attempt < RETRIES - 1:
                    pass
                else:
                    return _answer(response)
            time.sleep(0.2 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.contextmanager
    def stream(
        self,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        read_timeout: float | None = None,
    ) -> Iterator[httpx.Response]:
        """A streamed GET (Server-Sent Events); raises DeskError for an error status."""
        timeout = httpx.Timeout(30.0, read=read_timeout)
        extra = {"Accept": "text/event-stream", **(headers or {})}
        with self.client.stream(
            "GET", self.url + path, params=params, headers=self.headers(extra), timeout=timeout
        ) as response:
            if response.status_code >= 400:
                response.read()
                _answer(response)
            yield response


def _answer(response: httpx.Response) -> Any:
    if response.status_code < 400:
        return response.json() if response.content else None
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text[:500]}
    if not isinstance(body, dict):
        body = {"detail": str(body)}
    raise DeskError(
        response.status_code,
        str(body.get("code") or response.status_code),
        str(body.get("detail") or ""),
        body,
    )
