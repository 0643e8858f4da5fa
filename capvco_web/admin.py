"""The admin: the audit trail (read-only), API tokens, and a confirmation page for
destructive actions."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from capvco_web.models import ApiToken, AuditEvent, Heartbeat
from capvco_web.permissions import AccountScopedAdmin
from capvco_web.tokens import api_token_check, api_token_create, api_token_revoke


@admin.register(AuditEvent)
class AuditEventAdmin(AccountScopedAdmin[AuditEvent]):
    """Read-only: the audit trail is written by the code, never edited. A member sees the
    events of their accounts; events of no account (tokens, users) only superusers."""

    list_display = ["created_at", "actor_name", "action", "object_type", "object_repr"]
    list_filter = ["action", "object_type"]
    search_fields = ["object_repr", "reason", "actor_name"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False


@admin.register(Heartbeat)
class HeartbeatAdmin(admin.ModelAdmin[Heartbeat]):
    list_display = ["name", "ticked_at"]


class ApiTokenForm(forms.ModelForm[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["user", "name", "expires_at"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if not self.errors:
            token = ApiToken(
                user=cleaned["user"], name=cleaned["name"], expires_at=cleaned.get("expires_at")
            )
            try:
                api_token_check(token=token)
            except ValidationError as exc:
                for field, messages in exc.message_dict.items():
                    self.add_error(field, messages)
        return cleaned


SHOWN_ONCE = "_capvco_api_token_made"


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    """Tokens are made (the token shown once, on the page that follows) and revoked
    (deleted), never edited. Both are audited."""

    form = ApiTokenForm
    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "expires_at"]
    list_select_related = ["user"]
    search_fields = ["name", "key_id", "user__username"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("user", "name", "expires_at")
        return ("user", "name", "prefix", "created_at", "last_used_at", "expires_at")

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        token, raw = api_token_create(
            user=obj.user, name=obj.name, expires_at=obj.expires_at, actor=request.user
        )
        obj.pk, obj.key_id, obj.created_at = token.pk, token.key_id, token.created_at
        obj.token_hash = token.token_hash
        # Kept on this request (the admin itself is shared by all requests) for the page
        # that shows it, then gone.
        setattr(request, SHOWN_ONCE, raw)

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        raw = getattr(request, SHOWN_ONCE)
        delattr(request, SHOWN_ONCE)
        context = {
            **self.admin_site.each_context(request),
            "title": "API token made",
            "opts": self.model._meta,
            "token": obj,
            "raw": raw,
        }
        return TemplateResponse(request, "admin/capvco_web/apitoken/made.html", context)

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        api_token_revoke(token=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset.select_related("user"):
            api_token_revoke(token=token, actor=request.user)


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Recorded in the audit trail with your name.",
    )


class NamesForm(ReasonForm):
    """A destructive action that also asks for the name of each selected object, typed
    again; the service compares each (clusters.services.name_confirmed)."""

    names = forms.CharField(
        label="Names",
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60, "autocomplete": "off"}),
        help_text="Type the name of each selected object, separated by spaces or new lines.",
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
