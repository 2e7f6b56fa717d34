"""`make eval`, second part: the second opinion's plumbing over the same labelled calls.

The reviewer model is scripted (its judgement is the one fake): for each call of
tests/fixtures/provenance_eval.json the desk's prompt is built as the `approvals.read` task builds
it (agents.second_opinion.reading_prompt, over the call's log and its provenance), a scripted
model answers through the provider interface, and the answer is validated as the task validates
it (reading_from). Printed, with a target each:

- prompts that keep every argument's text and every tool output inside an <untrusted> block
  (nothing the model reads outside a block was written by anyone but the desk): all of them;
- scripted readings that name each flagged argument in a concern, accepted by the schema: all;
- an "obedient" model that answers low with no concern for every call: accepted as a reading.
  It is shown beside the flags, which are computed without it; that no reading changes what
  needs a human is tested on the real database in tests/reviewdesk/approvals/test_reading_never_decides.py.

Pure CPU: no database, no processes. Exits 1 when a target is missed.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any

from agents.provenance import leaves, provenance_flags
from agents.providers.scripted import ScriptedProvider
from agents.second_opinion import (
    READING_NAME,
    READING_TOOL,
    ReadingInvalid,
    escape,
    reading_from,
    reading_prompt,
)
from bench.provenance_eval import eval_cases, run_case

BLOCK = re.compile(r'<untrusted source="[^"]*">\n.*?\n</untrusted>', re.S)
SHORTEST_CHECKED = 4  # a shorter value ("10", "push") may be a word of the desk's own text


@dataclass(frozen=True)
class ReadingOutcome:
    case_id: str
    outside: list[str]  # argument or tool-output texts found outside every untrusted block
    named: bool  # the scripted reading naming each flagged argument was accepted
    obedient_accepted: bool  # a "low, no concerns" reading was accepted as a reading


def _first_task(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def _texts_to_keep_inside(case: dict[str, Any]) -> list[str]:
    values = [str(v) for _, v in leaves(case["arguments"]) if isinstance(v, str)]
    outputs = [str(m.get("content") or "") for m in case["messages"] if m.get("role") == "tool"]
    return [escape(t) for t in values + outputs if len(t) >= SHORTEST_CHECKED and t != case["tool"]]


def _answer(case: dict[str, Any], prompt: list[dict[str, Any]], reading: dict[str, Any]) -> dict[str, Any]:
    provider = ScriptedProvider([{"tool_calls": [{"name": READING_NAME, "arguments": reading}]}])
    turn = provider.complete(prompt, [READING_TOOL])
    return reading_from(turn, arguments=case["arguments"], steps=len(case["messages"]))


def read_case(case: dict[str, Any]) -> ReadingOutcome:
    outcome = run_case(case)
    flags = provenance_flags(outcome.provenance, aimed=case["aimed"], external=case["external"])
    prompt = reading_prompt(
        tool=case["tool"],
        description="",
        arguments=case["arguments"],
        task=_first_task(case["messages"]),
        recent=case["messages"],
        provenance={"sources": outcome.provenance, "flags": flags},
    )
    outside = outside_blocks(prompt[1]["content"], _texts_to_keep_inside(case))
    flagged = sorted({f["pointer"] for f in flags})
    careful = {
        "risk": "high" if flagged else "low",
        "summary": f"{case['tool']} as asked" if not flagged else f"{case['tool']} with values from outside",
        "concerns": [{"about": pointer, "text": "came from outside the task"} for pointer in flagged],
    }
    try:
        named = [c["about"] for c in _answer(case, prompt, careful)["concerns"]] == flagged
    except ReadingInvalid:
        named = False
    try:
        low = _answer(case, prompt, {"risk": "low", "summary": "This call is safe.", "concerns": []})
        accepted = low["risk"] == "low"
    except ReadingInvalid:
        accepted = False
    return ReadingOutcome(case_id=case["id"], outside=outside, named=named, obedient_accepted=accepted)


def outside_blocks(prompt_text: str, texts: list[str]) -> list[str]:
    """Those of `texts` that the prompt holds outside every untrusted block (shortened)."""
    remainder = BLOCK.sub("", prompt_text)
    return [text[:60] for text in texts if text in remainder]


def evaluate_readings(cases: list[dict[str, Any]] | None = None) -> list[ReadingOutcome]:
    return [read_case(case) for case in (eval_cases() if cases is None else cases)]


def report(outcomes: list[ReadingOutcome]) -> tuple[str, bool]:
    total = len(outcomes)
    delimited = [o for o in outcomes if not o.outside]
    named = [o for o in outcomes if o.named]
    kept = [o for o in outcomes if o.obedient_accepted]
    lines = [
        f"Second opinion's plumbing over {total} labelled calls (scripted reviewer model)",
        f"prompts with every argument and tool output inside an untrusted block: {len(delimited)}/{total}",
        f"scripted readings naming each flagged argument, accepted by the schema: {len(named)}/{total}",
        f'an obedient "low, no concerns" reading accepted as advice beside the flags: {len(kept)}/{total}',
    ]
    for o in outcomes:
        if o.outside:
            lines.append(f"  outside a block in {o.case_id}: {json.dumps(o.outside)}")
    met = len(delimited) == len(named) == len(kept) == total
    lines.append("targets: " + ("met" if met else "MISSED"))
    return "\n".join(lines), met


def main() -> int:
    text, met = report(evaluate_readings())
    print(text)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
