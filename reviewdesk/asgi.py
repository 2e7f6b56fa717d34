import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewdesk.settings")

from django.conf import settings

from reviewdesk.conf.var import ensure_static_root
from reviewdesk.serve.asgi_handler import get_asgi_application

ensure_static_root(settings.STATIC_ROOT, settings.VAR_DIR)  # before whitenoise looks for it
django_asgi_app = get_asgi_application()  # before importing consumers: it sets Django up

from reviewdesk.agent_modules.loading import refuse_to_start_if_broken  # noqa: E402
from reviewdesk.audit.keys import audit_key_problem  # noqa: E402
from reviewdesk.lib.deployment import refuse_to_start  # noqa: E402

# No half-registered agent ever takes a run: a DESK_AGENTS module that failed to load stops the
# web process here, naming the module (daphne runs no system checks).
refuse_to_start_if_broken("web")

# A web process audits what it does (a login, a decision): in production it starts with the
# audit key or not at all. ASGI servers (daphne, uvicorn) run no system checks, so the entry
# point they load asks itself; `manage.py` commands ask through the check (audit/checks.py).
_audit_key_problem = audit_key_problem()
if _audit_key_problem is not None:
    refuse_to_start("web", _audit_key_problem)

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from reviewdesk.api.views.streams import event_stream_app  # noqa: E402
from reviewdesk.desk.routing import websocket_urlpatterns  # noqa: E402


def _name_missing_reason_phrases() -> None:
    """Daphne writes the status line with twisted, whose table lacks 422 and 429: without
    this a 422 goes out as "422 Unknown Status". RFC 9110 names them (ASGI carries no phrase)."""
    try:
        from twisted.web import http as twisted_http
    except ImportError:  # served by another ASGI server
        return
    twisted_http.RESPONSES.update(
        {413: b"Content Too Large", 422: b"Unprocessable Content", 429: b"Too Many Requests"}
    )


_name_missing_reason_phrases()

application = ProtocolTypeRouter(
    {
        # The API's Server-Sent Events streams are Channels consumers; all else is Django.
        "http": URLRouter(
            [
                path("api/v1/stream", AuthMiddlewareStack(event_stream_app)),
                path("api/v1/runs/<uuid:run_id>/stream", AuthMiddlewareStack(event_stream_app)),
                re_path(r"", django_asgi_app),
            ]
        ),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
