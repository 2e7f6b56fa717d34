"""Login throttling (django-axes) and the Content-Security-Policy (django-csp), read by
reviewdesk/settings.py. After DESK_LOGIN_FAILURE_LIMIT failed logins for one username from one
address, that pair is locked out for DESK_LOGIN_LOCKOUT_MINUTES (HTTP 429)."""

from datetime import timedelta
from urllib.parse import urlsplit

from csp import constants as csp_constants

from reviewdesk.conf.env import env_int

AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_int("DESK_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("DESK_LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
# Content-Security-Policy: scripts and styles only from our own origin, no inline script.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [csp_constants.SELF],
        "script-src": [csp_constants.SELF],
        "style-src": [csp_constants.SELF],
        "img-src": [csp_constants.SELF, "data:"],
        "connect-src": [csp_constants.SELF],
        "object-src": [csp_constants.NONE],
        "base-uri": [csp_constants.SELF],
        "form-action": [csp_constants.SELF],
        "frame-ancestors": [csp_constants.NONE],
    }
}


def default_socket_origins(public_url: str, allowed_hosts: list[str], port: str) -> list[str]:
    """The origins the desk socket accepts when DESK_WS_ALLOWED_ORIGINS is unset: the desk's own
    (DESK_PUBLIC_URL, as its reviewers reach it) and each of ALLOWED_HOSTS on `port`, all in the
    scheme the desk is served on, which is DESK_PUBLIC_URL's. A page served over https opens its
    socket from an https origin; one served over http from an http origin. Accepting the other
    scheme too would let a page on the same host and port, but served the other way (a plain-http
    listener next to the TLS one, a downgraded proxy), open a reviewer's socket."""
    public = urlsplit(public_url)
    scheme = public.scheme
    origins = [f"{scheme}://{public.netloc}"] if public.netloc else []
    for host in allowed_hosts:
        if host == "*" or host.startswith("."):  # patterns, not an origin a browser sends
            continue
        origin = f"{scheme}://{host}:{port}"
        if origin not in origins:
            origins.append(origin)
    return origins
