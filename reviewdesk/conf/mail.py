"""Outbound mail from the environment: one EMAIL_URL, or the EMAIL_* variables one by one.

    EMAIL_URL=smtp://user:password@mail.example.com:587?tls=1&timeout=10
    EMAIL_URL=smtps://user:password@mail.example.com:465          # implicit TLS (EMAIL_USE_SSL)
    EMAIL_URL=smtp+tls://user:password@mail.example.com:587       # STARTTLS (EMAIL_USE_TLS)

User and password are percent-decoded (an @ in a password is %40). Parsed by hand: the
format is five fields of urllib.parse, not worth a dependency.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
_SCHEMES = {
    "smtp": (False, False),
    "smtp+tls": (True, False),
    "submission": (True, False),
    "smtps": (False, True),
}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
# The one-by-one variables; EMAIL_URL replaces all of them, so naming both is a mistake.
SEPARATE = (
    "EMAIL_HOST",
    "EMAIL_PORT",
    "EMAIL_HOST_USER",
    "EMAIL_HOST_PASSWORD",
    "EMAIL_USE_TLS",
    "EMAIL_USE_SSL",
)


def parse_email_url(url: str) -> dict[str, Any]:
    """The EMAIL_* settings an EMAIL_URL stands for; ImproperlyConfigured when it is malformed."""
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise ImproperlyConfigured(f"EMAIL_URL scheme {parts.scheme!r} is not one of {sorted(_SCHEMES)}")
    use_tls, use_ssl = _SCHEMES[parts.scheme]
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured("EMAIL_URL has an invalid port") from None
    if not parts.hostname:
        raise ImproperlyConfigured("EMAIL_URL names no host")
    query = {name: values[-1] for name, values in parse_qs(parts.query).items()}
    unknown = set(query) - {"tls", "ssl", "timeout"}
    if unknown:
        raise ImproperlyConfigured(f"EMAIL_URL has unknown parameters: {', '.join(sorted(unknown))}")
    use_tls = _flag(query, "tls", use_tls)
    use_ssl = _flag(query, "ssl", use_ssl)
    settings: dict[str, Any] = {
        "EMAIL_HOST": parts.hostname,
        "EMAIL_PORT": port or (465 if use_ssl else 587 if use_tls else 25),
        "EMAIL_HOST_USER": unquote(parts.username or ""),
        "EMAIL_HOST_PASSWORD": unquote(parts.password or ""),
        "EMAIL_USE_TLS": use_tls,
        "EMAIL_USE_SSL": use_ssl,
    }
    if "timeout" in query:
        settings["EMAIL_TIMEOUT"] = _seconds(query["timeout"], "EMAIL_URL timeout")
    return settings


def email_settings(environ: Mapping[str, str], *, default_timeout: float) -> dict[str, Any]:
    """EMAIL_HOST, EMAIL_PORT, credentials, TLS/SSL and EMAIL_TIMEOUT from the environment."""
    url = environ.get("EMAIL_URL", "")
    named = [name for name in SEPARATE if environ.get(name, "")]
    if url and named:
        raise ImproperlyConfigured(f"EMAIL_URL is set: do not also set {', '.join(named)}")
    if url:
        settings = parse_email_url(url)
    else:
        settings = {
            "EMAIL_HOST": environ.get("EMAIL_HOST", "") or "localhost",
            "EMAIL_PORT": _int(environ.get("EMAIL_PORT", ""), 25, "EMAIL_PORT"),
            "EMAIL_HOST_USER": environ.get("EMAIL_HOST_USER", ""),
            "EMAIL_HOST_PASSWORD": environ.get("EMAIL_HOST_PASSWORD", ""),
            "EMAIL_USE_TLS": _flag(environ, "EMAIL_USE_TLS", False),
            "EMAIL_USE_SSL": _flag(environ, "EMAIL_USE_SSL", False),
        }
    if settings["EMAIL_USE_TLS"] and settings["EMAIL_USE_SSL"]:
        raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL are exclusive: STARTTLS or implicit TLS")
    if environ.get("EMAIL_TIMEOUT", ""):
        settings["EMAIL_TIMEOUT"] = _seconds(environ["EMAIL_TIMEOUT"], "EMAIL_TIMEOUT")
    settings.setdefault("EMAIL_TIMEOUT", default_timeout)
    return settings


def _flag(values: Mapping[str, str], name: str, default: bool) -> bool:
    raw = values.get(name, "").lower()
    if raw == "":
        return default
    if raw in _TRUE | _FALSE:
        return raw in _TRUE
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false)")


def _int(raw: str, default: int, name: str) -> int:
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None


def _seconds(raw: str, name: str) -> float:
    try:
        seconds = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number of seconds") from None
    if seconds <= 0:
        raise ImproperlyConfigured(f"{name} must be positive, not {raw!r}")
    return seconds
