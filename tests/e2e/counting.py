"""Counting the demo tools' effects in the world, for the crash and race tests.

An effect counted twice is a duplicate, so the counting must see every effect:

- Emails are counted by Message-ID across every message in the file outbox.
  Django's file backend names a file by the second and the backend object's
  id, and appends to it; two worker processes forked from one parent can send
  in the same second under the same name, so one file may hold several
  messages. Each message is written followed by a line of 79 '-'.
- Refunds are counted per run from the DemoRefund rows' idempotency keys
  (`<run id>:<tool call id>`). The table keeps a key unique, so a second
  refund of one call cannot even be stored; a refund run twice under two call
  ids of one run is what this count can catch.
- Shell commands are counted as the lines they appended to the run's
  `effects.log` (an external effect with no idempotency key at all).

`plant_duplicates` copies a world and adds one deliberate duplicate of each
kind, so a test can first prove its counters see a duplicate before it trusts
a count of zero.
"""

from __future__ import annotations

import email
import email.policy
import shutil
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path

# What django.core.mail.backends.filebased writes after each message.
SEPARATOR = b"\n" + b"-" * 79 + b"\n"


def outbox_messages(outbox: Path) -> list[EmailMessage]:
    """Every message in every file of the outbox, in file order."""
    if not outbox.exists():
        return []
    messages = []
    for path in sorted(p for p in outbox.iterdir() if p.is_file()):
        for chunk in path.read_bytes().split(SEPARATOR):
            if chunk.strip():
                messages.append(email.message_from_bytes(chunk, policy=email.policy.default))
    return messages


def names_run(message: EmailMessage, run_id: str) -> bool:
    """The demo world's Message-ID is `<run id>.<tool call id>@host`."""
    return str(message["Message-ID"] or "").startswith(f"<{run_id}.")


def message_ids(messages: Iterable[EmailMessage]) -> Counter[str]:
    """How many times each Message-ID was sent; a message without one counts under ''."""
    return Counter(str(m["Message-ID"] or "") for m in messages)


@dataclass(frozen=True)
class World:
    """Where the demo tools' effects land."""

    outbox: Path
    refund_keys: tuple[str, ...]
    runs_dir: Path


@dataclass(frozen=True)
class Effects:
    emails: int
    refunds: int
    commands: int


def effects_per_run(world: World, run_ids: Iterable[str]) -> dict[str, Effects]:
    ids = message_ids(outbox_messages(world.outbox))
    refunds = Counter(key.split(":", 1)[0] for key in world.refund_keys)
    counts = {}
    for run_id in run_ids:
        log = world.runs_dir / run_id / "effects.log"
        counts[run_id] = Effects(
            emails=sum(n for message_id, n in ids.items() if message_id.startswith(f"<{run_id}.")),
            refunds=refunds[run_id],
            commands=len(log.read_text().splitlines()) if log.exists() else 0,
        )
    return counts


def duplicated(counts: dict[str, Effects]) -> dict[str, Effects]:
    """The runs whose effects were counted more than once, of any kind."""
    return {
        run_id: effects
        for run_id, effects in counts.items()
        if max(effects.emails, effects.refunds, effects.commands) > 1
    }


def plant_duplicates(world: World, run_id: str, scratch: Path) -> World:
    """A copy of `world` in which `run_id` sent its email twice, refunded twice and ran its
    command twice. The second email is appended to the same outbox file as the first, the way
    two processes writing in the same second leave it."""
    outbox = scratch / "outbox"
    shutil.copytree(world.outbox, outbox)
    for path in sorted(outbox.iterdir()):
        chunks = path.read_bytes().split(SEPARATOR)
        ours = [c for c in chunks if c.strip() and names_run(email.message_from_bytes(c), run_id)]
        if ours:
            with path.open("ab") as handle:
                handle.write(ours[0] + SEPARATOR)
            break
    else:
        raise AssertionError(f"run {run_id} sent no email to plant a duplicate of")
    runs_dir = scratch / "runs"
    log = runs_dir / run_id / "effects.log"
    log.parent.mkdir(parents=True)
    shutil.copy(world.runs_dir / run_id / "effects.log", log)
    with log.open("a") as handle:
        handle.write(log.read_text().splitlines()[0] + "\n")
    for other in world.runs_dir.iterdir():
        if other.name != run_id and (other / "effects.log").exists():
            (runs_dir / other.name).mkdir()
            shutil.copy(other / "effects.log", runs_dir / other.name / "effects.log")
    return World(
        outbox=outbox,
        refund_keys=(*world.refund_keys, f"{run_id}:call_planted_duplicate"),
        runs_dir=runs_dir,
    )
