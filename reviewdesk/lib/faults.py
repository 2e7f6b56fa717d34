"""Fault injection for crash tests: a worker can be made to kill -9 itself at a
named step boundary. Inert unless DESK_FAULT_INJECTION=1 is set in the worker's
environment, which only the fault-injection tests do.

    DESK_FAULT_INJECTION=1
    DESK_FAULT_KILL_AT=after_ledger_pending,after_effect   # points to die at
    DESK_FAULT_KILL_RATE=0.3                               # probability at each
    DESK_FAULT_LOG=/path/kills.jsonl                       # one line per kill, for the report
    DESK_FAULT_NO_FENCING=1                                # let a stale worker write (negative control)

Only test processes may use it. The test suite marks itself, and every process
it starts, with DESK_TESTING=1 (tests/pytest_env.py). Settings call
`refuse_outside_tests()`, so a web, worker or beat process started with a fault
switch and without that marker refuses to start; and the switches stay inert
here without it, whatever started the process.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

# Set by the test suite only: "this process is a test process".
TEST_MARKER = "DESK_TESTING"
# The switches that make a process misbehave on purpose.
SWITCHES = ("DESK_FAULT_INJECTION", "DESK_FAULT_NO_FENCING")

POINTS = (
    "after_model_call",  # the model answered; nothing of this step is committed yet
    "during_checkpoint_save",  # inside the transaction that saves a checkpoint
    "after_ledger_pending",  # the ledger says pending; the effect has not run
    "after_effect",  # the effect ran; the ledger still says pending
    "after_ledger_confirmed",  # confirmed; the checkpoint does not know yet
    "during_tool_retry",  # waiting to try a transiently failed call again; its row says retrying
)


def refuse_outside_tests(environ: Mapping[str, str] = os.environ) -> None:
    """Raise ImproperlyConfigured when a fault switch is set in a process that is not a test process.

    A switch counts as set unless it is empty or "0": a production process with
    DESK_FAULT_INJECTION=true must not start believing the switch is off.
    """
    switched_on = [name for name in SWITCHES if environ.get(name, "") not in ("", "0")]
    if switched_on and environ.get(TEST_MARKER) != "1":
        raise ImproperlyConfigured(
            f"{' and '.join(switched_on)} set, but this is not a test process ({TEST_MARKER}=1 is not set). "
            "Fault injection kills workers on purpose and can switch fencing off; only the test suite "
            "may use it. Unset the switch to start."
        )


def _enabled() -> bool:
    return os.environ.get(TEST_MARKER) == "1" and os.environ.get("DESK_FAULT_INJECTION") == "1"


def point(name: str) -> None:
    """Die here, abruptly, if the fault-injection settings say so."""
    if not _enabled():
        return
    targets = os.environ.get("DESK_FAULT_KILL_AT", "").split(",")
    if name in targets and random.random() < float(os.environ.get("DESK_FAULT_KILL_RATE", "1")):
        log = os.environ.get("DESK_FAULT_LOG")
        if log:
            with open(log, "a") as handle:
                handle.write(json.dumps({"t": time.time(), "point": name, "pid": os.getpid()}) + "\n")
        os.kill(os.getpid(), signal.SIGKILL)


def fencing_disabled() -> bool:
    """The negative control of the fencing tests: let a stale worker write. Never in production."""
    return _enabled() and os.environ.get("DESK_FAULT_NO_FENCING") == "1"
