"""`GET /api/schema/`: the OpenAPI document, built once per process and format.

The document is public (API clients fetch it before they hold a token) and the same for every
caller: drf-spectacular's public schema ignores who asks. Built on each request it cost about
50 ms of CPU, so anyone could keep a web process busy with it; now each format is generated and
rendered once, and every later request is a copy of bytes.
"""

from __future__ import annotations

import threading

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SCHEMA_KWARGS, SpectacularAPIView

_built: dict[str, tuple[bytes, str, str]] = {}
_building = threading.Lock()


class SchemaView(SpectacularAPIView):
    def _get_version_parameter(self, request):
        # One API version ("1", in /api/v1/): `?version=` would only relabel the document, and
        # each label would be a document of its own to build (and to keep, once cached).
        return None

    @extend_schema(**SCHEMA_KWARGS)  # as drf-spectacular's own get: left out of the document
    def get(self, request, *args, **kwargs):
        renderer = request.accepted_renderer  # negotiated by initial()
        # Keyed by the renderer's own media type, never the client's Accept header: its
        # parameters are the client's to choose, and each would be another document kept.
        key = renderer.media_type
        # One read of the cache: `_forget` may clear it between a check and a lookup.
        built = _built.get(key)
        if built is None:
            with _building:
                built = _built.get(key)
                if built is None:
                    built = _built[key] = self._build(request, renderer)
        content, content_type, disposition = built
        return HttpResponse(content, content_type=content_type, headers={"Content-Disposition": disposition})

    def _build(self, request, renderer) -> tuple[bytes, str, str]:
        # Rendered here, not finalized: finalize_response would take the view's Vary: Accept
        # for this inner response, and the response sent from the cache would go without it.
        # The renderer's own media type, not the client's: its parameters (indent=) would
        # shape the copy everyone gets.
        response = super().get(request)
        response.accepted_renderer, response.accepted_media_type = renderer, renderer.media_type
        response.renderer_context = self.get_renderer_context()
        response.render()
        return response.content, response["Content-Type"], response["Content-Disposition"]


@receiver(setting_changed)
def _forget(**kwargs) -> None:
    """Tests that change settings (URLs, the API's framework settings) see a fresh document;
    after a build under way, which may have read the old ones."""
    with _building:
        _built.clear()
