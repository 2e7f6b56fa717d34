"""The API's reference page (/api/docs/), served offline from the OpenAPI document."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def api_docs(request: HttpRequest) -> HttpResponse:
    return render(request, "desk/api_docs.html")
