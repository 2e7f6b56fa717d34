"""Login throttling (django-axes) and the Content-Security-Policy (django-csp), read by
reviewdesk/settings.py. After DESK_LOGIN_FAILURE_LIMIT failed logins for one username from one
address, that pair is locked out for DESK_LOGIN_LOCKOUT_MINUTES (HTTP 429)."""

from datetime import timedelta

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
