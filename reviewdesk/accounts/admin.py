"""Users, groups and tokens in the admin: every change goes through an audited service.

Django's own User and Group admins save rows directly, so a staff member could add
someone to the reviewers, or undo a token's revocation, leaving no trace. Here each
save, m2m change and delete calls reviewdesk.accounts.services, inside the admin's
transaction, so the audit row commits with the change and names the admin.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db import transaction

from reviewdesk.accounts import services
from reviewdesk.accounts.models import ApiToken, DeviceKey, Endorsement, Revocation
from reviewdesk.lib.admin import ReadOnlyAdmin

VIA = "admin"


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens are created by `manage.py create_token` (shown once) and only revoked here. No
    field is editable (clearing `revoked_at` here once revived a token), and none is deleted (a
    deleted token would take its history with it)."""

    list_display = ("prefix", "user", "name", "scopes", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    list_select_related = ("user",)
    actions = ["revoke_tokens"]

    def has_revoke_permission(self, request: Any) -> bool:
        return request.user.is_active and request.user.has_perm("accounts.change_apitoken")

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke_tokens(self, request: Any, queryset: Any) -> None:
        revoked = sum(
            services.token_revoke(token=token, by=request.user, via=VIA)
            for token in queryset.select_related("user")
        )
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)


admin.site.unregister(User)
admin.site.unregister(Group)


def _audited_own_password_change(site_view: Any) -> Any:
    """The admin site's own page for the signed-in user's password (/admin/password_change/),
    audited like the user admin's form for anyone's: Django's view saves the form itself."""

    def password_change(request: Any, extra_context: Any = None) -> Any:
        with transaction.atomic():
            response = site_view(request, extra_context)
            if request.method == "POST" and response.status_code == 302:
                services.user_password_changed(user=request.user, by=request.user, via=VIA)
        return response

    return password_change


admin.site.password_change = _audited_own_password_change(admin.site.password_change)


@admin.register(User)
class AuditedUserAdmin(UserAdmin):
    def save_model(self, request: Any, obj: User, form: Any, change: bool) -> None:
        services.user_save(user=obj, by=request.user, created=not change, changed=form.changed_data, via=VIA)

    def save_related(self, request: Any, form: Any, formsets: Any, change: bool) -> None:
        # The m2m fields go through services; the user forms have no inline formsets.
        user = form.instance
        if "groups" in form.cleaned_data:
            services.user_groups_set(user=user, groups=form.cleaned_data["groups"], by=request.user, via=VIA)
        if "user_permissions" in form.cleaned_data:
            services.user_permissions_set(
                user=user, permissions=form.cleaned_data["user_permissions"], by=request.user, via=VIA
            )
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def delete_model(self, request: Any, obj: User) -> None:
        services.user_delete(user=obj, by=request.user, via=VIA)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        for user in queryset:
            services.user_delete(user=user, by=request.user, via=VIA)

    def user_change_password(self, request: Any, id: str, form_url: str = "") -> Any:
        # Django's view saves the form itself; audit in the same transaction when it succeeded.
        with transaction.atomic():
            response = super().user_change_password(request, id, form_url)
            if request.method == "POST" and response.status_code == 302:
                services.user_password_changed(user=User.objects.get(pk=id), by=request.user, via=VIA)
        return response


@admin.register(Group)
class AuditedGroupAdmin(GroupAdmin):
    def save_model(self, request: Any, obj: Group, form: Any, change: bool) -> None:
        services.group_save(
            group=obj, by=request.user, created=not change, changed=form.changed_data, via=VIA
        )

    def save_related(self, request: Any, form: Any, formsets: Any, change: bool) -> None:
        if "permissions" in form.cleaned_data:
            services.group_permissions_set(
                group=form.instance, permissions=form.cleaned_data["permissions"], by=request.user, via=VIA
            )
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def delete_model(self, request: Any, obj: Group) -> None:
        services.group_delete(group=obj, by=request.user, via=VIA)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        for group in queryset:
            services.group_delete(group=group, by=request.user, via=VIA)


@admin.register(DeviceKey)
class DeviceKeyAdmin(ReadOnlyAdmin):
    """Device keys are made on /keys/ or by `manage.py trust`."""

    list_display = ("key_id", "user", "label", "fingerprint", "created_at")
    list_select_related = ("user",)
    search_fields = ("key_id", "user__username", "label")


@admin.register(Endorsement, Revocation)
class SignedKeyRecordAdmin(ReadOnlyAdmin):
    """Endorsements and revocations are signed records nobody may edit here."""

    list_display = ("device_key", "signer_key_id", "signed_by", "created_at")
    list_select_related = ("device_key__user", "signed_by")
