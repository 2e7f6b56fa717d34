"""Fault injection for crash tests: a worker can be made to kill -9 itself at a
named step boundary. Inert unless DESK_FAULT_INJECTION=1 is set in the worker's
environment, which only the fault-injection tests do.

    DESK_FAULT_INJECTION=1
    DESK_FAULT_KILL_AT=after_ledger_pending,after_effect   # points to die at
    DESK_FAULT_KILL_RATE=0.3                               # probability at each
    DESK_FAULT_LOG=/path/kills.jsonl                       # one line per kill, for the report
"""

from __future__ import annotations

import json
import os
import random
import signal
import time

POINTS = (
    "after_model_call",  # the model answered; nothing of this step is committed yet
    "during_checkpoint_save",  # inside the transaction that saves a checkpoint
    "after_ledger_pending",  # the ledger says pending; the effect has not run
    "after_effect",  # the effect ran; the ledger still says pending
    "after_ledger_confirmed",  # confirmed; the checkpoint does not know yet
)


def _enabled() -> bool:
    return os.environ.get("DESK_FAULT_INJECTION") == "1"


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
