"""Figure #11's log and call (bench/provenance.py): the log has the size it is measured at, each
tool output is 1,000 to 4,600 characters (the figure's "1-4 KB": the text each holds is drawn
at about 1,000 to 3,900 characters, and its JSON wrapping takes some a little past 4,000), and
the call is flagged as the figure says, so the measured work is the worker's. In-process, no
stack."""

from __future__ import annotations

import asyncio
import json

import pytest

from bench.provenance import SIZES, measure, once, provenance_text, run_log

pytestmark = pytest.mark.bench


@pytest.mark.parametrize("messages", SIZES)
def test_the_log_has_the_measured_size_and_ends_in_the_gated_call(messages):
    log = run_log(messages)
    assert len(log) == messages
    assert log[-1]["tool_calls"][0]["function"]["name"] == "send_email"
    outputs = [len(m["content"]) for m in log if m["role"] == "tool"]
    assert outputs and min(outputs) >= 1000 and max(outputs) <= 4600


def test_the_calls_recipient_is_flagged_as_a_fetched_pages_and_nothing_else_is():
    _, flags = once(run_log(20))
    assert [(f["pointer"], f["code"]) for f in flags] == [("/to", "untrusted_origin")]
    assert "fetch_page's output" in flags[0]["text"]


def test_the_figure_reports_both_sizes_and_their_ratio():
    (row,) = asyncio.run(measure(None, None, None, budget=5))
    data = row.as_dict()
    assert data["id"] == "11" and data["value"]["n"] > 0 and data["floor_value"]["n"] > 0
    text = provenance_text(json.loads(json.dumps(data["extra"]["provenance"])))
    assert " 20 messages" in text and "200 messages" in text and "ratio 200/20" in text
