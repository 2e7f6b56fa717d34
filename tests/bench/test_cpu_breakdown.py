"""Figure #6's CPU breakdown (bench/stack.py) attributes CPU time to the process that spent
it: a harness process and its forked children by session, this driver as "bench". Real
processes, read from /proc: a started process and its fork each burn 0.25 s of CPU while the
driver mostly sleeps."""

from __future__ import annotations

import sys
import time

import pytest

from bench.stack import Stack, cpu_breakdown

pytestmark = pytest.mark.bench

BURN = """
import os, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
os.fork()  # a forked child, as a Celery worker's: same session, counted with it
burn(0.25)  # each of the two
time.sleep(30)  # alive, not spending, until the test stops them
"""


def test_a_harness_process_and_its_fork_are_charged_what_they_burn_and_the_driver_little(
    tmp_path, monkeypatch
):
    monkeypatch.setattr("bench.stack.OUT", tmp_path)
    stack = Stack()
    before = stack.cpu_snapshot()
    burner = stack.start("burner", [sys.executable, "-c", BURN], {})
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            used = cpu_breakdown(before, stack.cpu_snapshot())
            if used.get("burner", 0) >= 0.45 or burner.popen.poll() is not None:
                break
            time.sleep(0.05)
    finally:
        stack.stop()
    assert 0.45 <= used["burner"] <= 0.8, used  # both halves (in 10 ms ticks), nothing else
    assert used.get("bench", 0) < 0.2, used
