"""Saved views in the admin: read only (a view is its owner's, saved and deleted on the
list pages through dashboard.saved_views)."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from dashboard.models import SavedView


@admin.register(SavedView)
class SavedViewAdmin(admin.ModelAdmin[SavedView]):
    list_display = ["user", "list_name", "name", "query", "created_at"]
    list_filter = ["list_name"]
    search_fields = ["name", "user__username"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: SavedView | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: SavedView | None = None) -> bool:
        return False
