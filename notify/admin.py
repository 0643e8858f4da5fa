"""Webhook targets in the admin, for account admins only (the role's permissions); every
change goes through the audited services, the secret is write-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse

from capvco_web.permissions import AccountScopedAdmin
from notify.models import Notice, Reason, WebhookTarget, secret_check
from notify.services import (
    WebhookTestRefused,
    webhook_target_create,
    webhook_target_delete,
    webhook_target_test,
    webhook_target_update,
)


class WebhookTargetForm(forms.ModelForm[WebhookTarget]):
    # A credential too: a new one is written here, the stored one is shown as its scheme and
    # host only (in the help text), never as the field's value.
    url = forms.CharField(label="URL", max_length=500)
    # Write-only: the stored secret is never rendered, not even re-shown after an error.
    new_secret = forms.CharField(
        required=False,
        max_length=500,
        label="Secret",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        validators=[secret_check],
        help_text="The key messages are signed with (webhook-signature, Standard Webhooks): "
        "whsec_ and 24 to 64 random bytes in base64 (echo whsec_$(openssl rand -base64 32)). "
        "Leave empty to keep the stored one; a replaced one still signs for a day.",
    )
    # A new target takes every reason (the model's default), so the form offers them ticked;
    # none ticked is refused here, as the model refuses it, never when saving.
    reasons = forms.MultipleChoiceField(
        choices=Reason.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=list(Reason.values),
        error_messages={"required": "Tick at least one reason (to send nothing, untick Enabled)."},
    )

    class Meta:
        model = WebhookTarget
        fields = ["account", "name", "url", "kind", "enabled", "reasons", "per_minute"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial.pop("url", None)
        if self.instance.pk:
            url = self.fields["url"]
            url.required = False
            url.help_text = (
                f"Now {self.instance.url_shown} (the rest is not shown); leave empty to keep it."
            )

    def clean_url(self) -> str:
        return str(self.cleaned_data["url"]) or self.instance.url

    def changes(self) -> dict[str, Any]:
        fields = [f for f in WebhookTargetForm.Meta.fields if f != "account"]
        changes = {f: self.cleaned_data[f] for f in fields if f in self.cleaned_data}
        if secret := self.cleaned_data.get("new_secret"):
            changes["secret"] = secret
        return changes

    def save(self, commit: bool = True) -> WebhookTarget:
        if secret := self.cleaned_data.get("new_secret"):
            self.instance.secret = secret
        return super().save(commit=commit)


@admin.register(WebhookTarget)
class WebhookTargetAdmin(AccountScopedAdmin[WebhookTarget]):
    form = WebhookTargetForm
    list_display = ["name", "account", "kind", "url_shown", "enabled", "has_secret", "per_minute"]
    list_filter = ["account", "kind", "enabled"]
    actions = ["send_test"]

    def save_model(self, request: HttpRequest, obj: WebhookTarget, form: Any, change: bool) -> None:
        if not change:
            webhook_target_create(target=obj, actor=request.user)
            return
        try:  # validated and audited in the service
            webhook_target_update(target=obj, changes=form.changes(), actor=request.user)
        except ValidationError as exc:
            self.message_user(request, "; ".join(exc.messages), messages.ERROR)

    def delete_model(self, request: HttpRequest, obj: WebhookTarget) -> None:
        webhook_target_delete(target=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WebhookTarget]) -> None:
        for target in queryset:
            webhook_target_delete(target=target, actor=request.user)

    @admin.display(description="URL")
    def url_shown(self, target: WebhookTarget) -> str:
        return target.url_shown

    @admin.display(boolean=True, description="secret")
    def has_secret(self, target: WebhookTarget) -> bool:
        return bool(target.secret)

    @admin.action(description="Send a test message")
    def send_test(self, request: HttpRequest, queryset: QuerySet[WebhookTarget]) -> None:
        """Asks a worker to post each (throttled as the page's button is); the results show
        on the notifications page."""
        asked = []
        for target in queryset.order_by("account__name", "name"):
            try:
                webhook_target_test(target=target, actor=request.user)
            except (PermissionDenied, WebhookTestRefused) as exc:
                self.message_user(request, f"No test message to {target}: {exc}", messages.ERROR)
                continue
            asked.append(target.name)
        if asked:
            self.message_user(
                request,
                f"Test messages on their way to {', '.join(asked)}: their results show on the "
                f"notifications page ({reverse('notify:targets')}).",
            )


@admin.register(Notice)
class NoticeAdmin(AccountScopedAdmin[Notice]):
    list_display = [
        "summary", "reason", "target", "opened_at", "closed_at", "sent_at", "attempts",
        "next_try_at", "given_up_at", "last_error",
    ]  # fmt: skip
    list_filter = ["reason", "target"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
