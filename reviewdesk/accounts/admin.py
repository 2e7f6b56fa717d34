from django.contrib import admin

from reviewdesk.accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "name", "scopes", "created_at", "last_used_at", "revoked_at")
    list_select_related = ("user",)
    readonly_fields = ("user", "prefix", "token_sha256", "scopes", "created_at", "last_used_at")

    def has_add_permission(self, request):
        return False  # tokens are created with `manage.py create_token`, which shows them once
