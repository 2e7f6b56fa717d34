"""The demo world with a stopwatch: records when `send_email` (the tool) starts."""

from __future__ import annotations

import time

from bench import probe
from reviewdesk.demo.world import DjangoDemoWorld


class BenchWorld(DjangoDemoWorld):
    def send_email(self, *, to: str, subject: str, body: str, idempotency_key: str) -> str:
        probe.record("bench:tools", key=idempotency_key, at=time.time())
        return super().send_email(to=to, subject=subject, body=body, idempotency_key=idempotency_key)
