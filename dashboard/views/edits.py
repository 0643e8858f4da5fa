"""What an account's admin changes from the dashboard: a pool's GPUs and size, shown first
as the plan the edit makes, and a cluster's kubeconfig. Each through the service the API
uses (`pool_update`, `cluster_kubeconfig_set`), whose rules and audit apply; a refusal
shows the service's message. Another account's object is not found (404); one the role
may see but not change is refused (403).

The preview of a pool edit is the cluster's plan as it would be with the edit: the edit is
written in a savepoint, the plan read, and the savepoint rolled back, so the plan is what
the reconciler would do and nothing is saved (no row, no audit record) until confirmed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from capvco_web.htmx import HtmxHttpRequest
from capvco_web.integrations.kube.kubeconfig import KubeconfigInvalid, kubeconfig_load
from capvco_web.models import AuditEvent
from capvco_web.permissions import permission_require, visible
from clusters import services
from clusters.models import (
    MAX_DISK_GIB,
    MAX_GPUS_PER_MACHINE,
    MAX_MEMORY_MIB,
    MAX_VCPUS,
    MIN_DISK_GIB,
    MIN_MEMORY_MIB,
    Cluster,
    Machine,
    MachinePool,
)
from clusters.plan import ClusterPlan, ClusterReclaim, MachineStep, cluster_plan
from dashboard.views.audit import FieldChange, audit_diff
from gpus.models import GpuProfile
from gpus.resolve import gpu_type_of

# What the pool edit changes: what its machines are made with.
POOL_FIELDS = ("gpu_type", "gpu_count", "vcpus", "memory_mib", "disk_gib")
REPLACING = frozenset({"teardown", "replace_vm", "replace"})


class PoolEditForm(forms.Form):
    """A pool's machines' values. Its GPU types are those its location offers (`offered`),
    as the new-cluster form offers them; the pool's own, or one asked for, that the
    location does not offer stays shown, marked so, and the service says why it refuses
    it."""

    gpu_type = forms.CharField(
        max_length=100,
        required=False,
        label="GPU type",
        widget=forms.Select,
        help_text="The GPU types the pool's location offers; no GPU with 0 GPUs per machine.",
    )
    gpu_count = forms.IntegerField(
        label="GPUs per machine",
        validators=[MinValueValidator(0), MaxValueValidator(MAX_GPUS_PER_MACHINE)],
    )
    vcpus = forms.IntegerField(
        label="vCPUs", validators=[MinValueValidator(1), MaxValueValidator(MAX_VCPUS)]
    )
    memory_mib = forms.IntegerField(
        label="Memory (MiB)",
        validators=[MinValueValidator(MIN_MEMORY_MIB), MaxValueValidator(MAX_MEMORY_MIB)],
    )
    disk_gib = forms.IntegerField(
        label="Disk (GiB)",
        validators=[MinValueValidator(MIN_DISK_GIB), MaxValueValidator(MAX_DISK_GIB)],
    )
    reason = forms.CharField(
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Recorded in the audit log with your name.",
    )

    def __init__(self, *args: Any, offered: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kept = self.data.get("gpu_type") if self.is_bound else self.initial.get("gpu_type")
        choices = [("", "no GPU"), *((t, t) for t in offered)]
        if kept and str(kept) not in offered:
            choices.append((str(kept), f"{kept} (not offered here)"))
        widget = self.fields["gpu_type"].widget
        assert isinstance(widget, forms.Select)
        widget.choices = choices


def _gpu_types_offered(user: Any, pool: MachinePool) -> list[str]:
    """The GPU types of the cards of the pool's location, as the new-cluster form names
    them."""
    cards = visible(user, GpuProfile.objects.filter(location=pool.site.location_id))
    return sorted({gpu_type_of(card) for card in cards})


@dataclass
class PoolEditPreview:
    """The plan of the pool's cluster with the edit, and what it changes of the plan now."""

    changes: list[FieldChange]
    steps: list[MachineStep]
    """The plan's steps for the pool, with the edit."""
    new: set[int] = field(default_factory=set)
    """Indexes in `steps` of those the edit brings (not in the plan without it)."""
    replaced: list[str] = field(default_factory=list)
    """Machines the edit replaces: the one the plan replaces first (or gives a new VM),
    then those made with the old values, replaced one at a time after it."""


def _step_key(step: MachineStep) -> tuple[Any, ...]:
    shown = step.shown()
    return tuple(shown[name] for name in ("kind", "target", "card_id", "reserve", "blocked"))


def _of_pool(steps: list[MachineStep], pool: MachinePool) -> list[MachineStep]:
    return [s for s in steps if not isinstance(s, ClusterReclaim) and s.pool_id == pool.pk]


def _plan_with(pool: MachinePool, values: dict[str, Any]) -> tuple[ClusterPlan, list[str]]:
    """The cluster's plan as it would be with `values` saved on the pool, and the machines
    then made with other values than the pool's: written in a savepoint, read, rolled
    back."""
    with transaction.atomic():
        MachinePool.objects.filter(pk=pool.pk).update(**values)
        plan = cluster_plan(Cluster.objects.get(pk=pool.cluster_id))
        changed = MachinePool.objects.select_related("cluster").get(pk=pool.pk)
        outdated = []
        for machine in changed.machines.filter(delete_requested=False, deletion=None).order_by(
            "index"
        ):
            machine.pool = changed
            if machine.phase != Machine.Phase.DELETING and machine.spec_changes():
                outdated.append(machine.name)
        transaction.set_rollback(True)
    return plan, outdated


def pool_edit_preview(pool: MachinePool, changed: MachinePool) -> PoolEditPreview:
    values = {name: getattr(changed, name) for name in POOL_FIELDS}
    before = {name: getattr(pool, name) for name in POOL_FIELDS}
    now = cluster_plan(Cluster.objects.get(pk=pool.cluster_id)).steps
    plan, outdated = _plan_with(pool, values)
    after = _of_pool(plan.steps, pool)
    known = {_step_key(s) for s in _of_pool(now, pool)}
    preview = PoolEditPreview(audit_diff(before, values), after)
    for n, step in enumerate(after):
        if _step_key(step) not in known:
            preview.new.add(n)
            if step.kind in REPLACING:
                preview.replaced.append(step.target)
    preview.replaced += [name for name in outdated if name not in preview.replaced]
    return preview


def _pool_changed(pool: MachinePool, data: dict[str, Any]) -> MachinePool:
    changed = MachinePool.objects.select_related("cluster", "site__location").get(pk=pool.pk)
    for name in POOL_FIELDS:
        setattr(changed, name, data[name])
    changed.gpu_type = changed.gpu_type.strip()
    return changed


def _form_errors(form: forms.Form, exc: ValidationError) -> int:
    """The service's refusal on the form; 409 when it is about what the rows hold now."""
    errors = getattr(exc, "error_dict", None)
    if errors is None:
        form.add_error(None, exc)
        found = {None: exc.error_list}
    else:
        for name, problems in errors.items():
            form.add_error(name if name in form.fields else None, problems)
        found = errors
    conflicting = any(e.code == "conflict" for problems in found.values() for e in problems)
    return 409 if conflicting else 400


@require_http_methods(["GET", "POST"])
def pool_edit(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    pool = get_object_or_404(
        visible(request.user, MachinePool.objects.select_related("cluster", "site__location")),
        pk=pk,
    )
    permission_require(request.user, "clusters.change_machinepool", pool)
    cluster_url = reverse("dashboard:cluster", args=[pool.cluster_id])
    context: dict[str, Any] = {
        "pool": pool,
        "cluster_url": cluster_url,
        "preview": None,
        "refusal": pool.import_refusal() or pool.cluster.deleting_refusal() or "",
    }
    status = 200
    offered = _gpu_types_offered(request.user, pool)
    if request.method == "GET":
        initial = {name: getattr(pool, name) for name in POOL_FIELDS}
        form = PoolEditForm(initial=initial, offered=offered)
    else:
        form = PoolEditForm(request.POST, offered=offered)
        if not form.is_valid():
            status = 400
        else:
            changed = _pool_changed(pool, form.cleaned_data)
            try:
                if request.POST.get("confirm"):
                    services.pool_update(
                        pool=changed, actor=request.user, reason=form.cleaned_data["reason"]
                    )
                    messages.success(request, f"Pool {pool} changed: {_summary(pool, changed)}.")
                    return redirect(f"{cluster_url}#pool-{pool.pk}")
                changed.full_clean()  # what the service refuses, before the plan is shown
                context["preview"] = pool_edit_preview(pool, changed)
            except ValidationError as exc:
                status = _form_errors(form, exc)
    context["form"] = form
    return render(request, "dashboard/pool_edit.html", context, status=status)


def _summary(pool: MachinePool, changed: MachinePool) -> str:
    before = {name: getattr(pool, name) for name in POOL_FIELDS}
    after = {name: getattr(changed, name) for name in POOL_FIELDS}
    changes = audit_diff(before, after)
    return "; ".join(f"{c.field} {c.before} → {c.after}" for c in changes) or "nothing changed"


class KubeconfigForm(forms.Form):
    kubeconfig = forms.CharField(
        max_length=1_000_000, help_text="The workload cluster's kubeconfig (YAML)."
    )
    reason = forms.CharField(
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Recorded in the audit log with your name.",
    )

    def clean_kubeconfig(self) -> str:
        # A browser sends a textarea's lines ending in CR LF: stored as pasted, with LF.
        return str(self.cleaned_data["kubeconfig"]).replace("\r\n", "\n")


@dataclass(frozen=True)
class KubeconfigState:
    """What the page says of the stored kubeconfig: never the kubeconfig."""

    present: bool
    server: str = ""
    set_at: Any = None
    set_by: str = ""


def kubeconfig_state(cluster: Cluster) -> KubeconfigState:
    if not cluster.kubeconfig:
        return KubeconfigState(False)
    try:
        server = kubeconfig_load(cluster.kubeconfig).server
    except KubeconfigInvalid:
        server = "(unreadable)"
    event = (
        AuditEvent.objects.filter(
            object_type=Cluster._meta.label,
            object_id=str(cluster.pk),
            action="cluster.kubeconfig_set",
        )
        .order_by("-created_at", "-pk")
        .first()
    )
    if event is None:
        return KubeconfigState(True, server)
    return KubeconfigState(True, server, event.created_at, event.actor_name)


@require_http_methods(["GET", "POST"])
def cluster_kubeconfig(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    cluster = get_object_or_404(visible(request.user, Cluster.objects.all()), pk=pk)
    permission_require(request.user, "clusters.change_cluster", cluster)
    cluster_url = reverse("dashboard:cluster", args=[cluster.pk])
    status = 200
    form = KubeconfigForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        if not form.is_valid():
            status = 400
        else:
            try:
                services.cluster_kubeconfig_set(
                    cluster=cluster,
                    kubeconfig=form.cleaned_data["kubeconfig"],
                    actor=request.user,
                    reason=form.cleaned_data["reason"],
                )
            except ValidationError as exc:
                status = _form_errors(form, exc)
            else:
                state = kubeconfig_state(cluster)
                messages.success(
                    request,
                    f"Kubeconfig of {cluster.name} set: server {state.server}. Its nodes and "
                    "pods are read from it on the next observe pass.",
                )
                return redirect(f"{cluster_url}#kubernetes")
    context = {
        "cluster": cluster,
        "cluster_url": cluster_url,
        "form": form,
        "state": kubeconfig_state(cluster),
    }
    # The form never carries the kubeconfig back: the template draws its field empty.
    return render(request, "dashboard/cluster_kubeconfig.html", context, status=status)
