"""The loaded agents and their tools, so that a client knows what it may submit and which calls
will wait for a human: `GET /api/v1/agents` (paged, in name order) and `GET /api/v1/agents/{name}`.
What each says is `representations.agent_data`; `manage.py agents` shows the whole of it."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from agents.registry import UnknownAgent, agent_names, get_agent
from reviewdesk.api import paging
from reviewdesk.api import schema as doc
from reviewdesk.api.filters import PageOnly, read_filters
from reviewdesk.api.permissions import CanRead
from reviewdesk.api.representations import agent_data
from reviewdesk.api.views.base import DeskAPIView
from reviewdesk.lib.errors import NotFound


class AgentsView(DeskAPIView):
    # Any signed-in caller, any scope: the agents are the same for everyone, but not for the world.
    permission_classes = [CanRead]


class AgentListView(AgentsView):
    @extend_schema(
        operation_id="agents_list",
        summary="List the loaded agents and their tools, in name order",
        description=(
            "Scope: any. Every agent this desk runs (`DESK_AGENTS`), with each tool's name, "
            "description, JSON Schema, effect kind and whether a call needs approval "
            "(`always`, `never`, or `depends` on its arguments). Paged."
        ),
        parameters=[PageOnly],
        responses={200: doc.AgentPage, **doc.READ_PROBLEMS},
        examples=[doc.AGENTS_EXAMPLE],
        extensions=doc.scopes(),
    )
    def get(self, request):
        read_filters(request, PageOnly)
        return paging.name_page(request, agent_names(), lambda name: agent_data(get_agent(name)))


class AgentDetailView(AgentsView):
    @extend_schema(
        operation_id="agents_get",
        summary="One loaded agent and its tools",
        description="Scope: any. 404 when no agent of that name is loaded.",
        responses={200: doc.AgentOutSerializer, **doc.ONE_PROBLEMS},
        extensions=doc.scopes(),
    )
    def get(self, request, name: str):
        try:
            agent = get_agent(name)
        except UnknownAgent:
            raise NotFound(f"no agent {name!r} is loaded") from None
        return Response(agent_data(agent))
