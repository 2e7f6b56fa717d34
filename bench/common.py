"""What the figures share: samples and their summary, the people, a reviewer's socket."""

from __future__ import annotations

import asyncio
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import websockets

SHORT = os.environ.get("BENCH", "full") == "short"


def size(short: int, full: int) -> int:
    return short if SHORT else full


def summary(samples: list[float]) -> dict[str, float | int | None]:
    """Median, p99 (nearest rank) and count of `samples` (milliseconds or a rate)."""
    if not samples:
        return {"median": None, "p99": None, "n": 0}
    ordered = sorted(samples)
    rank = max(0, math.ceil(0.99 * len(ordered)) - 1)
    return {"median": statistics.median(ordered), "p99": ordered[rank], "n": len(ordered)}


@dataclass
class Row:
    """One line of the table: a figure, its floor, and the target that relates them."""

    id: str
    figure: str
    unit: str
    samples: list[float]
    floor: str = ""
    floor_samples: list[float] = field(default_factory=list)
    # `ratio` is figure/floor (or figure/baseline); the target holds when ratio <= max_ratio
    # (or >= min_ratio for rates). None: no target, reported only.
    max_ratio: float | None = None
    min_ratio: float | None = None
    # An absolute target: it holds when every sample is <= max_value (e.g. 0 missed deliveries).
    max_value: float | None = None
    target: str = ""
    # A further condition of the target that is not a ratio (e.g. the same query count).
    condition: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        figure, floor = summary(self.samples), summary(self.floor_samples)
        ratio = None
        if figure["median"] is not None and floor["median"]:
            ratio = figure["median"] / floor["median"]
        met = None
        if ratio is not None and self.max_ratio is not None:
            met = ratio <= self.max_ratio
        if ratio is not None and self.min_ratio is not None:
            met = ratio >= self.min_ratio
        if self.max_value is not None and self.samples:
            met = (met is not False) and max(self.samples) <= self.max_value
        if met is not None:
            met = met and self.condition
        if not self.samples and (self.max_ratio or self.min_ratio or self.max_value is not None):
            met = False
        data = asdict(self)
        data.pop("samples")
        data.pop("floor_samples")
        return {**data, "value": figure, "floor_value": floor, "ratio": ratio, "met": met}


def ms(seconds: float) -> float:
    return seconds * 1000.0


class Socket:
    """A reviewer's /ws/desk/ (or the bare floor socket): every message with its arrival time."""

    def __init__(self) -> None:
        self.messages: list[tuple[float, Any]] = []
        self._waiters: list[tuple[Callable[[Any], bool], asyncio.Future]] = []
        self.on_message: Callable[[float, Any], None] | None = None

    async def open(
        self, url: str, *, cookie: str | None = None, raw: bool = False, origin: str | None = None
    ) -> Socket:
        # A page's origin: the server's own, unless the page is served from another (a
        # second ASGI process behind the same origin, figure #8).
        origin = origin or url.replace("ws://", "http://").split("/ws/")[0]
        headers = {"Origin": origin}
        if cookie:
            headers["Cookie"] = cookie
        self.ws = await websockets.connect(url, additional_headers=headers, max_size=None, open_timeout=30)
        self.raw = raw
        self.reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        async for text in self.ws:
            at = time.time()
            message = text if self.raw else json.loads(text)
            self.messages.append((at, message))
            if self.on_message:
                self.on_message(at, message)
            for waiter in list(self._waiters):
                predicate, future = waiter
                if not future.done() and predicate(message):
                    future.set_result((at, message))
                    self._waiters.remove(waiter)

    async def wait_for(self, predicate: Callable[[Any], bool], timeout: float) -> tuple[float, Any]:
        for at, message in self.messages:
            if predicate(message):
                return at, message
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, future))
        return await asyncio.wait_for(future, timeout)

    async def close(self) -> None:
        await self.ws.close()
        self.reader.cancel()


def read_records(client, key: str) -> list[dict[str, Any]]:
    return [json.loads(item) for item in client.lrange(key, 0, -1)]


def wait_records(client, key: str, predicate: Callable[[dict], bool], timeout: float = 5.0) -> dict | None:
    """The first record under `key` that matches, once the probe has flushed it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in read_records(client, key):
            if predicate(record):
                return record
        time.sleep(0.05)
    return None


def counters(client, role: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for name, value in client.hgetall("bench:counters").items():
        who, _pid, what = name.decode().split(":")
        if who == role:
            totals[what] = totals.get(what, 0) + int(value)
    return totals
