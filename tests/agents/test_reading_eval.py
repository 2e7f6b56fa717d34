"""The second opinion's plumbing over the labelled calls (`make eval`'s second part), in-process:
the prompt, a scripted reviewer model through the provider interface, and the validation."""

from __future__ import annotations

from agents.second_opinion import untrusted
from bench.reading_eval import BLOCK, evaluate_readings, outside_blocks, report


def test_every_labelled_call_meets_the_plumbing_targets():
    text, met = report(evaluate_readings())
    assert met, text


def test_text_outside_a_block_is_found_and_text_inside_is_not():
    inside = untrusted("arguments", '{"to": "billing@examp1e.com"}', 1000)
    assert BLOCK.fullmatch(inside)
    assert outside_blocks(f"Tool: send\n{inside}", ["billing@examp1e.com"]) == []
    assert outside_blocks(f"Send to billing@examp1e.com\n{inside}", ["billing@examp1e.com"]) == [
        "billing@examp1e.com"
    ]
