from __future__ import annotations

from django.conf import settings
from django.db import models


class SavedView(models.Model):
    """A list's query (its filters, search, columns and order) a person saved under a
    name, to open the list so again: theirs alone. Written by dashboard.saved_views."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views"
    )
    list_name = models.CharField(max_length=32, help_text="The list: reservations, vms.")
    name = models.CharField(max_length=100)
    query = models.CharField(
        max_length=2000, blank=True, help_text="The list's URL query, less its page."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["list_name", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "list_name", "name"], name="saved_view_name_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.list_name}: {self.name}"
