"""The admin: the audit trail (read-only), and a confirmation page for destructive actions."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from capvco_web.models import AuditEvent, Heartbeat


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin[AuditEvent]):
    """Read-only: the audit trail is written by the code, never edited."""

    list_display = ["created_at", "actor_name", "action", "object_type", "object_repr"]
    list_filter = ["action", "object_type"]
    search_fields = ["object_repr", "reason", "actor_name"]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(Heartbeat)
class HeartbeatAdmin(admin.ModelAdmin[Heartbeat]):
    list_display = ["name", "ticked_at"]


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Recorded in the audit trail with your name.",
    )


def reason_asked(
    modeladmin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    action: str,
    title: str,
    template: str,
) -> str | TemplateResponse:
    """For an admin action that destroys something: the reason given on the confirmation
    page, or that page (again, with the error, while no reason was given).

    The page posts back to the changelist with the same action and selection, plus
    `confirm`, the way Django's own "delete selected" confirmation does.
    """
    form = ReasonForm(request.POST if "confirm" in request.POST else None)
    if form.is_valid():
        return str(form.cleaned_data["reason"])
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "opts": modeladmin.model._meta,
        "queryset": queryset,
        "form": form,
        "action": action,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media,
    }
    return TemplateResponse(request, template, context)
