"""What the desk's pages share: the reviewer check, the socket's path, and the words and
limits the decision forms use."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from reviewdesk.accounts.roles import is_admin, is_reviewer
from reviewdesk.approvals.models import ApprovalKind, ApprovalStatus, Verdict
from reviewdesk.desk.routing import websocket_urlpatterns
from reviewdesk.lib.limits import EXTERNAL_REF_MAX, TEXT_MAX

# What the decision templates compare with and limit to, so that they spell no enum value or limit.
DECISION_CONTEXT = {
    "ApprovalKind": ApprovalKind,
    "ApprovalStatus": ApprovalStatus,
    "Verdict": Verdict,
    "TEXT_MAX": TEXT_MAX,
    "EXTERNAL_REF_MAX": EXTERNAL_REF_MAX,
}

# The desk socket's path, read from its route (desk/routing.py) so that it is written once.
(_DESK_SOCKET_ROUTE,) = websocket_urlpatterns
DESK_SOCKET_PATH = "/" + str(_DESK_SOCKET_ROUTE.pattern)

# What a decision is called once made, on the pages and in the terminal.
DONE = {
    Verdict.APPROVE: "Approved",
    Verdict.REJECT: "Rejected",
    Verdict.EDIT: "Edited and approved",
    Verdict.CONFIRM: "Marked done",
    Verdict.RERUN: "Authorised a re-run of",
    Verdict.ANSWER: "Answered",
}


def require_reviewer(request: HttpRequest) -> None:
    """The desk's pages are for reviewers and admins: anyone else is 403."""
    if not (is_reviewer(request.user) or is_admin(request.user)):
        raise PermissionDenied("the desk is for reviewers")
