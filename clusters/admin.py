"""The admin for accounts, clusters, pools and machines.

Destructive changes go through the audited services with a reason (force delete, cluster
deletion), never through a plain row delete, which would leave VMs and vGPUs billed with
no record. Names that end up in VM and vGPU names cannot be changed once created: a
renamed cluster would make its own reservations look like orphans.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from capvco_web.admin import reason_asked
from capvco_web.integrations.whitesky.auth import jwt_expiry
from clusters.models import Account, Cluster, ClusterSite, Location, Machine, MachinePool
from clusters.services import cluster_delete, machine_force_delete
from gpus import naming


class AccountForm(forms.ModelForm[Account]):
    # Write-only: the stored credential is never rendered, not even re-shown after an error.
    new_credential = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Paste a JWT to replace the stored one; leave empty to keep it.",
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
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is None:
            self.fields["new_credential"].required = True  # an account cannot act without one

    def save(self, commit: bool = True) -> Account:
        if token := self.cleaned_data.get("new_credential"):
            self.instance.credential = token
        return super().save(commit=commit)


@admin.register(Account)
class AccountAdmin(admin.ModelAdmin[Account]):
    form = AccountForm
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = ["name", "api_url", "customer_id", "orphan_auto_release"]
    readonly_fields = ["credential_status"]

    @admin.display(description="credential")
    def credential_status(self, account: Account) -> str:
        if not account.credential:
            return "none stored"
        expiry = jwt_expiry(account.credential)
        if expiry is None:
            return "stored"
        return f"stored, expires {datetime.fromtimestamp(expiry, tz=UTC):%Y-%m-%d %H:%M} UTC"


@admin.register(Location)
class LocationAdmin(admin.ModelAdmin[Location]):
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


class ClusterSiteInline(admin.TabularInline[ClusterSite, Cluster]):
    model = ClusterSite
    extra = 0


class MachinePoolFormSet(
    forms.BaseInlineFormSet[MachinePool, Cluster, forms.ModelForm[MachinePool]]
):
    def clean(self) -> None:
        super().clean()
        # MachinePool.clean compares a pool with the saved ones; pools added together
        # are compared here, by the same rule.
        names: list[str] = []
        for form in self.forms:
            data = form.cleaned_data if form.is_valid() else {}
            name = data.get("name")
            if not name or data.get("DELETE"):
                continue
            if conflict := naming.pool_name_conflict(name, names, cluster=self.instance.name):
                form.add_error("name", conflict)
            names.append(name)


class MachinePoolInline(admin.StackedInline[MachinePool, Cluster]):
    model = MachinePool
    formset = MachinePoolFormSet
    extra = 0

    def get_formset(self, request: HttpRequest, obj: Cluster | None = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)
        # Only the cluster's own sites; MachinePool.clean says so too, this saves a round trip.
        sites = obj.sites.all() if obj else ClusterSite.objects.none()
        formset.form.base_fields["site"].queryset = sites  # type: ignore[attr-defined]
        return formset


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin[Cluster]):
    list_display = ["name", "account", "state", "created_at"]
    list_filter = ["state", "account"]
    inlines = [ClusterSiteInline, MachinePoolInline]
    actions = ["delete_selected_clusters"]

    def get_readonly_fields(self, request: HttpRequest, obj: Cluster | None = None) -> list[str]:
        fixed = ["state", "deletion_blockers", "created_at"]
        return ["name", "account", *fixed] if obj else fixed

    def has_delete_permission(self, request: HttpRequest, obj: Cluster | None = None) -> bool:
        return False  # a row delete would skip teardown: use the action

    @admin.action(description="Delete selected clusters (tear down)", permissions=["change"])
    def delete_selected_clusters(
        self, request: HttpRequest, queryset: QuerySet[Cluster]
    ) -> TemplateResponse | None:
        reason = reason_asked(
            self,
            request,
            queryset,
            action="delete_selected_clusters",
            title="Delete selected clusters",
            template="admin/clusters/cluster_delete_confirm.html",
        )
        if isinstance(reason, TemplateResponse):
            return reason
        for cluster in queryset:
            cluster_delete(cluster=cluster, actor=request.user, reason=reason)
            self.message_user(request, f"{cluster}: deletion requested.", messages.SUCCESS)
        return None


@admin.register(ClusterSite)
class ClusterSiteAdmin(admin.ModelAdmin[ClusterSite]):
    list_display = ["cluster", "location", "cloudspace_id", "image_id"]
    list_filter = ["location"]

    def get_readonly_fields(
        self, request: HttpRequest, obj: ClusterSite | None = None
    ) -> list[str]:
        # Moving a site would strand the VMs already in its cloudspace.
        return ["cluster", "location", "cloudspace_id"] if obj else []


@admin.register(MachinePool)
class MachinePoolAdmin(admin.ModelAdmin[MachinePool]):
    list_display = ["__str__", "site", "replicas", "gpu_type", "gpu_count"]
    list_filter = ["cluster"]

    def get_readonly_fields(
        self, request: HttpRequest, obj: MachinePool | None = None
    ) -> list[str]:
        return ["cluster", "site"] if obj else []


@admin.register(Machine)
class MachineAdmin(admin.ModelAdmin[Machine]):
    list_display = ["__str__", "pool", "phase", "vm_id", "delete_requested", "updated_at"]
    list_filter = ["phase", "pool__cluster"]
    list_select_related = ["pool__cluster"]
    actions = ["force_delete_selected"]

    # Machines are made and removed by the reconciler from the pool's replicas.
    def get_readonly_fields(self, request: HttpRequest, obj: Machine | None = None) -> list[str]:
        return [f.name for f in Machine._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Machine | None = None) -> bool:
        return False  # a row delete is a force delete without a reason: use the action

    @admin.action(
        description="Force delete (leave VM and vGPUs as orphans)", permissions=["change"]
    )
    def force_delete_selected(
        self, request: HttpRequest, queryset: QuerySet[Machine]
    ) -> TemplateResponse | None:
        reason = reason_asked(
            self,
            request,
            queryset,
            action="force_delete_selected",
            title="Force delete selected machines",
            template="admin/clusters/machine_force_delete_confirm.html",
        )
        if isinstance(reason, TemplateResponse):
            return reason
        for machine in queryset.select_related("pool__cluster"):
            name = str(machine)
            try:
                machine_force_delete(machine=machine, actor=request.user, reason=reason)
            except ValueError as exc:
                self.message_user(request, f"{name}: not deleted: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{name}: deleted with force.", messages.SUCCESS)
        return None
