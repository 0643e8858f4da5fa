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


def confirmation_asked(
    modeladmin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    action: str,
    title: str,
    template: str,
    form_class: type[ReasonForm] = ReasonForm,
) -> dict[str, Any] | TemplateResponse:
    """For an admin action that destroys or changes something: what the confirmation page
    asked (the reason, and the other fields of `form_class`), or that page (again, with the
    errors, while the form is not valid).

    The page posts back to the changelist with the same action and selection, plus
    `confirm`, the way Django's own "delete selected" confirmation does.
    """
    form = form_class(request.POST if "confirm" in request.POST else None)
    if form.is_valid():
        return dict(form.cleaned_data)
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


def reason_asked(
    modeladmin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    action: str,
    title: str,
    template: str,
) -> str | TemplateResponse:
    """The reason given on the confirmation page of a destructive action, or that page."""
    asked = confirmation_asked(
        modeladmin, request, queryset, action=action, title=title, template=template
    )
    return asked if isinstance(asked, TemplateResponse) else str(asked["reason"])
