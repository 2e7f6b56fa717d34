"""Text in a call's arguments that speaks to whoever reads the call (a reviewer, a reviewer
model) rather than to the call's recipient: "ignore previous instructions", "this call is
safe", "risk: low". A heuristic beside provenance (agents.provenance), which traces where values
came from; this one reads what they say. Tested in-process by tests/agents/test_provenance.py.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Any

from agents.provenance import CONFUSABLES, normalise

# Phrases that speak to whoever reads the call rather than to the call's recipient. Matched on
# the text NFKC'd, case folded, with the confusables table applied and whitespace collapsed, so a
# Cyrillic a (U+0430) or a zero-width space does not hide them. A heuristic: it misses paraphrases and
# can fire on an email that quotes such words.
_ADDRESSES_READER = re.compile(
    "|".join(
        (
            r"\b(?:ignore|disregard|forget|override) (?:all |any |the |your )*(?:previous|prior|above|earlier|preceding|other) (?:instructions|directions|prompts?|rules|messages|guidance)",
            r"\bthis (?:tool call|call|request|action|transaction|command|operation|email|refund|payment|transfer) is (?:safe|approved|authori[sz]ed|legitimate|verified|pre-?approved|harmless|expected|routine)",
            r"\b(?:please )?(?:approve|authori[sz]e|allow) (?:this|it|the (?:call|request|action)) (?:immediately|now|without)",
            r"\b(?:reviewer|approver|assistant|ai|model|llm)s?,? (?:please )?(?:approve|allow|ignore|accept)",
            r"\bapprove this\b",
            r"\bas (?:the|a|your) (?:system|administrator|admin|developer|operator|reviewer)\b",
            r"\brisk(?: level| rating| score)? ?[:=] ?(?:low|none|minimal|0)\b",
            r"\bnote to (?:the )?(?:reviewer|approver|model|assistant|ai|llm)\b",
            r"\b(?:no|without|does not need|doesn't need|skip) (?:further |human |manual )*(?:review|approval)\b",
            r"\bnew instructions?:",
            r"\bsystem (?:prompt|override|message|instruction)s?\b",
            r"<\|?/?(?:system|instructions?|im_start|im_end)\|?>",
            r"\[/?(?:system|inst)\]",
            r"\bsafe to (?:approve|run|execute|send|pay)\b",
            r"\byou (?:must|should|are instructed to|are required to) (?:approve|allow|accept|ignore)\b",
        )
    )
)


# The table's non-ASCII letters and invisibles only: folding digits and "|" here would turn
# "risk: 0" into "risk: o" and "<|system|>" into "<lsysteml>".
_LETTERS_TABLE = str.maketrans({k: v.lower() for k, v in CONFUSABLES.items() if not k.isascii()})


def _reader_text(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return normalise(folded.translate(_LETTERS_TABLE), ("whitespace",))


def _strings(value: Any, pointer: str = "") -> Iterator[tuple[str, str]]:
    """(pointer, text) of every string in `value`, keys included (under the value's pointer)."""
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"
            yield inner, str(key)
            yield from _strings(item, inner)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{pointer}/{index}")
    elif isinstance(value, str) and pointer:
        yield pointer, value


def injection_flags(arguments: Any) -> list[dict]:
    """Text in the arguments addressed at a reviewer or a model ("ignore previous instructions",
    "this call is safe", "approve this", "as the system", "risk: low", ...): one
    {"pointer", "code": "addresses_reviewer", "text"} per pointer. A heuristic, documented as one."""
    flags: dict[str, dict] = {}
    for pointer, text in _strings(arguments):
        if pointer in flags:
            continue
        match = _ADDRESSES_READER.search(_reader_text(text))
        if match:
            flags[pointer] = {
                "pointer": pointer,
                "code": "addresses_reviewer",
                "text": f'{pointer} says "{match.group(0)}": words for a reviewer or a model, not for the call',
            }
    return list(flags.values())
