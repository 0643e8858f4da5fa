"""The admin of accounts, their members, locations, cloudspaces and images.

Each page shows the rows of the user's accounts only, and offers what their role there
allows (capvco_web.permissions); creating and changing rows goes through the audited
services (cloud.services), as the API does. Deleting a row goes through its audited
service too (`DeleteThroughServiceAdmin`), which refuses while anything still hangs from
it and says what to do.

Accounts are registered by the clusters' admin, which extends `AccountAdmin` with what
needs the clusters; the VMs' page is the clusters' too (who owns a VM is theirs to say).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import ProtectedError, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy

from capvco_web.api import in_use_detail
from capvco_web.integrations.whitesky.auth import jwt_expiry
from capvco_web.permissions import AccountScopedAdmin, users_known
from cloud.models import (
    MAX_CREDENTIAL_LENGTH,
    Account,
    Cloudspace,
    Image,
    Location,
    Membership,
    jwt_shape,
)
from cloud.services import (
    InUse,
    account_create,
    account_update,
    account_update_check,
    membership_create,
    membership_delete,
    membership_update,
)

M = TypeVar("M", bound=models.Model)


class DeleteThroughServiceAdmin(AccountScopedAdmin[M]):
    """Row deletes (the delete page and the bulk action) go through the model's audited
    delete service. The confirmation page lists, as what protects the rows, the service's
    refusals, which say what is in the way and what to do."""

    actions = ["delete_selected"]  # replaces Django's, which would not catch a late refusal
    # Rows that the service deletes on its own, whatever the admin of their model allows.
    deleted_by_service: tuple[type[models.Model], ...] = ()

    def delete_check(self, obj: M) -> None:
        raise NotImplementedError

    def delete_through_service(self, obj: M, actor: User | AnonymousUser) -> None:
        raise NotImplementedError

    def get_deleted_objects(
        self, objs: Sequence[M] | QuerySet[M], request: HttpRequest
    ) -> tuple[list[str], dict[str, int], set[str], list[str]]:
        to_delete, counts, perms_needed, _protected = super().get_deleted_objects(objs, request)
        # The service decides: it refuses for every PROTECT a person can resolve, and
        # deletes what it may (an account's released reservations) on its own.
        refusals = []
        for obj in objs:
            try:
                self.delete_check(obj)
            except InUse as exc:
                refusals.append(str(exc))
        if refusals:
            # Django counts the protected rows (machines, which nobody may delete here) as
            # rows to delete without permission; the refusal says more.
            return to_delete, counts, set(), refusals
        ours = {str(model._meta.verbose_name) for model in self.deleted_by_service}
        return to_delete, counts, perms_needed - ours, []

    def delete_model(self, request: HttpRequest, obj: M) -> None:
        self.delete_through_service(obj, request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[M]) -> None:
        with transaction.atomic():
            for obj in queryset:
                self.delete_through_service(obj, request.user)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        try:
            return super().delete_view(request, object_id, extra_context)
        except ProtectedError as exc:  # in use since the page was checked
            self.message_user(request, in_use_detail(exc), messages.ERROR)
            return HttpResponseRedirect(request.path)

    @admin.action(
        description=gettext_lazy("Delete selected %(verbose_name_plural)s"),
        permissions=["delete"],
    )
    def delete_selected(
        self, request: HttpRequest, queryset: QuerySet[M]
    ) -> TemplateResponse | None:
        try:
            with transaction.atomic():
                response: TemplateResponse | None = django_delete_selected(self, request, queryset)
                return response
        except ProtectedError as exc:  # in use since the page was checked
            self.message_user(request, in_use_detail(exc), messages.ERROR)
            return None


class AccountForm(forms.ModelForm[Account]):
    """An account's fields, and its credential."""

    # Write-only: the stored credential is never rendered, not even re-shown after an error.
    new_credential = forms.CharField(
        required=False,
        max_length=MAX_CREDENTIAL_LENGTH,
        validators=[jwt_shape],
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Paste a JWT to replace the stored one; leave empty to keep it. Changing "
        "the API or IAM URL needs it again.",
    )

    class Meta:
        model = Account
        fields = [
            "name",
            "api_url",
            "iam_url",
            "customer_id",
            "orphan_auto_release",
            "orphan_grace_period",
            "orphan_confirmations",
            "kube_insecure_tls_allowed",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is None:
            self.fields["new_credential"].required = True  # an account cannot act without one

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.instance.pk is not None:  # still as stored: the form's values come later
            try:
                account_update_check(account=self.instance, changes=self.changes())
            except ValidationError as exc:
                self.add_error("new_credential", exc.message_dict["credential"])
        return cleaned

    def changes(self) -> dict[str, Any]:
        """The account's fields as the form gives them, with the credential when given."""
        fields = AccountForm.Meta.fields  # the admin's subclass lists new_credential too
        changes = {f: self.cleaned_data[f] for f in fields if f in self.cleaned_data}
        if token := self.cleaned_data.get("new_credential"):
            changes["credential"] = token
        return changes

    def save(self, commit: bool = True) -> Account:
        if token := self.cleaned_data.get("new_credential"):
            self.instance.credential = token
        return super().save(commit=commit)


class AccountAdmin(AccountScopedAdmin[Account]):
    """An account's fields and credential, created and changed through the audited
    services. Registered by the clusters' admin (clusters.admin.AccountAdmin), which adds
    what needs the clusters: the delete (refused while clusters or billed reservations
    remain) and the management cluster's kubeconfig."""

    form: type[forms.ModelForm[Account]] = AccountForm
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = ["name", "api_url", "customer_id", "orphan_auto_release"]
    readonly_fields = ["credential_status"]

    def account_save(self, request: HttpRequest, obj: Account, form: Any, change: bool) -> bool:
        """Create or change the account as the API does; False when the change was refused
        (the message says why)."""
        if not change:
            account_create(account=obj, actor=request.user)
            return True
        try:  # validated and audited as in the API
            account_update(account=obj, changes=form.changes(), actor=request.user)
        except ValidationError as exc:  # changed since the form was checked
            self.message_user(request, "; ".join(exc.messages), messages.ERROR)
            return False
        return True

    def save_model(self, request: HttpRequest, obj: Account, form: Any, change: bool) -> None:
        self.account_save(request, obj, form, change)

    @admin.display(description="credential")
    def credential_status(self, account: Account) -> str:
        if not account.credential:
            return "none stored"
        expiry = jwt_expiry(account.credential)
        if expiry is None:
            return "stored"
        return f"stored, expires {datetime.fromtimestamp(expiry, tz=UTC):%Y-%m-%d %H:%M} UTC"


@admin.register(Location)
class LocationAdmin(AccountScopedAdmin[Location]):
    list_display = ["name", "account", "vgu_price", "currency", "observation_complete"]
    list_filter = ["account"]
    # Mirrored from the account's whitesky locations, with how well they were observed.
    readonly_fields = [
        "account",
        "name",
        "currency",
        "vgu_price",
        "observation_complete",
        "observation_error",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(Membership)
class MembershipAdmin(DeleteThroughServiceAdmin[Membership]):
    """Who has which role in an account; the account's admins change them."""

    list_display = ["user", "account", "role"]
    list_filter = ["account", "role"]
    list_select_related = ["user", "account", "role"]
    search_fields = ["user__username"]

    def formfield_for_foreignkey(
        self, db_field: models.ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> Any:
        if db_field.name == "user":
            # Only users the caller may know; any other is "not one of the choices", as
            # an id that exists nowhere.
            kwargs["queryset"] = users_known(request.user).order_by("username")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def delete_check(self, obj: Membership) -> None:
        return None  # nothing hangs from a membership

    def delete_through_service(self, obj: Membership, actor: User | AnonymousUser) -> None:
        membership_delete(membership=obj, actor=actor)

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        (membership_update if change else membership_create)(membership=obj, actor=request.user)


class MirroredAdmin(AccountScopedAdmin[M]):
    """Rows mirrored from whitesky or a cluster's Kubernetes: read here, changed only by
    observing."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return False


@admin.register(Cloudspace)
class CloudspaceAdmin(MirroredAdmin[Cloudspace]):
    list_display = ["name", "cloudspace_id", "location", "status"]
    list_filter = ["location"]
    list_select_related = ["location"]
    search_fields = ["name", "cloudspace_id"]


@admin.register(Image)
class ImageAdmin(MirroredAdmin[Image]):
    list_display = ["name", "image_id", "location", "status", "os_type"]
    list_filter = ["location"]
    list_select_related = ["location"]
    search_fields = ["name"]
