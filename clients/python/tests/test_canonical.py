"""C1: the client hashes the bytes the desk hashes. The desk's own `agents.canonical` runs in the
desk's virtualenv (a subprocess: the client imports nothing of the desk) on the same values."""

from __future__ import annotations

import json

from reviewdesk_client.canonical import args_sha256, jcs

# Python literals, so both sides build exactly the same objects (JSON could not say -0.0 vs 0).
TRICKY = [
    "1e21",
    "1e20",
    "-0.0",
    "0.0",
    "2**53",
    "2**53 + 1",
    "-(2**53)",
    "10**16",
    "10**21",
    "5e-324",
    "1.7976931348623157e308",
    "0.1 + 0.2",
    "1e-7",
    "123456789.123456789",
    "{'b': 1, 'a': 2, 'A': 3, '\\u00e9': 4, '\\U0001f600': 5, '\\u20ac': 6}",
    "{'text': 'caf\\u00e9 \\u2603 \\U0001f600 \\u0000 \\u001f \"quoted\" \\\\ /'}",
    "{'order_id': '1234', 'amount': 250.5, 'lines': [{'qty': 1e21, 'price': -0.0}, {'qty': 2**53}]}",
    "{'nested': {'z': [1.5, 2.25, {'y': 1e-6, 'x': 3.0}], 'a': None, 'm': True, 'n': False}}",
    "[]",
    "{}",
    "''",
    "{'\\ud800x': 1}",
]


def desk_bytes(desk, literals: list[str]) -> list[str]:
    """The desk's bytes for each value, sent as its repr (exact for floats; ast.literal_eval reads it)."""
    reprs = [repr(eval(literal)) for literal in literals]
    return json.loads(desk.desk_python("desk_canonical.py", stdin=json.dumps(reprs)))


def client_bytes(literal: str) -> str:
    try:
        return jcs(eval(literal)).hex()
    except Exception as error:
        return f"refused:{type(error).__name__}"


def test_canonical_bytes_equal_the_desks_on_tricky_values(desk):
    theirs = desk_bytes(desk, TRICKY)
    ours = [client_bytes(literal) for literal in TRICKY]
    assert list(zip(TRICKY, ours, strict=True)) == list(zip(TRICKY, theirs, strict=True))
    # Not vacuous: most values canonicalise, and the large integer rule was exercised.
    assert sum(not h.startswith("refused") for h in ours) >= len(TRICKY) - 3
    assert bytes.fromhex(ours[TRICKY.index("10**21")]) == b"1e+21"


def test_key_order_does_not_change_the_hash():
    assert args_sha256({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == args_sha256(
        {"a": [1, {"c": 3, "d": 2}], "b": 1}
    )
    assert args_sha256({"a": 1}) != args_sha256({"a": 1.5})
