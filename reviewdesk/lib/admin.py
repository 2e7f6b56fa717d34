"""The admin is an audit surface: the desk's own records are shown read-only there (users,
groups and tokens change through audited services: accounts/admin.py)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """No add, change or delete: changes go through the services, which audit them."""

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
