"""The admin for clusters, sites, pools, machines, their Kubernetes and the VMs, and the
accounts' page (cloud.admin's, with what needs the clusters: deleting an account, its
management cluster).

Each page shows the rows of the user's accounts only, and offers what their role there
allows (capvco_web.permissions); creating and changing rows goes through the audited
services (clusters.services, cloud.services), as the API does.

Destructive changes go through the audited services with a reason (force delete, cluster
deletion), never through a plain row delete, which would leave VMs and vGPUs billed with
no record. Deleting an account, a site or a pool (delete page, bulk action, the inline
checkbox on the cluster page) goes through its audited service, which refuses while
anything still hangs from it and says what to do. Names that end up in VM and vGPU
names cannot be changed once created: a renamed cluster would make its own reservations
look like orphans.

A cluster imported from Cluster API, its sites and pools are shown read-only, saying where
to change them; the services refuse a change all the same (`ImportedReadOnly`).
"""

from __future__ import annotations

from typing import Any, TypeVar

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, ValidationError
from django.db import models
from django.db.models import ProtectedError, QuerySet
from django.forms.formsets import DELETION_FIELD_NAME
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from capvco_web.admin import NamesForm, ReasonForm, confirmation_asked, reason_asked
from capvco_web.api import in_use_detail
from capvco_web.integrations.kube import Kubeconfig, KubeconfigInvalid
from capvco_web.permissions import (
    AccountScopedAdmin,
    AccountScopedInline,
    allowed_somewhere,
)
from capvco_web.tasks import send_on_commit
from capvco_web.validators import kubeconfig_checked
from cloud import admin as cloud_admin
from cloud.models import (
    Account,
    Location,
    Membership,
    VirtualMachine,
)
from cloud.services import (
    InUse,
)
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from clusters.orphans import vms_not_ours
from clusters.releases import reservation_release_request, vm_removal_request
from clusters.services import (
    account_capi_kubeconfig_set,
    account_delete,
    account_delete_check,
    cluster_create,
    cluster_delete,
    cluster_kubeconfig_set,
    cluster_update,
    machine_delete,
    machine_force_delete,
    pool_create,
    pool_delete,
    pool_delete_check,
    pool_scale,
    pool_update,
    site_create,
    site_delete,
    site_delete_check,
    site_update,
)
from clusters.tasks import orphan_sweep_location, reservation_release_task
from gpus import naming
from gpus.models import GpuProfile, VgpuReservation, vm_hourly_cost
from gpus.selectors import ORPHANED
from gpus.services import ReleaseRefused

M = TypeVar("M", bound=models.Model)


def _import_refusal(obj: Any) -> str | None:
    refusal = getattr(obj, "import_refusal", None)
    return refusal() if obj is not None and refusal is not None else None


class ImportedReadOnlyAdmin(AccountScopedAdmin[M]):
    """Rows of a cluster imported from Cluster API: viewed here, changed in the management
    cluster. The page says so (`import_note`)."""

    def has_change_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return not _import_refusal(obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return not _import_refusal(obj) and super().has_delete_permission(request, obj)

    @admin.display(description="Cluster API")
    def import_note(self, obj: M) -> str:
        return _import_refusal(obj) or "not imported: managed here"


class ImportedReadOnlyInline(AccountScopedInline[M]):
    """The sites and pools on the page of an imported cluster (`obj`): read-only."""

    def has_add_permission(self, request: HttpRequest, obj: Any) -> bool:  # type: ignore[override]
        return not _import_refusal(obj) and super().has_add_permission(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not _import_refusal(obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not _import_refusal(obj) and super().has_delete_permission(request, obj)


class DeleteThroughServiceAdmin(ImportedReadOnlyAdmin[M], cloud_admin.DeleteThroughServiceAdmin[M]):
    """Deletes through the audited service (cloud.admin), and read-only when imported."""


class AccountForm(cloud_admin.AccountForm):
    """With the kubeconfig of the management cluster whose clusters are imported."""

    new_capi_kubeconfig = forms.CharField(
        required=False,
        label="Management cluster kubeconfig",
        widget=forms.Textarea(attrs={"rows": 6, "autocomplete": "off"}),
        help_text="Paste the kubeconfig of a management cluster to import its Cluster API "
        "clusters into this account; leave empty to keep the stored one (never shown).",
    )
    remove_capi_kubeconfig = forms.BooleanField(
        required=False,
        label="Stop importing",
        help_text="Forget the management cluster; the clusters imported so far are managed "
        "here from now on.",
    )

    def insecure_tls_allowed(self) -> bool:
        """As this form sets it (the field comes before the kubeconfig), or as stored."""
        stored = self.instance.kube_insecure_tls_allowed
        return bool(self.cleaned_data.get("kube_insecure_tls_allowed", stored))

    def clean_new_capi_kubeconfig(self) -> str:
        text = str(self.cleaned_data.get("new_capi_kubeconfig") or "").strip()
        if text:
            try:
                kubeconfig_checked(text, insecure_allowed=self.insecure_tls_allowed())
            except KubeconfigInvalid as exc:
                raise ValidationError(str(exc)) from exc
        return text

    def capi_kubeconfig_wanted(self) -> str | None:
        """The management kubeconfig to store ("" removes it); None: keep the stored one."""
        if text := self.cleaned_data.get("new_capi_kubeconfig"):
            return str(text)
        return "" if self.cleaned_data.get("remove_capi_kubeconfig") else None


@admin.register(Account)
class AccountAdmin(DeleteThroughServiceAdmin[Account], cloud_admin.AccountAdmin):
    form = AccountForm
    readonly_fields = [
        *cloud_admin.AccountAdmin.readonly_fields, "capi_kubeconfig_status",
        "capi_import_complete", "capi_import_error", "capi_import_started_at",
        "capi_last_complete_import_at",
    ]  # fmt: skip

    # The released reservations (history), and what is mirrored from its locations.
    deleted_by_service = (VgpuReservation, Location, GpuProfile, Membership)

    def save_model(self, request: HttpRequest, obj: Account, form: Any, change: bool) -> None:
        if not self.account_save(request, obj, form, change):
            return
        wanted = form.capi_kubeconfig_wanted()
        if wanted is not None and wanted != obj.capi_kubeconfig:
            # Through its own service: audited with its server, never its secret.
            account_capi_kubeconfig_set(account=obj, kubeconfig=wanted, actor=request.user)

    @admin.display(description="management cluster")
    def capi_kubeconfig_status(self, account: Account) -> str:
        if not account.capi_kubeconfig:
            return "none stored: no Cluster API import"
        try:
            checked = kubeconfig_checked(
                account.capi_kubeconfig, insecure_allowed=account.kube_insecure_tls_allowed
            )
            return f"stored, server {checked.server}{_unverified(checked)}"
        except KubeconfigInvalid as exc:
            return f"stored, unusable: {exc}"

    def delete_check(self, obj: Account) -> None:
        account_delete_check(account=obj)

    def delete_through_service(self, obj: Account, actor: User | AnonymousUser) -> None:
        account_delete(account=obj, actor=actor)


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


class ClusterSiteInline(
    ImportedReadOnlyInline[ClusterSite], admin.TabularInline[ClusterSite, Cluster]
):
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


class MachinePoolInline(
    ImportedReadOnlyInline[MachinePool], admin.StackedInline[MachinePool, Cluster]
):
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
        fields = ["name", "account", "gpu_addon"]

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


def _beside(cluster: Cluster, row: str, name: str) -> object:
    """A field of a row another app keeps beside the cluster, by its relation's name (None:
    no row)."""
    try:
        return getattr(getattr(cluster, row), name)
    except ObjectDoesNotExist:
        return None


@admin.register(Cluster)
class ClusterAdmin(ImportedReadOnlyAdmin[Cluster]):
    form = ClusterForm
    list_display = [
        "name", "account", "state", "kube_observation_complete", "gpu_addon", "imported_from",
        "created_at",
    ]  # fmt: skip
    list_filter = ["state", "account", "gpu_addon"]
    list_select_related = ["account", "kube_observation"]
    inlines = [ClusterSiteInline, MachinePoolInline]
    actions = ["delete_selected_clusters"]

    def has_change_permission(self, request: HttpRequest, obj: Cluster | None = None) -> bool:
        # An imported cluster's kubeconfig is ours to set; its other fields are read-only
        # (below), and the services refuse a change to them all the same.
        return AccountScopedAdmin.has_change_permission(self, request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: Cluster | None = None) -> list[str]:
        if obj is not None and obj.imported:
            return [*self._readonly(obj), "gpu_addon"]
        return self._readonly(obj)

    def _readonly(self, obj: Cluster | None) -> list[str]:
        fixed = [
            "state", "deletion_blockers", "created_at", "kubeconfig_status",
            "kube_observation_complete", "kube_observation_error",
            "kube_observation_started_at", "kube_last_complete_observation_at",
            "gpu_addon_applied_at", "gpu_addon_error", "import_note",
        ]  # fmt: skip
        return ["name", "account", *fixed] if obj else fixed

    # How its Kubernetes and GPU add-on were observed: the kube app's rows beside the
    # cluster (none yet: not observed, nothing recorded).
    @admin.display(description="Kube observation complete", boolean=True)
    def kube_observation_complete(self, cluster: Cluster) -> bool:
        return bool(_beside(cluster, "kube_observation", "complete"))

    @admin.display(description="Kube observation error")
    def kube_observation_error(self, cluster: Cluster) -> str:
        return str(_beside(cluster, "kube_observation", "error") or "")

    @admin.display(description="Kube observation started at")
    def kube_observation_started_at(self, cluster: Cluster) -> object:
        return _beside(cluster, "kube_observation", "started_at")

    @admin.display(description="Kube last complete observation at")
    def kube_last_complete_observation_at(self, cluster: Cluster) -> object:
        return _beside(cluster, "kube_observation", "last_complete_at")

    @admin.display(description="GPU add-on applied at")
    def gpu_addon_applied_at(self, cluster: Cluster) -> object:
        return _beside(cluster, "gpu_addon_state", "applied_at")

    @admin.display(description="GPU add-on error")
    def gpu_addon_error(self, cluster: Cluster) -> str:
        return str(_beside(cluster, "gpu_addon_state", "error") or "")

    @admin.display(description="kubeconfig")
    def kubeconfig_status(self, cluster: Cluster) -> str:
        if not cluster.kubeconfig:
            return "none stored: Kubernetes is not observed"
        try:
            checked = kubeconfig_checked(
                cluster.kubeconfig, insecure_allowed=cluster.account.kube_insecure_tls_allowed
            )
            return f"stored, server {checked.server}{_unverified(checked)}"
        except KubeconfigInvalid as exc:
            return f"stored, unusable: {exc}"

    def has_delete_permission(self, request: HttpRequest, obj: Cluster | None = None) -> bool:
        return False  # a row delete would skip teardown: use the action

    def has_teardown_permission(self, request: HttpRequest) -> bool:
        return allowed_somewhere(request.user, "clusters.delete_cluster")

    def save_model(self, request: HttpRequest, obj: Cluster, form: Any, change: bool) -> None:
        wanted = obj.kubeconfig
        obj.kubeconfig = form.stored_kubeconfig
        if change:
            cluster_update(cluster=obj, actor=request.user)
        else:
            cluster_create(cluster=obj, actor=request.user)
        # Through its own service: audited with its server, and what was mirrored is
        # compared afresh.
        if wanted != form.stored_kubeconfig:
            cluster_kubeconfig_set(cluster=obj, kubeconfig=wanted, actor=request.user)

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
            _inline_save(instance, request.user)
        formset.save_m2m()

    @admin.action(description="Delete selected clusters (tear down)", permissions=["teardown"])
    def delete_selected_clusters(
        self, request: HttpRequest, queryset: QuerySet[Cluster]
    ) -> TemplateResponse | None:
        asked = confirmation_asked(
            self,
            request,
            queryset,
            action="delete_selected_clusters",
            title="Delete selected clusters",
            template="admin/clusters/cluster_delete_confirm.html",
            form_class=NamesForm,
        )
        if isinstance(asked, TemplateResponse):
            return asked
        reason, typed = str(asked["reason"]), _names_typed(asked)
        for cluster in queryset:
            confirm = cluster.name if cluster.name in typed else ""
            try:
                cluster_delete(cluster=cluster, actor=request.user, reason=reason, confirm=confirm)
            except (ValidationError, PermissionDenied) as exc:
                self.message_user(request, f"{cluster}: not deleted: {_said(exc)}", messages.ERROR)
            else:
                self.message_user(request, f"{cluster}: deletion requested.", messages.SUCCESS)
        return None


def _unverified(kubeconfig: Kubeconfig) -> str:
    return " (insecure: its TLS certificate is not verified)" if kubeconfig.insecure else ""


def _names_typed(asked: dict[str, Any]) -> frozenset[str]:
    """The names typed on a `NamesForm`: each selected object is confirmed by its own."""
    return frozenset(str(asked["names"]).replace(",", " ").split())


def _said(exc: Exception) -> str:
    return " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)


def _inline_save(obj: models.Model, actor: User | AnonymousUser) -> None:
    """A site or pool added or changed on the cluster page, through its service."""
    if isinstance(obj, ClusterSite):
        (site_update if obj.pk else site_create)(site=obj, actor=actor)
    elif isinstance(obj, MachinePool):
        (pool_update if obj.pk else pool_create)(pool=obj, actor=actor)
    else:
        raise TypeError(f"no service saves {obj._meta.label}")


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
        return ["cluster", "location", "cloudspace_id", "import_note"] if obj else []

    def save_model(self, request: HttpRequest, obj: ClusterSite, form: Any, change: bool) -> None:
        (site_update if change else site_create)(site=obj, actor=request.user)


class ScaleForm(ReasonForm):
    replicas = forms.IntegerField(min_value=0, max_value=100, help_text="For every pool selected.")

    field_order = ["replicas", "reason"]


@admin.register(MachinePool)
class MachinePoolAdmin(DeleteThroughServiceAdmin[MachinePool]):
    list_display = ["__str__", "site", "replicas", "gpu_type", "gpu_count", "imported_from"]
    list_filter = ["cluster"]
    actions = ["delete_selected", "scale_selected"]

    def has_scale_permission(self, request: HttpRequest) -> bool:
        return allowed_somewhere(request.user, "clusters.scale_machinepool")

    def save_model(self, request: HttpRequest, obj: MachinePool, form: Any, change: bool) -> None:
        (pool_update if change else pool_create)(pool=obj, actor=request.user)

    @admin.action(description="Scale selected pools", permissions=["scale"])
    def scale_selected(
        self, request: HttpRequest, queryset: QuerySet[MachinePool]
    ) -> TemplateResponse | None:
        asked = confirmation_asked(
            self,
            request,
            queryset,
            action="scale_selected",
            title="Scale selected pools",
            template="admin/reason_confirm.html",
            form_class=ScaleForm,
        )
        if isinstance(asked, TemplateResponse):
            return asked
        for pool in queryset:
            try:
                pool_scale(
                    pool=pool,
                    replicas=asked["replicas"],
                    actor=request.user,
                    reason=asked["reason"],
                )
            except PermissionDenied as exc:
                self.message_user(request, f"{pool}: not scaled: {exc}", messages.ERROR)
            except ValidationError as exc:
                self.message_user(
                    request, f"{pool}: not scaled: {'; '.join(exc.messages)}", messages.ERROR
                )
            else:
                self.message_user(
                    request, f"{pool}: scaled to {asked['replicas']}.", messages.SUCCESS
                )
        return None

    def delete_check(self, obj: MachinePool) -> None:
        pool_delete_check(pool=obj)

    def delete_through_service(self, obj: MachinePool, actor: User | AnonymousUser) -> None:
        pool_delete(pool=obj, actor=actor)

    def get_readonly_fields(
        self, request: HttpRequest, obj: MachinePool | None = None
    ) -> list[str]:
        imported = [
            "imported_from", "import_generation", "capi_sriov_secret_ref", "gpu_fit_refusal",
            "import_note",
        ]  # fmt: skip
        return ["cluster", "site", *imported] if obj else []


@admin.register(Machine)
class MachineAdmin(AccountScopedAdmin[Machine]):
    list_display = [
        "__str__", "pool", "phase", "vm_id", "node_state__missing", "delete_requested",
        "updated_at",
    ]  # fmt: skip
    list_filter = ["phase", "node_state__missing", "pool__cluster"]
    list_select_related = ["pool__cluster", "deletion", "node_state"]
    actions = ["delete_selected_machines", "force_delete_selected"]

    @admin.display(boolean=True, description="delete requested")
    def delete_requested(self, machine: Machine) -> bool:
        # Asked by a person (MachineDeletion) or taken up by act.
        return machine.deletion_asked

    # Machines are made and removed by the reconciler from the pool's replicas.
    def get_readonly_fields(self, request: HttpRequest, obj: Machine | None = None) -> list[str]:
        return [f.name for f in Machine._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Machine | None = None) -> bool:
        return False  # a row delete is a force delete without a reason: use the actions

    def has_teardown_permission(self, request: HttpRequest) -> bool:
        return allowed_somewhere(request.user, "clusters.delete_machine")

    def has_force_delete_permission(self, request: HttpRequest) -> bool:
        return allowed_somewhere(request.user, "clusters.force_delete_machine")

    @admin.action(
        description="Delete selected machines (tear down; the pool makes new ones)",
        permissions=["teardown"],
    )
    def delete_selected_machines(
        self, request: HttpRequest, queryset: QuerySet[Machine]
    ) -> TemplateResponse | None:
        reason = reason_asked(
            self,
            request,
            queryset,
            action="delete_selected_machines",
            title="Delete selected machines",
            template="admin/reason_confirm.html",
        )
        if isinstance(reason, TemplateResponse):
            return reason
        for machine in queryset.select_related("pool__cluster"):
            try:
                machine_delete(machine=machine, actor=request.user, reason=reason)
            except PermissionDenied as exc:
                self.message_user(request, f"{machine}: not deleted: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{machine}: teardown requested.", messages.SUCCESS)
        return None

    @admin.action(
        description="Force delete (leave VM and vGPUs as orphans)", permissions=["force_delete"]
    )
    def force_delete_selected(
        self, request: HttpRequest, queryset: QuerySet[Machine]
    ) -> TemplateResponse | None:
        asked = confirmation_asked(
            self,
            request,
            queryset,
            action="force_delete_selected",
            title="Force delete selected machines",
            template="admin/clusters/machine_force_delete_confirm.html",
            form_class=NamesForm,
        )
        if isinstance(asked, TemplateResponse):
            return asked
        reason, typed = str(asked["reason"]), _names_typed(asked)
        for machine in queryset.select_related("pool__cluster"):
            name = str(machine)
            confirm = machine.name if machine.name in typed else ""
            try:
                machine_force_delete(
                    machine=machine, actor=request.user, reason=reason, confirm=confirm
                )
            except (ValueError, ValidationError, PermissionDenied) as exc:
                self.message_user(request, f"{name}: not deleted: {_said(exc)}", messages.ERROR)
            else:
                self.message_user(request, f"{name}: deleted with force.", messages.SUCCESS)
        return None


class VmOwnerFilter(admin.SimpleListFilter):
    title = "owner"
    parameter_name = "owner"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[VirtualMachine]
    ) -> list[tuple[str, str]]:
        return [
            ("orphaned", "Named by us, no machine owns it (orphaned)"),
            ("not_ours", "Not named by us (made outside the control plane)"),
        ]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[VirtualMachine]
    ) -> QuerySet[VirtualMachine]:
        if self.value() == "orphaned":
            return queryset.filter(orphaned_since__isnull=False)
        if self.value() == "not_ours":
            return vms_not_ours(queryset)
        return queryset


@admin.register(VirtualMachine)
class VirtualMachineAdmin(cloud_admin.MirroredAdmin[VirtualMachine]):
    """The VMs listed in the clusters' cloudspaces. Removed only through the audited
    request the dashboard and the API make too (`vm_removal_request`), with a reason."""

    list_display = [
        "name", "vm_id", "location", "cloudspace_id", "status", "vcpus", "memory_mib",
        "hourly_cost", "orphaned_since", "first_seen_at", "changed_at",
    ]  # fmt: skip
    list_filter = ["location", "status", VmOwnerFilter]
    list_select_related = ["location"]
    search_fields = ["name", "=vm_id", "cloudspace_id"]
    actions = ["remove_selected"]

    def has_remove_permission(self, request: HttpRequest) -> bool:
        return allowed_somewhere(request.user, "cloud.remove_virtualmachine")

    @admin.display(description="per hour")
    def hourly_cost(self, vm: VirtualMachine) -> str:
        return f"{vm_hourly_cost(vm)} {vm.location.currency}"

    @admin.action(description="Remove selected VMs (stop and delete)", permissions=["remove"])
    def remove_selected(
        self, request: HttpRequest, queryset: QuerySet[VirtualMachine]
    ) -> TemplateResponse | None:
        reason = reason_asked(
            self,
            request,
            queryset,
            action="remove_selected",
            title="Remove selected VMs",
            template="admin/cloud/vm_remove_confirm.html",
        )
        if isinstance(reason, TemplateResponse):
            return reason
        # Views never call whitesky: the request is recorded now and audited, and the
        # location's sweep carries it out (sent now; the beat sends it again if lost).
        for vm in queryset.select_related("location__account"):
            try:
                vm_removal_request(vm=vm, actor=request.user, reason=reason)
            except (ReleaseRefused, PermissionDenied, ValueError) as exc:
                self.message_user(request, f"{vm}: not removed: {exc}", messages.ERROR)
                continue
            send_on_commit(orphan_sweep_location, vm.location_id)
            self.message_user(
                request,
                f"{vm}: removal requested; the location's next sweep carries it out and the "
                "audit log shows the outcome.",
                messages.SUCCESS,
            )
        return None


# --- vGPU reservations: mirrored, released only through the audited request, with a reason


class OrphanedFilter(admin.SimpleListFilter):
    title = "orphaned"
    parameter_name = "orphaned"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[VgpuReservation]
    ) -> list[tuple[str, str]]:
        return [("yes", "Yes"), ("no", "No")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[VgpuReservation]
    ) -> QuerySet[VgpuReservation]:
        if self.value() == "yes":
            return queryset.filter(ORPHANED)
        if self.value() == "no":
            return queryset.exclude(ORPHANED)
        return queryset


@admin.register(VgpuReservation)
class VgpuReservationAdmin(AccountScopedAdmin[VgpuReservation]):
    list_display = [
        "name",
        "location",
        "state",
        "vm_id",
        "owner",
        "orphaned_since",
        "accrued_cost",
        "release_requested_at",
    ]
    list_filter = ["state", "location", OrphanedFilter]
    list_select_related = ["location", "listed"]
    search_fields = ["name", "vgpu_id", "owner_cluster", "owner_machine"]
    actions = ["release_selected"]

    # Rows mirror whitesky (or record a call in flight): nobody edits, adds or deletes
    # them here. Deleting a row would not stop the charge; the release action does.
    def get_readonly_fields(
        self, request: HttpRequest, obj: VgpuReservation | None = None
    ) -> list[str]:
        return [f.name for f in VgpuReservation._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: VgpuReservation | None = None
    ) -> bool:
        return False

    def has_release_permission(self, request: HttpRequest) -> bool:
        return allowed_somewhere(request.user, "gpus.release_vgpureservation")

    @admin.display(description="owner")
    def owner(self, row: VgpuReservation) -> str:
        return row.owner

    @admin.display(description="accrued cost")
    def accrued_cost(self, row: VgpuReservation) -> str:
        if row.orphaned_since is None:
            return "-"
        return f"{row.accrued_cost()} {row.location.currency}"

    @admin.action(description="Release selected reservations", permissions=["release"])
    def release_selected(
        self, request: HttpRequest, queryset: QuerySet[VgpuReservation]
    ) -> TemplateResponse | None:
        reason = reason_asked(
            self,
            request,
            queryset,
            action="release_selected",
            title="Release selected reservations",
            template="admin/gpus/release_confirm.html",
        )
        if isinstance(reason, TemplateResponse):
            return reason
        # Views never call whitesky: the request is recorded on the row now, and a worker
        # carries it out (this task, or the orphan sweep if the task never runs).
        for row in queryset:
            try:
                reservation_release_request(reservation=row, actor=request.user, reason=reason)
            except (ReleaseRefused, PermissionDenied) as exc:
                self.message_user(request, f"Refused: {exc}", messages.ERROR)
                continue
            send_on_commit(reservation_release_task, row.pk)
            self.message_user(
                request,
                f"{row.name}: release requested; a worker carries it out and the audit log "
                "shows the outcome.",
                messages.SUCCESS,
            )
        return None
