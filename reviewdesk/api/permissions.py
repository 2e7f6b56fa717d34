from __future__ import annotations

from rest_framework.permissions import BasePermission

from reviewdesk.accounts.models import ApiToken


def token_scope_permission(scope: str) -> type[BasePermission]:
    """Bearer tokens need `scope`; session users are checked by role in the services."""

    class HasScope(BasePermission):
        message = f"this token lacks the {scope!r} scope"
        code = "missing_scope"

        def has_permission(self, request, view) -> bool:
            if not (request.user and request.user.is_authenticated):
                return False
            if isinstance(request.auth, ApiToken):
                return request.auth.has_scope(scope)
            return True

    HasScope.__name__ = f"HasScope_{scope}"
    return HasScope


CanSubmit = token_scope_permission("submit")
CanReview = token_scope_permission("review")


class CanSubmitOrReview(BasePermission):
    """Cancel: the submitter (submit scope) or a reviewer (review scope); the service decides who."""

    message = "this token lacks both the 'submit' and the 'review' scope"
    code = "missing_scope"

    def has_permission(self, request, view) -> bool:
        return CanSubmit().has_permission(request, view) or CanReview().has_permission(request, view)


class CanRead(BasePermission):
    """Any scope reads what the user may see; selectors decide what that is."""

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated)
