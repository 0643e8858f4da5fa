"""What an operator does from the dashboard: scale a pool, delete a machine (with teardown
or by force), delete a cluster, release a reservation, detach a leaked NIC. Each through
the same service as the API, which checks the role in the object's account
(capvco_web.permissions); each with a confirmation page that asks for the reason the
audit log keeps, and, to delete a cluster or force-delete a machine, its name typed
again. Another account's object is not found (404); one the role may see but not act on
is refused (403).

Without JavaScript: GET shows the confirmation page, POST acts and redirects back with a
message. With htmx: the confirmation is drawn into the page's action panel, and POST
answers with the fragment the action changed, the message, and an emptied panel. A
refusal answers 409 (400 for bad input) with the form and what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import ProtectedError
from django.http import HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_http_methods
from django_htmx.http import reswap, retarget

from capvco_web.api import in_use_detail
from capvco_web.htmx import HtmxHttpRequest
from capvco_web.permissions import (
    accounts_where,
    allowed_somewhere,
    permission_require,
    scoped,
    visible,
)
from capvco_web.tasks import send_on_commit
from cloud.models import VirtualMachine
from clusters import services
from clusters.models import Cluster, Machine, MachinePool
from clusters.orphans import vms_not_ours
from clusters.releases import (
    orphans_release_request,
    reservation_release_request,
    vm_removal_request,
)
from clusters.tasks import orphan_sweep_location, reservation_release_task
from dashboard.forms import ReasonForm, ScaleForm, confirm_name_form
from dashboard.pages.cluster import cluster_body
from dashboard.views.clusters import cluster_for_page
from dashboard.views.common import local_url, query_of
from dashboard.views.nics import ACTIVITY as NIC_ACTIVITY
from dashboard.views.nics import TEMPLATE as NICS_TEMPLATE
from dashboard.views.nics import nics_context
from dashboard.views.overview import overview_context
from dashboard.views.reservations import TEMPLATE as RESERVATIONS_TEMPLATE
from dashboard.views.reservations import reservation_table
from gpus.models import VgpuReservation
from gpus.selectors import orphans_list
from gpus.services import ReleaseRefused
from kube.gpu_verify_requests import VerifyRefused, gpu_verify_request
from kube.models import KubeNode
from sriov.models import LeakedNic
from sriov.services import leaked_nic_detach_request

PANEL = "action-panel"


@dataclass(frozen=True)
class Home:
    """Where an action's outcome shows: the page to go back to, and its fragment (by id)
    drawn again as the page's query asks."""

    url: str
    target: str
    draw: Callable[[HtmxHttpRequest, QueryDict], str]


@dataclass(frozen=True)
class Confirmation:
    title: str
    object_label: str
    consequence: str
    button: str
    danger: bool = True


def _reservations_home() -> Home:
    def draw(request: HtmxHttpRequest, params: QueryDict) -> str:
        context, _ = reservation_table(request, params)
        return render_to_string(
            f"{RESERVATIONS_TEMPLATE}#reservation-table", context, request=request
        )

    return Home(reverse("dashboard:reservations"), "reservation-table", draw)


def _cluster_home(cluster: Cluster) -> Home:
    def draw(request: HtmxHttpRequest, params: QueryDict) -> str:
        body = cluster_body(request.user, cluster_for_page(request, cluster.pk), params)
        # The body only: its plan loads apart (dashboard:cluster-plan), so a scale plans nothing.
        return render_to_string(
            "dashboard/cluster.html#cluster-body", body.context(), request=request
        )

    return Home(reverse("dashboard:cluster", args=[cluster.pk]), "cluster-body", draw)


def _nics_home() -> Home:
    def draw(request: HtmxHttpRequest, params: QueryDict) -> str:
        context, _ = nics_context(request, params, parts=frozenset([NIC_ACTIVITY]))
        return render_to_string(f"{NICS_TEMPLATE}#{NIC_ACTIVITY}", context, request=request)

    return Home(reverse("dashboard:nics"), NIC_ACTIVITY, draw)


def _confirmation_page(
    request: HtmxHttpRequest, context: dict[str, Any], *, status: int
) -> HttpResponse:
    template = "dashboard/confirm.html#confirm-form" if request.htmx else "dashboard/confirm.html"
    response = render(request, template, context, status=status)
    if request.htmx and status >= 400:
        # Into the panel that holds the form, not the fragment success would replace.
        retarget(response, f"#{PANEL}")
        reswap(response, "innerHTML")
    patch_vary_headers(response, ["HX-Request"])
    return response


REFUSALS_SHOWN = 5


def _refused(refused: list[str]) -> str:
    """What a bulk action's message says of the objects it refused, each with why: the
    first REFUSALS_SHOWN, then how many more."""
    if not refused:
        return ""
    more = f"; and {len(refused) - REFUSALS_SHOWN} more" if len(refused) > REFUSALS_SHOWN else ""
    return f" Refused {len(refused)}: " + "; ".join(refused[:REFUSALS_SHOWN]) + more


def _confirm_and_act(
    request: HtmxHttpRequest,
    *,
    obj: Any,
    perm: str | None,
    confirmation: Confirmation,
    home: Home,
    act: Callable[[dict[str, Any]], str],
    form_class: type[ReasonForm] = ReasonForm,
    initial: dict[str, Any] | None = None,
    action_url: str = "",
) -> HttpResponse:
    # Refused before the form is shown; the service checks again when it acts.
    if perm is not None:
        permission_require(request.user, perm, obj)
    asked = request.POST.get("next") if request.method == "POST" else request.GET.get("next")
    back = local_url(request, asked, home.url)
    form: ReasonForm
    if request.method == "POST":
        form = form_class(request.POST)
    else:
        form = form_class(initial={**(initial or {}), "next": back})
    context = {
        "form": form,
        "confirmation": confirmation,
        "action_url": action_url or request.path,
        "target": home.target,
        "back": back,
        "in_panel": bool(request.htmx),
    }
    if request.method != "POST":
        return _confirmation_page(request, context, status=200)
    if not form.is_valid():
        return _confirmation_page(request, context, status=400)
    try:
        message = act(form.cleaned_data)
    except (ReleaseRefused, VerifyRefused, ProtectedError) as exc:
        form.add_error(None, in_use_detail(exc) if isinstance(exc, ProtectedError) else str(exc))
        return _confirmation_page(request, context, status=409)
    except ValidationError as exc:
        form.add_error(None, exc)
        # A refusal because of what the rows hold now (a cluster being deleted) is 409.
        errors = getattr(exc, "error_dict", {None: getattr(exc, "error_list", [])})
        conflicting = any(e.code == "conflict" for found in errors.values() for e in found)
        return _confirmation_page(request, context, status=409 if conflicting else 400)
    except ValueError as exc:
        form.add_error(None, str(exc))
        return _confirmation_page(request, context, status=400)
    messages.success(request, message)
    if not request.htmx:
        response: HttpResponse = redirect(back)
        return response
    fragment = home.draw(request, query_of(back))
    after = render_to_string("dashboard/_after_action.html", {}, request=request)
    return HttpResponse(fragment + after)


@require_http_methods(["GET", "POST"])
def reservation_release(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    reservation = get_object_or_404(
        visible(request.user, VgpuReservation.objects.select_related("location", "listed")), pk=pk
    )

    def act(data: dict[str, Any]) -> str:
        reservation_release_request(
            reservation=reservation, actor=request.user, reason=data["reason"]
        )
        send_on_commit(reservation_release_task, reservation.pk)
        return (
            f"Release of {reservation.name} asked for: a worker carries it out, and its "
            "outcome lands in the audit log."
        )

    return _confirm_and_act(
        request,
        obj=reservation,
        perm="gpus.release_vgpureservation",
        confirmation=Confirmation(
            title="Release vGPU reservation",
            object_label=f"{reservation.name} in {reservation.location.name}",
            consequence="Detached and released for good: whitesky stops billing it, and "
            "whatever used it loses it. A VM of ours that no machine owns and that holds it "
            "is removed first.",
            button="Release",
        ),
        home=_reservations_home(),
        act=act,
    )


@require_http_methods(["GET", "POST"])
def node_verify(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    node = get_object_or_404(
        visible(request.user, KubeNode.objects.select_related("cluster")), pk=pk
    )

    def act(data: dict[str, Any]) -> str:
        gpu_verify_request(node=node, actor=request.user, reason=data["reason"])
        return (
            f"Verification of {node.name}'s GPUs asked for: a Job runs on it within a pass or "
            "two, and its verdict shows here."
        )

    return _confirm_and_act(
        request,
        obj=node,
        perm="kube.verify_kubenode",
        confirmation=Confirmation(
            title="Verify the node's GPUs again",
            object_label=f"node {node.name} of cluster {node.cluster.name}",
            consequence="A Job pinned to the node holds all its GPUs while nvidia-smi runs "
            "(seconds, at most GPU_VERIFY_TIMEOUT_SECONDS): a pod that asks for them then waits.",
            button="Verify",
        ),
        home=_cluster_home(node.cluster),
        act=act,
    )


def _overview_home() -> Home:
    def draw(request: HtmxHttpRequest, params: QueryDict) -> str:
        return render_to_string(
            "dashboard/overview.html#overview", overview_context(request), request=request
        )

    return Home(reverse("dashboard:overview"), "overview", draw)


@require_http_methods(["GET", "POST"])
def vm_remove(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    vm = get_object_or_404(
        visible(request.user, VirtualMachine.objects.select_related("location")), pk=pk
    )

    def act(data: dict[str, Any]) -> str:
        vm_removal_request(vm=vm, actor=request.user, reason=data["reason"])
        send_on_commit(orphan_sweep_location, vm.location_id)
        return (
            f"Removal of VM {vm.name} asked for: the next sweep of {vm.location.name} "
            "carries it out, and its outcome lands in the audit log."
        )

    # Made outside the control plane: only an admin removes it (the service checks too).
    foreign = vms_not_ours(VirtualMachine.objects.filter(pk=vm.pk)).exists()
    confirmation = Confirmation(
        title="Remove VM that no machine owns",
        object_label=f"{vm.name} ({vm.vm_id}) in {vm.location.name}",
        consequence="Stopped and deleted for good, its vGPUs detached (they stay billed "
        "until released: release them too). Refused if a machine owns it by then.",
        button="Remove",
    )
    if foreign:
        confirmation = replace(
            confirmation,
            title="Remove VM not named by us",
            consequence="The control plane did not make this VM: it may be someone's "
            "bastion or workload. Stopped and deleted for good, its vGPUs detached. Refused "
            "if it changed since the last complete listing, or changes before the removal "
            "runs.",
        )
    return _confirm_and_act(
        request,
        obj=vm,
        perm="cloud.remove_foreign_virtualmachine" if foreign else "cloud.remove_virtualmachine",
        confirmation=confirmation,
        home=_overview_home(),
        act=act,
    )


BULK_NAMES_SHOWN = 20


@require_http_methods(["GET", "POST"])
def orphans_release(request: HtmxHttpRequest, location_id: int | None = None) -> HttpResponse:
    """Every orphan the user may release (of one location, given its id; or those selected
    on a list, `?reservation=<id>&vm=<id>...`): VMs removed first, then the vGPU
    reservations, with one reason; each asked for and audited on its own."""
    user = request.user
    try:
        picked = {
            kind: {int(value) for value in request.GET.getlist(kind)}
            for kind in ("reservation", "vm")
        }
    except ValueError:
        return HttpResponse(
            "reservation and vm take ids: whole numbers", status=400, content_type="text/plain"
        )
    reservations = scoped(
        orphans_list().filter(vgpu_id__isnull=False),
        accounts_where(user, "gpus.release_vgpureservation"),
    )
    vms = scoped(
        VirtualMachine.objects.filter(orphaned_since__isnull=False).select_related(
            "location__account"
        ),
        accounts_where(user, "cloud.remove_virtualmachine"),
    )
    if location_id is not None:
        reservations = reservations.filter(location_id=location_id)
        vms = vms.filter(location_id=location_id)
    if picked["reservation"] or picked["vm"]:
        # Only those selected, and of them only what is an orphan the user may release.
        reservations = reservations.filter(pk__in=picked["reservation"])
        vms = vms.filter(pk__in=picked["vm"])
    rows, orphan_vm_rows = list(reservations), list(vms.order_by("orphaned_since", "pk"))
    if (
        not rows
        and not orphan_vm_rows
        and not (
            allowed_somewhere(user, "gpus.release_vgpureservation")
            or allowed_somewhere(user, "cloud.remove_virtualmachine")
        )
    ):
        raise PermissionDenied("You may not release orphans in any account.")
    names = [f"VM {vm.name}" for vm in orphan_vm_rows] + [row.name for row in rows]
    listed = ", ".join(names[:BULK_NAMES_SHOWN])
    if len(names) > BULK_NAMES_SHOWN:
        listed += f" and {len(names) - BULK_NAMES_SHOWN} more"

    def act(data: dict[str, Any]) -> str:
        if not names:
            raise ValueError("There is no orphan to release.")
        outcome = orphans_release_request(
            actor=user, reason=data["reason"], reservations=rows, vms=orphan_vm_rows
        )
        for location_id in sorted(outcome.locations):
            send_on_commit(orphan_sweep_location, location_id)
        message = f"Release asked for {len(outcome.asked)} orphans: the next sweep carries it out."
        return message + _refused(outcome.refused)

    return _confirm_and_act(
        request,
        obj=None,
        perm=None,
        confirmation=Confirmation(
            title="Release orphans",
            object_label=f"{len(orphan_vm_rows)} VMs and {len(rows)} vGPU reservations "
            f"that no machine owns: {listed or 'none'}",
            consequence="Each VM is stopped and deleted for good, then each vGPU released: "
            "whitesky stops billing them. Each release is audited with the reason below; one "
            "that a machine owns by then is refused and the others still go.",
            button="Release selected" if picked["reservation"] or picked["vm"] else "Release all",
        ),
        home=_overview_home(),
        act=act,
        action_url=request.get_full_path(),
    )


@require_http_methods(["GET", "POST"])
def pool_scale(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    pool = get_object_or_404(
        visible(request.user, MachinePool.objects.select_related("cluster")), pk=pk
    )

    def act(data: dict[str, Any]) -> str:
        before = pool.replicas
        services.pool_scale(
            pool=pool, replicas=data["replicas"], actor=request.user, reason=data["reason"]
        )
        return f"Pool {pool} scaled from {before} to {data['replicas']} replicas."

    return _confirm_and_act(
        request,
        obj=pool,
        perm="clusters.scale_machinepool",
        confirmation=Confirmation(
            title="Scale machine pool",
            object_label=f"{pool} ({pool.replicas} replicas now)",
            consequence="The next reconcile makes the machines missing, or tears the surplus "
            "down: their VMs deleted, their vGPUs released.",
            button="Scale",
            danger=False,
        ),
        home=_cluster_home(pool.cluster),
        act=act,
        form_class=ScaleForm,
        initial={"replicas": pool.replicas},
    )


@require_http_methods(["GET", "POST"])
def pools_scale(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The pools of a cluster selected on its page (`?pool=<id>&pool=<id>...`) set to one
    size with one reason: each scaled, checked and audited on its own; one refused (say
    autoscaled) is reported, and the others still go."""
    cluster = get_object_or_404(visible(request.user, Cluster.objects.all()), pk=pk)
    try:
        picked = {int(value) for value in request.GET.getlist("pool")}
    except ValueError:
        return HttpResponse("pool takes ids: whole numbers", status=400, content_type="text/plain")
    if not allowed_somewhere(request.user, "clusters.scale_machinepool"):
        raise PermissionDenied("You may not scale pools in any account.")
    pools = list(
        visible(request.user, MachinePool.objects.filter(cluster=cluster, pk__in=picked))
        .select_related("cluster")
        .order_by("name")
    )
    listed = ", ".join(f"{pool.name} ({pool.replicas})" for pool in pools)

    def act(data: dict[str, Any]) -> str:
        if not pools:
            raise ValueError("Select the pools to scale.")
        outcome = services.pools_scale(
            pools=pools, replicas=data["replicas"], actor=request.user, reason=data["reason"]
        )
        message = f"Scaled {len(outcome.scaled)} pools to {data['replicas']} replicas"
        message += f": {', '.join(outcome.scaled)}." if outcome.scaled else "."
        return message + _refused(outcome.refused)

    return _confirm_and_act(
        request,
        obj=None,
        perm=None,
        confirmation=Confirmation(
            title="Scale the selected pools",
            object_label=f"{len(pools)} pools of {cluster.name} (replicas now): {listed or 'none'}",
            consequence="Each pool is set to the replicas below and audited on its own with "
            "the reason; one that is refused (autoscaled, imported, not yours to scale) is "
            "reported and the others still go. The next reconcile makes the machines "
            "missing, or tears the surplus down.",
            button="Scale selected",
            danger=False,
        ),
        home=_cluster_home(cluster),
        act=act,
        form_class=ScaleForm,
        action_url=request.get_full_path(),
    )


def _machine(request: HtmxHttpRequest, pk: int) -> Machine:
    return get_object_or_404(
        visible(request.user, Machine.objects.select_related("pool__cluster")), pk=pk
    )


@require_http_methods(["GET", "POST"])
def machine_delete(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    machine = _machine(request, pk)

    def act(data: dict[str, Any]) -> str:
        services.machine_delete(machine=machine, actor=request.user, reason=data["reason"])
        return f"Machine {machine} is being torn down; pool {machine.pool.name} makes another."

    return _confirm_and_act(
        request,
        obj=machine,
        perm="clusters.delete_machine",
        confirmation=Confirmation(
            title="Delete machine",
            object_label=str(machine),
            consequence="Torn down: its VM stopped and deleted, its vGPUs released. The pool "
            "keeps its replicas and makes a new machine in its place; scale the pool down "
            "for fewer machines.",
            button="Delete",
        ),
        home=_cluster_home(machine.pool.cluster),
        act=act,
    )


@require_http_methods(["GET", "POST"])
def machine_force_delete(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    machine = _machine(request, pk)
    cluster = machine.pool.cluster

    def act(data: dict[str, Any]) -> str:
        name = str(machine)
        services.machine_force_delete(
            machine=machine, actor=request.user, reason=data["reason"], confirm=data["confirm"]
        )
        return f"Machine {name} dropped without teardown; its VM and vGPUs are now orphans."

    return _confirm_and_act(
        request,
        obj=machine,
        perm="clusters.force_delete_machine",
        confirmation=Confirmation(
            title="Force delete machine",
            object_label=str(machine),
            consequence="Dropped at once, without teardown: its VM and vGPUs stay behind, "
            "billed, as orphans, until the orphan sweep or the cluster's deletion reclaims "
            "them by name. Use it when the teardown cannot finish.",
            button="Force delete",
        ),
        home=_cluster_home(cluster),
        act=act,
        form_class=confirm_name_form(machine.name),
    )


@require_http_methods(["GET", "POST"])
def cluster_delete(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    cluster = get_object_or_404(visible(request.user, Cluster.objects.all()), pk=pk)

    def act(data: dict[str, Any]) -> str:
        services.cluster_delete(
            cluster=cluster, actor=request.user, reason=data["reason"], confirm=data["confirm"]
        )
        return (
            f"Cluster {cluster.name} is being deleted: its machines are torn down and every "
            "vGPU and VM named for it released."
        )

    return _confirm_and_act(
        request,
        obj=cluster,
        perm="clusters.delete_cluster",
        confirmation=Confirmation(
            title="Delete cluster",
            object_label=cluster.name,
            consequence="Every machine is torn down (VMs deleted, vGPUs released), then every "
            "VM and vGPU named for the cluster in its account; the cluster stays "
            "'deleting' until none is listed. This cannot be undone.",
            button="Delete cluster",
        ),
        home=_cluster_home(cluster),
        act=act,
        form_class=confirm_name_form(cluster.name),
    )


@require_http_methods(["GET", "POST"])
def leaked_nic_detach(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    nic = get_object_or_404(
        visible(request.user, LeakedNic.objects.select_related("cluster", "location")), pk=pk
    )

    def act(data: dict[str, Any]) -> str:
        leaked_nic_detach_request(nic=nic, actor=request.user, reason=data["reason"])
        return (
            f"Detach of NIC {nic.mac} asked for: the next reclaim pass of {nic.cluster.name} "
            "detaches it with the cluster's SR-IOV credential."
        )

    return _confirm_and_act(
        request,
        obj=nic,
        perm="sriov.detach_leakednic",
        confirmation=Confirmation(
            title="Detach leaked NIC",
            object_label=f"{nic.mac} ({nic.ip or 'no address'}) on VM {nic.vm_id} of "
            f"{nic.cluster.name} in {nic.location.name}",
            consequence="Detached from its VM by the next reclaim pass, and its address goes "
            "back to the external network. Whatever still uses the NIC on that VM loses it.",
            button="Detach",
        ),
        home=_nics_home(),
        act=act,
    )


@require_http_methods(["GET"])
def dismiss(request: HtmxHttpRequest) -> HttpResponse | HttpResponseRedirect:
    """Cancel: an empty action panel (htmx), or back to the page (no JavaScript)."""
    if request.htmx:
        return HttpResponse("")
    return redirect(local_url(request, request.GET.get("next"), reverse("dashboard:overview")))
