"""The overview: money over time (month to date and forecast, leaks, charts), GPU capacity
per location and type (whitesky's and Kubernetes'), money billed for nothing, what the
Kubernetes mirror flagged, the clusters whose Kubernetes observation fails, how fresh each
location's observation is, failed machines, and the system's own health."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from capvco_web.health import readiness
from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.permissions import allowed_somewhere, visible
from cloud.models import Location, VirtualMachine
from cloud.selectors import observations
from clusters.capacity import capacity_board
from clusters.models import Cluster, Machine
from dashboard.selectors import (
    foreign_vms,
    kube_flags,
    money_wasted,
    orphan_vms,
)
from dashboard.views.money import money_section, overview_reader
from gpus.models import GpuProfile, VgpuReservation
from kube.gpu_use import gpu_use_of_clusters
from kube.models import KubeNode
from kube.selectors import (
    kube_gpus_by_location_and_type,
    kube_observation_failing,
    kube_observation_problem,
)

FAILED_SHOWN = 20
ORPHAN_VMS_SHOWN = 20
FOREIGN_VMS_SHOWN = 20
KUBE_FAILING_SHOWN = 20
GPU_USE_SHOWN = 20
TEMPLATE = "dashboard/overview.html"


def _system_status() -> dict[str, object]:
    """Readiness as /readyz has it: the template shows each check's detail to staff only."""
    checks = readiness()
    return {"checks": checks, "ready": all(result.ok for result in checks.values())}


@require_GET
def overview(request: HtmxHttpRequest) -> HttpResponse:
    if request.htmx and request.htmx.target != "overview":
        return page_or_fragment(request, TEMPLATE, _system_status(), fragments=["system-status"])
    context = overview_context(request)
    status = 200
    if not request.htmx:
        context.update(_system_status())
        # Money moves by the hour: drawn with the page, not with each refresh of its panels.
        money, status = money_section(
            request,
            overview_reader(request),
            csv_url=lambda key: reverse("dashboard:money-csv", args=[key]),
            api_query={"group_by": "cluster"},
            now=context["now"],  # type: ignore[arg-type]
        )
        context.update(money)
    return page_or_fragment(request, TEMPLATE, context, fragments=["overview"], status=status)


def overview_context(request: HtmxHttpRequest) -> dict[str, object]:
    """The overview's figures as the user may see them (its page, and what an action
    taken from it draws again)."""
    now = timezone.now()
    locations = list(visible(request.user, Location.objects.order_by("name", "pk")))
    reservations = visible(request.user, VgpuReservation.objects.all())
    machines = visible(request.user, Machine.objects.all())
    failed = machines.filter(phase=Machine.Phase.FAILED)
    nodes = visible(request.user, KubeNode.objects.all())
    interval = settings.OBSERVE_INTERVAL
    clusters = visible(request.user, Cluster.objects.all())
    kube_failing = kube_observation_failing(clusters, now=now, interval=interval)
    vms = visible(request.user, VirtualMachine.objects.all())
    context: dict[str, object] = {
        "now": now,
        "gpu_use_window": f"{settings.GPU_USE_WINDOW_HOURS:g}",
        "board": capacity_board(
            cards=visible(request.user, GpuProfile.objects.all()),
            reservations=reservations,
            # What pods request is on each cluster's page: summed here it would cost a
            # look-up per node.
            kube=kube_gpus_by_location_and_type(nodes, requested=False),
            locations=locations,
        ),
        "kube_flags": kube_flags(nodes=nodes, machines=machines),
        "kube_failing": [
            (cluster, kube_observation_problem(cluster, now=now, interval=interval))
            for cluster in kube_failing.select_related("account").order_by("name", "pk")[
                :KUBE_FAILING_SHOWN
            ]
        ],
        "kube_failing_count": kube_failing.count(),
        "gpu_use": list(gpu_use_of_clusters(clusters)[:GPU_USE_SHOWN]),
        "waste": money_wasted(reservations=reservations, locations=locations, now=now),
        "orphan_vms": orphan_vms(vms=vms, locations=locations, now=now, shown=ORPHAN_VMS_SHOWN),
        "foreign_vms": foreign_vms(vms=vms, locations=locations, now=now, shown=FOREIGN_VMS_SHOWN),
        "may_remove_foreign_vms": allowed_somewhere(
            request.user, "cloud.remove_foreign_virtualmachine"
        ),
        "observations": observations(locations=locations, now=now, interval=interval),
        "failed": list(
            failed.select_related("pool__cluster").order_by("-updated_at")[:FAILED_SHOWN]
        ),
        "failed_count": failed.count(),
        "may_release_orphans": allowed_somewhere(request.user, "gpus.release_vgpureservation")
        or allowed_somewhere(request.user, "cloud.remove_virtualmachine"),
    }
    return context
