"""Logging, read by reviewdesk/settings.py: one plain console handler; DESK_LOG_LEVEL sets the level."""

from reviewdesk.conf.env import env_str

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("DESK_LOG_LEVEL", "INFO")},
    "loggers": {
        "daphne": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
        "axes": {"level": "WARNING"},  # it logs every login at INFO; lockouts are WARNING
    },
}
