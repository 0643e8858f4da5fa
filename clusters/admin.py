"""The admin for accounts, clusters, pools and machines.

Destructive changes go through the audited services with a reason (force delete, cluster
deletion), never through a plain row delete, which would leave VMs and vGPUs billed with
no record. Deleting an account, a site or a pool (delete page, bulk action, the inline
checkbox on the cluster page) goes through its audited service, which refuses while
anything still hangs from it and says what to do. Names that end up in VM and vGPU
names cannot be changed once created: a renamed cluster would make its own reservations
look like orphans.
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
from django.forms.formsets import DELETION_FIELD_NAME
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy

from capvco_web.admin import reason_asked
from capvco_web.api import in_use_detail
from capvco_web.integrations.kube import KubeconfigInvalid, kubeconfig_load
from capvco_web.integrations.whitesky.auth import jwt_expiry
from clusters.models import (
    Account,
    Cluster,
    ClusterSite,
    KubeNode,
    KubePod,
    Location,
    Machine,
    MachinePool,
)
from clusters.services import (
    InUse,
    account_delete,
    account_delete_check,
    cluster_delete,
    cluster_kubeconfig_set,
    machine_force_delete,
    pool_delete,
    pool_delete_check,
    site_delete,
    site_delete_check,
)
from gpus import naming
from gpus.models import VgpuReservation

M = TypeVar("M", bound=models.Model)


class DeleteThroughServiceAdmin(admin.ModelAdmin[M]):
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
class AccountAdmin(DeleteThroughServiceAdmin[Account]):
    form = AccountForm
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = ["name", "api_url", "customer_id", "orphan_auto_release"]
    readonly_fields = ["credential_status"]

    deleted_by_service = (VgpuReservation,)  # the released ones, history

    def delete_check(self, obj: Account) -> None:
        account_delete_check(account=obj)

    def delete_through_service(self, obj: Account, actor: User | AnonymousUser) -> None:
        account_delete(account=obj, actor=actor)

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


class DeleteCheckedFormSet(BaseInlineFormSet[Any, Cluster, Any]):
    """The inline delete checkbox: a row that is still in use is refused on the page, with
    what is in the way; `ClusterAdmin.save_formset` deletes the others through the
    audited services."""

    def clean(self) -> None:
        # Before the base class, whose check of the same foreign keys would only list them.
        refusals = []
        for form in self.forms:
            if form.instance.pk is None or not form.cleaned_data.get(DELETION_FIELD_NAME):
                continue
            try:
                _delete_check(form.instance)
            except InUse as exc:
                refusals.append(str(exc))
        if refusals:
            raise ValidationError(refusals)
        super().clean()


def _delete_check(obj: models.Model) -> None:
    if isinstance(obj, MachinePool):
        pool_delete_check(pool=obj)
    elif isinstance(obj, ClusterSite):
        site_delete_check(site=obj)


class ClusterSiteInline(admin.TabularInline[ClusterSite, Cluster]):
    model = ClusterSite
    formset = DeleteCheckedFormSet
    extra = 0


class MachinePoolFormSet(DeleteCheckedFormSet):
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


class ClusterForm(forms.ModelForm[Cluster]):
    # Write-only: the stored kubeconfig is never rendered, not even re-shown after an error.
    new_kubeconfig = forms.CharField(
        required=False,
        label="Kubeconfig",
        widget=forms.Textarea(attrs={"rows": 6, "autocomplete": "off"}),
        help_text="Paste the workload cluster's kubeconfig (YAML) to observe its nodes and "
        "pods; leave empty to keep the stored one.",
    )
    remove_kubeconfig = forms.BooleanField(
        required=False, help_text="Stop observing its Kubernetes and forget what was mirrored."
    )

    class Meta:
        model = Cluster
        fields = ["name", "account"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stored_kubeconfig = self.instance.kubeconfig

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        # The model validates the kubeconfig the row would hold: the new one, or none.
        text = str(data.get("new_kubeconfig") or "").strip()
        if text:
            self.instance.kubeconfig = text
        elif data.get("remove_kubeconfig"):
            self.instance.kubeconfig = ""
        return data

    def _update_errors(self, errors: ValidationError) -> None:
        # The model names the field `kubeconfig`; this form edits it as `new_kubeconfig`.
        if hasattr(errors, "error_dict") and "kubeconfig" in errors.error_dict:
            errors.error_dict["new_kubeconfig"] = errors.error_dict.pop("kubeconfig")
        super()._update_errors(errors)  # type: ignore[misc]


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin[Cluster]):
    form = ClusterForm
    list_display = ["name", "account", "state", "kube_observation_complete", "created_at"]
    list_filter = ["state", "account"]
    inlines = [ClusterSiteInline, MachinePoolInline]
    actions = ["delete_selected_clusters"]

    def get_readonly_fields(self, request: HttpRequest, obj: Cluster | None = None) -> list[str]:
        fixed = [
            "state", "deletion_blockers", "created_at", "kubeconfig_status",
            "kube_observation_complete", "kube_observation_error",
            "kube_observation_started_at", "kube_last_complete_observation_at",
        ]  # fmt: skip
        return ["name", "account", *fixed] if obj else fixed

    @admin.display(description="kubeconfig")
    def kubeconfig_status(self, cluster: Cluster) -> str:
        if not cluster.kubeconfig:
            return "none stored: Kubernetes is not observed"
        try:
            return f"stored, server {kubeconfig_load(cluster.kubeconfig).server}"
        except KubeconfigInvalid as exc:
            return f"stored, unusable: {exc}"

    def save_model(self, request: HttpRequest, obj: Cluster, form: Any, change: bool) -> None:
        wanted = obj.kubeconfig
        obj.kubeconfig = form.stored_kubeconfig
        super().save_model(request, obj, form, change)
        # Through the service: audited, and what was mirrored is compared afresh.
        if wanted != form.stored_kubeconfig:
            cluster_kubeconfig_set(cluster=obj, kubeconfig=wanted, actor=request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Cluster | None = None) -> bool:
        return False  # a row delete would skip teardown: use the action

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: Any) -> None:
        instances = formset.save(commit=False)  # collects the deleted rows, deletes none
        for obj in formset.deleted_objects:
            try:
                if isinstance(obj, MachinePool):
                    pool_delete(pool=obj, actor=request.user)
                elif isinstance(obj, ClusterSite):
                    site_delete(site=obj, actor=request.user)
            except ProtectedError as exc:  # in use since the form was checked
                self.message_user(request, in_use_detail(exc), messages.ERROR)
        for instance in instances:
            instance.save()
        formset.save_m2m()

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
class ClusterSiteAdmin(DeleteThroughServiceAdmin[ClusterSite]):
    list_display = ["cluster", "location", "cloudspace_id", "image_id"]
    list_filter = ["location"]

    def delete_check(self, obj: ClusterSite) -> None:
        site_delete_check(site=obj)

    def delete_through_service(self, obj: ClusterSite, actor: User | AnonymousUser) -> None:
        site_delete(site=obj, actor=actor)

    def get_readonly_fields(
        self, request: HttpRequest, obj: ClusterSite | None = None
    ) -> list[str]:
        # Moving a site would strand the VMs already in its cloudspace.
        return ["cluster", "location", "cloudspace_id"] if obj else []


@admin.register(MachinePool)
class MachinePoolAdmin(DeleteThroughServiceAdmin[MachinePool]):
    list_display = ["__str__", "site", "replicas", "gpu_type", "gpu_count"]
    list_filter = ["cluster"]

    def delete_check(self, obj: MachinePool) -> None:
        pool_delete_check(pool=obj)

    def delete_through_service(self, obj: MachinePool, actor: User | AnonymousUser) -> None:
        pool_delete(pool=obj, actor=actor)

    def get_readonly_fields(
        self, request: HttpRequest, obj: MachinePool | None = None
    ) -> list[str]:
        return ["cluster", "site"] if obj else []


@admin.register(Machine)
class MachineAdmin(admin.ModelAdmin[Machine]):
    list_display = [
        "__str__", "pool", "phase", "vm_id", "node_missing", "delete_requested", "updated_at",
    ]  # fmt: skip
    list_filter = ["phase", "node_missing", "pool__cluster"]
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


class MirroredAdmin(admin.ModelAdmin[M]):
    """Rows mirrored from a cluster's Kubernetes: read here, changed only by observing."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return False


@admin.register(KubeNode)
class KubeNodeAdmin(MirroredAdmin[KubeNode]):
    list_display = [
        "name", "cluster", "ready", "gpu_allocatable", "gpu_capacity", "machine",
        "unowned_since", "kubelet_version",
    ]  # fmt: skip
    list_filter = ["cluster", "ready"]
    list_select_related = ["cluster", "machine"]
    search_fields = ["name", "provider_id"]


@admin.register(KubePod)
class KubePodAdmin(MirroredAdmin[KubePod]):
    list_display = ["name", "namespace", "cluster", "node_name", "phase", "gpu_requests"]
    list_filter = ["cluster", "phase"]
    list_select_related = ["cluster"]
    search_fields = ["name", "namespace", "node_name", "uid"]
