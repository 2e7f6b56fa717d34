"""Where each argument of a call came from: the run's log searched for every string and number.

`provenance_of(arguments, messages, trust)` maps each leaf of a call's arguments (its JSON
Pointer, RFC 6901) to its sources in the run's log, best first: the submitter's task, a
reviewer's note or answer, the agent's instructions, a tool's output (trusted or not), or none
(the model wrote it). `provenance_flags` turns that into the warnings a reviewer must see: a
value aimed at an external effect that only an untrusted tool's output held, and a value that
resembles text in the run without being it. `agents.addressed.injection_flags` is a separate
heuristic: text in the arguments that speaks to a reviewer or a model.

Matching. A value matches as a whole token: a string or number is never found inside a longer
word or number ("A-10" is not in "A-1001", 25 is not in "250" nor in "2.5"), so a value that is
a piece of the task's text is not vouched for by it. Numbers also match their usual written forms
("1,000", "250.00"). Exact matches are searched first; only a value that they leave without a
source other than an untrusted tool's output is searched again in the normalised texts: NFKC,
case folded, whitespace collapsed, URL-decoded, punycode labels decoded, and folded to a
confusables skeleton (`CONFUSABLES`). Each message is normalised at most once per call.

Pure Python, no Django: the worker runs it when an approval is raised, over the run's whole
log. Tested in-process by tests/agents/test_provenance.py.
"""

from __future__ import annotations

import encodings.idna
import functools
import itertools
import json
import re
import unicodedata
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

SOURCE_KINDS = ("task", "tool_output", "reviewer", "system", "none")
# The steps a normalised match may need; it lists the fewest that it needed.
STEPS = ("url", "punycode", "case", "confusables", "whitespace")
# Case folding and the skeleton do not commute: "I" is "i" folded and "l" as a skeleton. The texts
# are searched case folded first ("BILLING" is "billing"), then, for a value holding a capital
# that the skeleton makes an "l", skeleton first ("paypaI.com" is "paypal.com").
CASE_FIRST = STEPS
SKELETON_FIRST = ("url", "punycode", "confusables", "case", "whitespace")
_CAPITALS_LIKE_L = frozenset("I\u0406\u04c0\u0399")
# Steps whose match means the value only resembles the source's text.
LOOKALIKE_STEPS = frozenset({"confusables", "punycode"})
REVIEWER_NOTE = "[Review Desk] Note from reviewer"
DESK_NOTICE = "[Review Desk]"
# agents/notices.py's words for a reviewer's rejection (the reason after them is the reviewer's).
REJECTION_PREFIXES = (
    "A reviewer rejected this call",
    "This call was interrupted and it is unknown whether it took effect; a reviewer chose not to run it again",
)
SEEN_MAX = 200
# What one call may cost, whoever wrote its arguments (an external run's are a framework's): the
# distinct values traced, and the normalised matches whose text is looked for (`_seen`, the
# dearest step). Past the first, a value is not traced and the call is flagged "untraced" (the
# card then asks first: fail closed); past the second, a normalised match lists every step.
TRACED_VALUES_MAX = 200
SEEN_LOOKUPS_MAX = 32
_KIND_RANK = {"task": 0, "reviewer": 1, "system": 2, "tool_output": 3}
_REJECTION_RANK = 4

# The subset of UTS #39's confusables that matters for addresses, hosts and commands, written as
# escapes (the point of them is that they cannot be told apart on sight): Cyrillic and Greek
# letters drawn like Latin ones, the digits 0 and 1 and the capital I (drawn like o, l,
# l), and the invisible characters (zero-width, soft hyphen, BOM), which the skeleton drops.
# Fullwidth and other compatibility forms are NFKC's, applied in the same step; "rn" (drawn like
# "m") is folded after the table.
CONFUSABLES = {
    # Cyrillic
    "\u0430": "a", "\u0435": "e", "\u04bb": "h", "\u0456": "i", "\u0458": "j", "\u04cf": "l",
    "\u043e": "o", "\u0440": "p", "\u0441": "c", "\u0501": "d", "\u051b": "q", "\u0455": "s",
    "\u0443": "y", "\u0445": "x", "\u051d": "w", "\u044c": "b", "\u0410": "A", "\u0412": "B",
    "\u0415": "E", "\u04ba": "H", "\u0406": "l", "\u0408": "J", "\u041a": "K", "\u04c0": "l",
    "\u041c": "M", "\u041d": "H", "\u041e": "O", "\u0420": "P", "\u0421": "C", "\u0500": "D",
    "\u051a": "Q", "\u0405": "S", "\u0422": "T", "\u0423": "Y", "\u051c": "W", "\u0425": "X",
    # Greek
    "\u03b1": "a", "\u03b3": "y", "\u03b9": "i", "\u03bd": "v", "\u03bf": "o", "\u03c1": "p",
    "\u0391": "A", "\u0392": "B", "\u0395": "E", "\u0396": "Z", "\u0397": "H", "\u0399": "l",
    "\u039a": "K", "\u039c": "M", "\u039d": "N", "\u039f": "O", "\u03a1": "P", "\u03a4": "T",
    "\u03a5": "Y", "\u03a7": "X",
    # Latin and digits
    "0": "o", "1": "l", "I": "l", "|": "l", "\u0131": "i", "\u2113": "l",
    # Invisible
    "\u200b": "", "\u200c": "", "\u200d": "", "\u2060": "", "\ufeff": "", "\u00ad": "",
}  # fmt: skip
_CONFUSABLES_TABLE = str.maketrans(CONFUSABLES)
_ASCII = {key: value for key, value in CONFUSABLES.items() if key.isascii()}
_ASCII_CONFUSABLES = bytes.maketrans("".join(_ASCII).encode(), "".join(_ASCII.values()).encode())

_PUNYCODE_LABEL = re.compile(r"xn--[a-z0-9-]+", re.IGNORECASE)


@dataclass(frozen=True)
class ToolTrust:
    """What the engine knows of the run's tools."""

    trusted: Callable[[str], bool]  # tool name -> whether its output is trusted
    # A question tool: its result is a reviewer's answer.
    answers_human: Callable[[str], bool] = lambda name: False
    # Whether a reviewer rejected this call id, as the host recorded it. A tool's output that
    # reads like a rejection is only one when the host says so: text is anybody's to write.
    rejected: Callable[[str], bool] = lambda call_id: False
    # Whether the host wrote the log's user messages (the desk does: the task, follow-ups, its
    # notes and notices). A framework's shared context is its own word: "[Review Desk] Note from
    # reviewer" there is text, not a note, and its user messages are marked shared.
    desk_log: bool = True


# Normalisation ----------------------------------------------------------------------------------


def _decode_label(match: re.Match[str]) -> str:
    try:
        return encodings.idna.ToUnicode(match.group(0).lower())  # the codec takes only "xn--"
    except UnicodeError:  # not valid punycode: left as written
        return match.group(0)


def _url(text: str) -> str:
    return unquote_plus(text) if "%" in text or "+" in text else text


def _punycode(text: str) -> str:
    # Two finds instead of lowering a whole log to look for "xn--" in any case.
    return _PUNYCODE_LABEL.sub(_decode_label, text) if "n--" in text or "N--" in text else text


def _confusables(text: str) -> str:
    if text.isascii():  # most of a log: NFKC is the identity, and a byte table is many times faster
        return text.encode("ascii").translate(_ASCII_CONFUSABLES).decode("ascii").replace("rn", "m")
    return unicodedata.normalize("NFKC", text).translate(_CONFUSABLES_TABLE).replace("rn", "m")


def _case(text: str) -> str:
    return text.casefold()


def _whitespace(text: str) -> str:
    # str.split is several times faster than a regular expression over a log; the ends go too.
    return " ".join(text.split())


_STEP_FUNCTIONS = {
    "url": _url,
    "punycode": _punycode,
    "confusables": _confusables,
    "case": _case,
    "whitespace": _whitespace,
}


def normalise(text: str, steps: Collection[str] = STEPS, order: Sequence[str] = CASE_FIRST) -> str:
    """`text` through `steps`, applied in `order`."""
    for step in order:
        if step in steps:
            text = _STEP_FUNCTIONS[step](text)
    return text


# Whole-token search -----------------------------------------------------------------------------


def _wordlike(char: str) -> bool:
    # Scripts written without spaces (CJK and later blocks) have no word edges to respect.
    return char.isalnum() and ord(char) < 0x2E80


# A letter or digit of a script with word edges (not CJK and later: `_wordlike`), as a class.
_ALNUM = r"[^\W_\u2e80-\U0010ffff]"
# Any token: a letter or digit continues it, and so does a "." or "," between digits ("2.5",
# "1,000"): "A-10" is not in "A-1001", nor 25 in "2.5".
_TOKEN_BEFORE = rf"(?<!{_ALNUM})(?<!\d[.,])"
_TOKEN_AFTER = rf"(?!{_ALNUM})(?![.,]\d)"
# An address, a host, a URL or a path is joined to the text around it by these too, between
# letters or digits: "smith@gmail.com" is another mailbox than "john.smith@gmail.com", "acme.co"
# another host than "acme.co.uk", "/tmp" another path than "/tmp/cache".
_JOINERS = re.escape("-._@+/")
_ADDRESS_BEFORE = rf"{_TOKEN_BEFORE}(?<!{_ALNUM}[{_JOINERS}])"
_ADDRESS_AFTER = rf"{_TOKEN_AFTER}(?![{_JOINERS}]{_ALNUM})"
_ADDRESS_LIKE = re.compile(rf"{_ALNUM}[@.]{_ALNUM}|/")


@functools.lru_cache(maxsize=4096)
def _token_pattern(needle: str) -> re.Pattern[str]:
    """`needle` as a whole token: an edge that is a letter or digit must not continue the word,
    number or address it is part of. One compiled search, in C, however often the needle occurs
    inside longer words (a Python loop over every occurrence was a denial of service)."""
    address = _ADDRESS_LIKE.search(needle) is not None
    before = (_ADDRESS_BEFORE if address else _TOKEN_BEFORE) if _wordlike(needle[0]) else ""
    after = (_ADDRESS_AFTER if address else _TOKEN_AFTER) if _wordlike(needle[-1]) else ""
    return re.compile(before + re.escape(needle) + after)


def find_token(text: str, needle: str) -> int:
    """The first position of `needle` in `text` as a whole token, or -1."""
    if not needle or needle not in text:  # most values are in few messages: a plain find first
        return -1
    found = _token_pattern(needle).search(text)
    return found.start() if found else -1


def number_forms(number: int | float) -> list[str]:
    """How a number is usually written: "1000", "1,000", "1000.00", "1,000.00" ..., longest first."""
    if isinstance(number, float) and number.is_integer() and abs(number) < 2**63:
        number = int(number)
    if isinstance(number, int):
        forms = {f"{number}", f"{number:,}", f"{number}.0", f"{number}.00", f"{number:,}.00"}
    else:
        forms = {repr(number), f"{number:.2f}", f"{number:,.2f}", f"{number:,}"}
    return sorted(forms, key=lambda form: (-len(form), form))


class _Number:
    """A number leaf's search: its forms as one compiled pattern, edges as `_continues` says."""

    def __init__(self, number: int | float) -> None:
        forms = number_forms(number)
        # Every form holds the digits after the last thousands separator: a cheap test first.
        self.hint = min(forms, key=len) if "," not in "".join(forms) else f"{number:,}".rsplit(",", 1)[-1]
        alternatives = "|".join(re.escape(form) for form in forms)
        self.pattern = re.compile(rf"(?<!\w)(?<!\d[.,])(?:{alternatives})(?!\w)(?![.,]\d)")

    def found_in(self, text: str) -> bool:
        return self.hint in text and self.pattern.search(text) is not None


# The run's log as sources -----------------------------------------------------------------------


@dataclass
class _Message:
    step: int
    kind: str
    text: str
    tool: str = ""
    call_id: str = ""
    trusted: bool = False
    said: str = ""  # a reviewer's: "answer", "note" or "rejection"
    shared: bool = False  # a user message of a framework's shared context
    _normalised: dict[tuple[str, ...], str] = field(default_factory=dict)

    def normalised(self, order: tuple[str, ...]) -> str:
        """The text normalised in `order`: computed once per call of provenance_of."""
        if order not in self._normalised:
            self._normalised[order] = normalise(self.text, STEPS, order)
        return self._normalised[order]

    def source(self, **more: Any) -> dict[str, Any]:
        source: dict[str, Any] = {"kind": self.kind, "match": "exact", "step": self.step}
        if self.kind == "tool_output":
            source |= {"tool": self.tool, "call_id": self.call_id, "trusted": self.trusted}
        if self.said:
            source["said"] = self.said
        if self.shared:
            source["shared"] = True
        return source | more


def text_of(content: Any) -> str:
    """A message's content as text: a string (a JSON document's strings, numbers and keys, one a
    line, as written: a tool's result is `json.dumps`'d with its non-ASCII escaped), a list of
    parts (their text), or nothing."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "\n".join(_part_text(part) for part in content)
    if not isinstance(content, str):
        return "\n".join(_scalars(content))
    if content[:1] in ("{", "[", '"'):
        try:
            parsed = json.loads(content, parse_float=str, parse_int=str)
        except ValueError:
            return content
        return "\n".join(_scalars(parsed))
    return content


def _part_text(part: Any) -> str:
    if isinstance(part, dict):
        return text_of(part.get("text"))
    return text_of(part)


def _scalars(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _scalars(item)
    elif isinstance(value, list):
        for item in value:
            yield from _scalars(item)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def _rejected_by_reviewer(content: Any) -> bool:
    if isinstance(content, str):
        if not content.lstrip().startswith("{") or '"error"' not in content:
            return False
        try:
            content = json.loads(content)
        except ValueError:
            return False
    error = content.get("error") if isinstance(content, dict) else None
    return isinstance(error, str) and error.startswith(REJECTION_PREFIXES)


def _tool_names(messages: Sequence[dict]) -> dict[str, str]:
    names = {}
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict) and call.get("id"):
                    names[call["id"]] = (call.get("function") or {}).get("name") or ""
    return names


def _sources_in(messages: Sequence[dict], trust: ToolTrust) -> list[_Message]:
    names = _tool_names(messages)
    found = []
    for index, message in enumerate(messages):
        role, content, step = message.get("role"), message.get("content"), index + 1
        if role in ("system", "developer"):
            found.append(_Message(step, "system", text_of(content)))
        elif role == "user":
            text = text_of(content)
            if not trust.desk_log:
                found.append(_Message(step, "task", text, shared=True))
            elif text.startswith(REVIEWER_NOTE):
                found.append(_Message(step, "reviewer", text, said="note"))
            elif text.startswith(DESK_NOTICE):
                found.append(_Message(step, "system", text))
            else:
                found.append(_Message(step, "task", text))
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            name = names.get(call_id) or str(message.get("name") or "")
            text = text_of(content)
            if name and trust.answers_human(name):
                found.append(_Message(step, "reviewer", text, name, call_id, said="answer"))
            elif _rejected_by_reviewer(content) and trust.rejected(call_id):
                found.append(_Message(step, "reviewer", text, name, call_id, said="rejection"))
            else:
                trusted = bool(name) and trust.trusted(name)
                found.append(_Message(step, "tool_output", text, name, call_id, trusted))
        # An assistant's words and calls are the model's own: never a source.
    return found


# The search -------------------------------------------------------------------------------------


def leaves(value: Any, pointer: str = "") -> Iterator[tuple[str, Any]]:
    """(JSON Pointer, value) of every string and number in `value`; booleans and nulls are not
    values a source can hold."""
    if isinstance(value, dict):
        for key, item in value.items():
            escaped = str(key).replace("~", "~0").replace("/", "~1")
            yield from leaves(item, f"{pointer}/{escaped}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, f"{pointer}/{index}")
    elif pointer and (
        isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool))
    ):
        yield pointer, value


def _vouches(source: dict[str, Any], first_untrusted: int | None = None) -> bool:
    """Whether a source speaks for the value: the task, the instructions, a trusted tool's
    output or a reviewer's answer. A reviewer's rejection never does (it refuses, and may quote
    what it refuses), and a reviewer's note only when written before the value first came from
    an untrusted output (`first_untrusted`, its step): a note quoting it later may be a warning."""
    kind = source["kind"]
    if kind == "tool_output":
        return bool(source["trusted"])
    if kind == "reviewer":
        said = source.get("said")
        if said == "rejection":
            return False
        if said == "note":
            return first_untrusted is None or source["step"] < first_untrusted
    return kind != "none"


def _first_untrusted(sources: Sequence[dict[str, Any]]) -> int | None:
    steps = [
        s["step"] for s in sources if s["kind"] == "tool_output" and not s["trusted"] and not _lookalike(s)
    ]
    return min(steps) if steps else None


def _vouched(sources: Sequence[dict[str, Any]]) -> bool:
    first = _first_untrusted(sources)
    return any(_vouches(s, first) for s in sources if not _lookalike(s))


def _rank(source: dict[str, Any]) -> tuple[int, int, int, int]:
    return (
        source["match"] != "exact",
        # A rejection only quotes what it refuses: last, after the outputs a value came from.
        _REJECTION_RANK if source.get("said") == "rejection" else _KIND_RANK[source["kind"]],
        source["kind"] == "tool_output" and not source["trusted"],
        source["step"],
    )


def _exact_sources(value: str | int | float, texts: list[_Message]) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [m.source() for m in texts if find_token(m.text, value) != -1]
    number = _Number(value)
    return [m.source() for m in texts if number.found_in(m.text)]


@dataclass
class _Budget:
    """What is left of one provenance_of call's dearest work."""

    seen_lookups: int = SEEN_LOOKUPS_MAX


def _normalised_sources(
    value: str, texts: list[_Message], skip: set[int], budget: _Budget
) -> list[dict[str, Any]]:
    orders = [CASE_FIRST] + [SKELETON_FIRST] * bool(_CAPITALS_LIKE_L.intersection(value))
    needles = {order: normalise(value, STEPS, order) for order in orders}
    found = []
    for m in texts:
        if m.step in skip:
            continue
        for order, needle in needles.items():
            if find_token(m.normalised(order), needle) != -1:
                if budget.seen_lookups > 0:
                    budget.seen_lookups -= 1
                    seen = _seen(m.text, needle, order)
                    steps = _with_lookalike_folds(_steps_needed(value, seen), value, seen)
                else:  # out of budget: which steps it needed is not worked out, so all are named
                    seen, steps = "", list(STEPS)
                found.append(m.source(match="normalised", normalised=steps, seen=seen[:SEEN_MAX]))
                break
    return found


def _seen(text: str, needle: str, order: Sequence[str]) -> str:
    """The stretch of `text` whose normalised form holds `needle`: the shortest prefix that does,
    then the latest start within it (each normalisation is of a few KB, at C speed)."""
    low, high = 1, len(text)
    while low < high:
        middle = (low + high) // 2
        if needle in normalise(text[:middle], STEPS, order):
            high = middle
        else:
            low = middle + 1
    end, low, high = high, 0, high
    while low < high:
        middle = (low + high + 1) // 2
        if needle in normalise(text[middle:end], STEPS, order):
            low = middle
        else:
            high = middle - 1
    return text[low:end].strip()


def _with_lookalike_folds(steps: list[str], value: str, seen: str) -> list[str]:
    """`steps`, with "confusables" added when case folding or whitespace did a lookalike's work:
    a fold that is not lowering ("ß" to "ss", the long s, the Kelvin sign: "maßbank.de" is not
    "massbank.de" to a browser) or a space that is not ASCII."""
    both = value + seen
    folded = "case" in steps and both.casefold() != both.lower()
    spaced = "whitespace" in steps and any(char.isspace() and not char.isascii() for char in both)
    if (folded or spaced) and "confusables" not in steps:
        return [step for step in STEPS if step in steps or step == "confusables"]
    return steps


def _steps_needed(value: str, seen: str) -> list[str]:
    """The fewest normalisation steps under which `value` is a token of `seen` (each step costs
    microseconds on strings this short; 31 subsets in two orders at most)."""
    for size in range(1, len(STEPS) + 1):
        for steps in itertools.combinations(STEPS, size):
            for order in (CASE_FIRST, SKELETON_FIRST):
                if find_token(normalise(seen, steps, order), normalise(value, steps, order)) != -1:
                    return list(steps)
    return list(STEPS)


def _sources_of(value: str | int | float, texts: list[_Message], budget: _Budget) -> list[dict[str, Any]]:
    if isinstance(value, str) and not value.strip():
        return [{"kind": "none"}]  # blank: nothing to find, and a space is in every message
    sources = _exact_sources(value, texts)
    if isinstance(value, str) and not _vouched(sources):
        sources += _normalised_sources(value, texts, {s["step"] for s in sources}, budget)
    return sorted(sources, key=_rank) or [{"kind": "none"}]


UNTRACED = {"kind": "none", "untraced": True}


def provenance_of(arguments: Any, messages: Sequence[dict], trust: ToolTrust) -> dict[str, list[dict]]:
    """For every string and number leaf of `arguments` (JSON Pointer, RFC 6901, "" never: the
    root is an object), the list of its sources in `messages` (OpenAI chat format, the run's
    log in order), best first. Exact matches before normalised, then task, reviewer, system,
    tool_output (trusted before untrusted), earliest first within a kind. A leaf found nowhere
    gets [{"kind": "none"}]."""
    texts = _sources_in(messages, trust)
    budget = _Budget()
    traced: dict[tuple[type, Any], list[dict[str, Any]]] = {}
    found: dict[str, list[dict]] = {}
    for pointer, value in leaves(arguments):
        key = (type(value), value)
        if key not in traced and len(traced) < TRACED_VALUES_MAX:
            traced[key] = _sources_of(value, texts, budget)
        # A value seen again is not searched again; one past the cap is not searched at all.
        found[pointer] = [dict(s) for s in traced[key]] if key in traced else [dict(UNTRACED)]
    return found


# Flags and labels -------------------------------------------------------------------------------


def _within(pointer: str, aimed: Collection[str] | None) -> bool:
    """Whether `pointer` is one of `aimed` or inside one (/to/0 is inside /to)."""
    if aimed is None:
        return True
    return any(pointer == root or pointer.startswith(root + "/") for root in aimed)


def _lookalike(source: dict[str, Any]) -> bool:
    return source.get("match") == "normalised" and bool(LOOKALIKE_STEPS & set(source.get("normalised", ())))


def provenance_flags(
    provenance: dict[str, list[dict]], *, aimed: Collection[str] | None, external: bool
) -> list[dict]:
    """The warnings provenance raises for a call: a list of {"pointer", "code", "text"}.

    "untrusted_origin": the value's sources are only untrusted tool outputs (a lookalike match
    vouches for nothing), the tool has an external effect and the pointer is one of `aimed`
    (None: every pointer). "lookalike": the value's best source is a normalised match that
    needed "confusables" or "punycode": it resembles text in the run but is not it."""
    flags = []
    untraced = [pointer for pointer, sources in provenance.items() if sources[0].get("untraced")]
    if untraced:
        flags.append(
            {
                "pointer": untraced[0],
                "code": "untraced",
                "text": f"{len(untraced)} of the call's values were not traced (over {TRACED_VALUES_MAX} distinct "
                f"values), from {untraced[0]} on: where they came from is not known",
            }
        )
    for pointer, sources in provenance.items():
        best = sources[0]
        if _lookalike(best):
            where = source_label({key: item for key, item in best.items() if key != "normalised"})
            flags.append(
                {
                    "pointer": pointer,
                    "code": "lookalike",
                    "text": f'{pointer} looks like "{best["seen"]}" {where} but is not the same text',
                }
            )
        if not external or not _within(pointer, aimed):
            continue
        held = [s for s in sources if s["kind"] != "none"]
        untrusted = [s for s in held if s["kind"] == "tool_output" and not s["trusted"] and not _lookalike(s)]
        if untrusted and not _vouched(held):
            first = min(untrusted, key=lambda s: s["step"])
            more = f" (and {len(untrusted) - 1} more untrusted outputs)" if len(untrusted) > 1 else ""
            reviewer = any(s["kind"] == "reviewer" for s in held)
            quoted = "; a reviewer mentioned it since, which does not vouch for it" if reviewer else ""
            flags.append(
                {
                    "pointer": pointer,
                    "code": "untrusted_origin",
                    "text": f"{pointer} came only from {first['tool']}'s output at step {first['step']} (untrusted){more}{quoted}",
                }
            )
    return flags


def source_label(source: dict) -> str:
    """How the desk says where a value came from: 'from your task', 'from fetch_page output at
    step 3 (untrusted)', 'not seen before (model-written)'; a normalised match adds the steps."""
    kind = source["kind"]
    if kind == "none":
        return (
            "not traced (too many values in this call)"
            if source.get("untraced")
            else "not seen before (model-written)"
        )
    if kind == "tool_output":
        label = f"from {source['tool']} output at step {source['step']}"
        if not source["trusted"]:
            label += " (untrusted)"
    elif kind == "reviewer":
        label = {
            "answer": "from a reviewer's answer",
            "note": "from a reviewer's note",
            "rejection": "quoted in a reviewer's rejection",
        }.get(str(source.get("said")), "from a reviewer")
    elif kind == "task" and source.get("shared"):
        label = f"from a message the framework shared (step {source['step']})"
    else:
        label = {"task": "from your task", "system": "from the agent's instructions"}[kind]
    if source.get("normalised"):
        label += f" (normalised: {', '.join(source['normalised'])})"
    return label
