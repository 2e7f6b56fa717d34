"""Loaded with `-p tests.pytest_env` (see pyproject), before Django reads its settings.

It points the suite at its own var/ directory, Celery queue and channel-layer
prefix, so a test never touches a developer's data and a test worker never
consumes a `make run` worker's tasks (or the other way round).
"""

import atexit
import os
import shutil
import tempfile

from agents.sandbox import shared_tmp_dir

# This is a test process, and so is every process it starts (they inherit the environment):
# the only processes where fault injection may be switched on (reviewdesk/lib/faults.py).
os.environ["DESK_TESTING"] = "1"

if "DESK_VAR_DIR" not in os.environ:
    os.environ["DESK_VAR_DIR"] = tempfile.mkdtemp(prefix="rd-test-")
    # Set DESK_KEEP_TEST_VAR=1 to keep logs, outbox and screenshots for a look afterwards.
    if not os.environ.get("DESK_KEEP_TEST_VAR"):
        atexit.register(shutil.rmtree, os.environ["DESK_VAR_DIR"], ignore_errors=True)
# The test client serves pages as the web process does, whose entry point (reviewdesk/asgi.py)
# makes STATIC_ROOT before whitenoise looks for it; settings no longer do.
os.makedirs(os.path.join(os.environ["DESK_VAR_DIR"], "staticfiles"), exist_ok=True)
_tag = f"t{os.getpid()}"
os.environ.setdefault("DESK_CELERY_QUEUE", f"reviewdesk-{_tag}")
os.environ.setdefault("DESK_CHANNEL_PREFIX", f"rd{_tag}")
# A run's rate-limit counts are its own: token ids start again in each run's fresh database.
os.environ.setdefault("DESK_THROTTLE_KEY_PREFIX", f"desk-throttle-{_tag}")
os.environ.setdefault("DESK_WS_HEARTBEAT_SECONDS", "2")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
# The suite drives runs with scripts, on SQLite and on PostgreSQL alike (off in production).
os.environ.setdefault("DESK_ALLOW_SCRIPTED_MODEL", "1")

# The runs' scratch directories (agents/sandbox.py): the suite's own, 0711 so each run's uid can
# walk to its directory (so under a world-traversable parent), removed at exit like var/.
if "DESK_RUNS_DIR" not in os.environ:
    os.environ["DESK_RUNS_DIR"] = tempfile.mkdtemp(prefix="rd-test-runs-", dir=shared_tmp_dir())
    os.chmod(os.environ["DESK_RUNS_DIR"], 0o711)
    if not os.environ.get("DESK_KEEP_TEST_VAR"):
        atexit.register(shutil.rmtree, os.environ["DESK_RUNS_DIR"], ignore_errors=True)
