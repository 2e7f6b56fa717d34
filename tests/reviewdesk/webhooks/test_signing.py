"""The receiver's side of `Desk-Signature`: `signature_valid`, the helper a receiver runs (the
webhook tests' receiver uses it on every delivery it checks). It takes the header the desk's
sender writes, and refuses a signature made with another secret or over another body, an old or
far-future timestamp (a replay), and a header that does not parse."""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest

from reviewdesk.webhooks.services import signature_header, signature_valid

SECRET = "whsec-of-the-receiver"
BODY = b'{"id": "1", "type": "run.succeeded", "seq": 7}'


def test_a_header_the_sender_wrote_just_now_is_valid():
    assert signature_valid(secret=SECRET, body=BODY, header=signature_header(secret=SECRET, body=BODY))


def test_the_header_is_the_documented_hmac_of_the_timestamp_a_dot_and_the_body():
    """Computed here from docs/api.md's formula, not with the desk's code: a receiver written
    from the docs checks this, and a timestamp outside the MAC could be replayed at will."""
    header = signature_header(secret=SECRET, body=BODY, at=1_700_000_000)

    expected = hmac.new(SECRET.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"


@pytest.mark.parametrize(
    ("secret", "body"),
    [("another secret", BODY), (SECRET, BODY.replace(b"succeeded", b"failed"))],
    ids=["another secret", "another body"],
)
def test_a_signature_that_does_not_match_is_refused(secret, body):
    header = signature_header(secret=secret, body=body)
    assert not signature_valid(secret=SECRET, body=BODY, header=header)


def test_a_signature_whose_hex_was_edited_is_refused():
    header = signature_header(secret=SECRET, body=BODY)
    flipped = header[:-1] + ("0" if header[-1] != "0" else "1")
    assert not signature_valid(secret=SECRET, body=BODY, header=flipped)


@pytest.mark.parametrize(
    ("age", "valid"),
    [(290, True), (310, False), (-290, True), (-310, False), (86_400, False)],
    ids=["inside the tolerance", "just past it", "slightly ahead", "too far ahead", "a day old"],
)
def test_a_correctly_signed_header_is_valid_only_within_the_tolerance(age, valid):
    """A replay of a real delivery carries a real signature: only its timestamp gives it away."""
    header = signature_header(secret=SECRET, body=BODY, at=int(time.time()) - age)
    assert signature_valid(secret=SECRET, body=BODY, header=header, tolerance=300) is valid


@pytest.mark.parametrize(
    "header",
    ["", "v1=abc", "t=soon,v1=abc", "t=NOW", "t=NOW,v1=", "garbage"],
    ids=[
        "empty",
        "no timestamp",
        "a timestamp that is no number",
        "no signature",
        "an empty one",
        "no pairs",
    ],
)
def test_a_header_that_does_not_parse_is_refused_not_an_error(header):
    header = header.replace("NOW", str(int(time.time())))  # current: only the parse can refuse it
    assert signature_valid(secret=SECRET, body=BODY, header=header) is False
