"""The cycle's plumbing with none of the desk's work in it: the ceiling #6 sits under.

Two authenticated API requests through the desk's own ASGI stack (daphne, Django's middleware,
DRF with the desk's bearer-token authentication and throttles), two tasks on the desk's Celery
app (its settings: acks_late, prefetch 1, 2 processes), and a push from each task to a socket
on the same daphne: submit → task → push → decide → task → push. No run, no approval, no
checkpoint, no audit, no event row. Served by `bench.skeleton_asgi` and worked by
`bench.skeleton_worker`, started by the harness only (figure #6, row 6s).
"""

from __future__ import annotations

import uuid

from django.db import transaction
from django.urls import path
from rest_framework.response import Response

from bench.skeleton_tasks import GROUP, resume, run
from reviewdesk.api.throttling import DecideThrottle, SubmitThrottle
from reviewdesk.api.views.base import DeskAPIView

__all__ = ["GROUP"]


class SubmitView(DeskAPIView):
    throttle_classes = [SubmitThrottle]

    def post(self, request):
        run_id = str(uuid.uuid4())
        transaction.on_commit(lambda: run.delay(run_id))
        return Response({"id": run_id}, status=201)


class DecideView(DeskAPIView):
    throttle_classes = [DecideThrottle]

    def post(self, request, run_id):
        transaction.on_commit(lambda: resume.delay(str(run_id)))
        return Response({"id": str(run_id)}, status=201)


urlpatterns = [
    path("skeleton/submit", SubmitView.as_view()),
    path("skeleton/decide/<uuid:run_id>", DecideView.as_view()),
]
