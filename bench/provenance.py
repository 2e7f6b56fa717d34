"""#11 provenance's cost per approval raised: `provenance_of` + its flags + the reviewer-text
heuristic over a run's whole log, as the worker runs them when a call needs a human.

The log is built to look like a working run: a system prompt of about 1.5 KB, the task, then
model turns each calling one tool whose output is 1-4 KB (a fetched page, an inbox, a customer
record; the record's tool trusted, the others not), and the gated call last. The call has five
leaves: a recipient only a fetched page held (so it is flagged, and the normalised texts are
searched too), a cc from the task, a subject from the task in other case, a model-written body
and an amount from the trusted record. Measured at 20 and 200 messages, interleaved; p50 and
p95 in ms and the ratio 200/20. Pure CPU in this process: the stack is not used.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from typing import Any

from agents.addressed import injection_flags
from agents.provenance import ToolTrust, provenance_flags, provenance_of
from bench.common import Row, size

SIZES = (20, 200)
WORDS = [
    "order",
    "refund",
    "customer",
    "invoice",
    "shipping",
    "address",
    "billing",
    "account",
    "payment",
    "total",
    "amount",
    "page",
    "contact",
    "support",
    "please",
    "thank",
    "you",
    "report",
    "quarterly",
    "finance",
    "team",
    "review",
    "update",
    "policy",
    "delivery",
    "warehouse",
    "tracking",
    "status",
    "confirm",
    "receipt",
    "balance",
    "pending",
    "approved",
    "schedule",
    "meeting",
    "agenda",
    "notes",
    "summary",
]
ARGUMENTS = {
    "to": "partners@northwind-traders.example",
    "cc": "ops@acme.example",
    "subject": "Quarterly Statement For Northwind",
    "body": "Hello,\n\nPlease find attached the quarterly statement. The balance is settled.\n\nRegards,\nAcme billing",
    "amount": 1842.5,
}
TRUST = ToolTrust(trusted=lambda name: name == "lookup_customer")


def spread(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)] if ordered else None
    return {"p50": statistics.median(ordered) if ordered else None, "p95": p95, "n": len(ordered)}


def _prose(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words)


def _output(rng: random.Random, n: int) -> tuple[str, Any]:
    kind = n % 3
    if kind == 0:
        text = _prose(rng, rng.randint(1000, 3900))
        if n == 3:  # the page the recipient came from
            text += " For statements write to partners@northwind-traders.example."
        return "fetch_page", {"url": f"https://site{n}.example/page", "status": 200, "text": text}
    if kind == 1:
        mails = [
            {
                "from": f"user{n}.{i}@mail.example",
                "subject": _prose(rng, 40),
                "body": _prose(rng, rng.randint(350, 1250)),
            }
            for i in range(3)
        ]
        return "read_inbox", {"messages": mails}
    record = {
        "customer": f"C-{n:04d}",
        "company": "Northwind Traders",
        "balance": "1842.50",
        "notes": _prose(rng, rng.randint(1000, 3800)),
    }
    return "lookup_customer", record


def run_log(messages: int, seed: int = 11) -> list[dict[str, Any]]:
    """A run's log of exactly `messages` messages, the gated call last."""
    rng = random.Random(seed)
    log: list[dict[str, Any]] = [
        {"role": "system", "content": "You are Acme's billing assistant. " + _prose(rng, 1500)},
        {
            "role": "user",
            "content": "Send Northwind the quarterly statement for northwind, cc ops@acme.example, "
            "subject 'quarterly statement for northwind'.",
        },
    ]
    n = 0
    while len(log) < messages - 1:
        n += 1
        name, result = _output(rng, n)
        call = {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        log.append({"role": "assistant", "content": None, "tool_calls": [call]})
        log.append({"role": "tool", "tool_call_id": f"call_{n}", "content": json.dumps(result)})
    del log[messages - 1 :]
    final = {
        "id": "call_last",
        "type": "function",
        "function": {"name": "send_email", "arguments": json.dumps(ARGUMENTS)},
    }
    log.append({"role": "assistant", "content": None, "tool_calls": [final]})
    return log


def once(log: list[dict[str, Any]]) -> tuple[float, list[dict]]:
    started = time.perf_counter()
    found = provenance_of(ARGUMENTS, log, TRUST)
    flags = provenance_flags(found, aimed=("/to", "/cc"), external=True) + injection_flags(ARGUMENTS)
    return (time.perf_counter() - started) * 1000, flags


def measure_sizes(repeats: int, budget: float) -> dict[str, Any]:
    logs = {n: run_log(n) for n in SIZES}
    samples: dict[int, list[float]] = {n: [] for n in SIZES}
    flags: dict[int, list[dict]] = {}
    for n in SIZES:  # a warm-up each: the regular expressions compile once per process
        once(logs[n])
    deadline = time.monotonic() + budget
    while min(len(s) for s in samples.values()) < repeats and time.monotonic() < deadline:
        for n in SIZES:
            took, flags[n] = once(logs[n])
            samples[n].append(took)
    return {
        "samples": samples,
        "bytes": {n: len(json.dumps(logs[n])) for n in SIZES},
        "flags": {n: [(f["pointer"], f["code"]) for f in flags.get(n, [])] for n in SIZES},
    }


async def measure(stack, people, redis, budget: float) -> list[Row]:
    measured = measure_sizes(size(40, 400), budget)
    if ("/to", "untrusted_origin") not in measured["flags"][SIZES[1]]:
        # The recipient came only from a fetched page: a log that does not flag it measures less
        # work than the worker does.
        raise RuntimeError(f"#11's call was not flagged as built: {measured['flags']}")
    few, many = (measured["samples"][n] for n in SIZES)
    extra = {
        "provenance": {
            "sizes": list(SIZES),
            "spread": {n: spread(measured["samples"][n]) for n in SIZES},
            "bytes": measured["bytes"],
            "flags": measured["flags"],
        }
    }
    return [
        Row(
            "11",
            f"provenance per approval raised, {SIZES[1]}-message log",
            "ms",
            many,
            floor=f"the same at {SIZES[0]} messages",
            floor_samples=few,
            target="reported",
            extra=extra,
        )
    ]


def provenance_text(p: dict[str, Any]) -> str:
    lines = ["\n#11 provenance per approval raised (provenance_of + flags, 5 leaves), p50 / p95:"]
    for n in p["sizes"]:
        s = p["spread"].get(n) or p["spread"].get(str(n))
        stored = p["bytes"].get(n) or p["bytes"].get(str(n))
        lines.append(
            f"  {n:>3} messages ({stored:,} B of log): p50 {s['p50']:.2f} ms, p95 {s['p95']:.2f} ms (n {s['n']})"
        )
    first, last = (p["spread"].get(n) or p["spread"].get(str(n)) for n in (p["sizes"][0], p["sizes"][-1]))
    lines.append(f"  ratio {p['sizes'][-1]}/{p['sizes'][0]} (p50): {last['p50'] / first['p50']:.1f}x")
    return "\n".join(lines)
