"""One location: a map of each physical card (a GPU profile) with its instances, which
vGPU sits on which machine, VM and pod; the location's plan, the orphan sweep's steps it
would carry out next (`clusters.releases.location_plan`, read only); what its GPUs do (the
GPU nodes whose machines are here, `kube.gpu_use.location_gpu_use`); and its money over
the window the page asks for (the overview's, of this location alone).

A fixed number of queries whatever the number of cards and vGPUs (the plan's own aside:
it reads what its steps need)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.permissions import visible
from cloud.models import Location, VirtualMachine
from clusters.models import Cluster, Machine
from clusters.releases import location_plan
from dashboard.views.money import location_reader, money_section
from gpus.models import GpuProfile, VgpuReservation
from gpus.resolve import gpu_type_of
from kube.gpu_use import location_gpu_use
from kube.models import KubeNode, KubePod
from kube.selectors import ACTIVE_POD_PHASES

TEMPLATE = "dashboard/location.html"
# What holds an instance of a card: being reserved, billed, or on its way out.
HOLDING = (
    VgpuReservation.State.RESERVING,
    VgpuReservation.State.RESERVED,
    VgpuReservation.State.ATTACHED,
    VgpuReservation.State.RELEASING,
)


@dataclass
class InstanceRow:
    """One vGPU on a card, and where it sits: what its row shows, read once here (a
    location's page has a row per vGPU it holds, hundreds)."""

    reservation: VgpuReservation
    vm: VirtualMachine | None
    machine: Machine | None
    node: str
    pods: list[KubePod]
    machine_url: str = ""  # its machine on its cluster's page
    machine_label: str = ""  # cluster/machine
    orphaned: bool = False


@dataclass
class CardRow:
    card: GpuProfile
    gpu_type: str
    instances: list[InstanceRow] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.card.available_instances + len(self.instances)

    @property
    def shares(self) -> list[Share]:
        """The card's allocation, as a bar: its instances held per cluster (then orphaned,
        then held by no machine of ours), and free; each with its share of the card."""
        held: Counter[tuple[int, str]] = Counter()
        for instance in self.instances:
            if instance.machine is not None:
                held[(0, f"cluster {instance.machine.pool.cluster.name}")] += 1
            elif instance.orphaned:
                held[(1, "orphaned")] += 1
            else:
                held[(2, "no machine")] += 1
        parts = [(label, n, kind) for (kind, label), n in sorted(held.items())]
        parts.append(("free", self.card.available_instances, 3))
        total = self.total or 1
        return [
            Share(label, n, round(100 * n / total, 1), ("held", "orphaned", "unowned", "free")[k])
            for label, n, k in parts
            if n
        ]


@dataclass(frozen=True)
class Share:
    label: str
    instances: int
    percent: float
    kind: str  # held, orphaned, unowned, free: the bar's colour


@require_GET
def location_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    location = get_object_or_404(
        visible(request.user, Location.objects.select_related("account")), pk=pk
    )
    cards = [
        CardRow(card, gpu_type_of(card))
        for card in GpuProfile.objects.filter(location=location).order_by("model", "profile_id")
    ]
    by_card = {row.card.profile_id: row for row in cards}
    held = list(
        VgpuReservation.objects.filter(location=location, state__in=HOLDING)
        .select_related("machine__pool__cluster", "listed")
        .order_by("name", "pk")
    )
    vms = {
        vm.vm_id: vm
        for vm in VirtualMachine.objects.filter(
            location=location, vm_id__in={row.vm_id for row in held if row.vm_id is not None}
        )
    }
    machine_ids = {row.machine_id for row in held if row.machine_id is not None}
    nodes = {
        machine_id: (cluster_id, name)
        for machine_id, cluster_id, name in KubeNode.objects.filter(
            machine__in=machine_ids
        ).values_list("machine_id", "cluster_id", "name")
    }
    pods: dict[tuple[int, str], list[KubePod]] = defaultdict(list)
    if nodes:
        for pod in KubePod.objects.filter(
            cluster__in={cluster for cluster, _ in nodes.values()},
            node_name__in={name for _, name in nodes.values()},
            phase__in=ACTIVE_POD_PHASES,
            gpu_requests__gt=0,
        ).order_by("namespace", "name", "pk"):
            pods[pod.cluster_id, pod.node_name].append(pod)
    unknown_card: list[InstanceRow] = []
    cluster_urls: dict[int, str] = {}
    for row in held:
        node = nodes.get(row.machine_id) if row.machine_id is not None else None
        instance = InstanceRow(
            reservation=row,
            vm=vms.get(row.vm_id) if row.vm_id is not None else None,
            machine=row.machine,
            node=node[1] if node else "",
            pods=pods.get(node, []) if node else [],
            orphaned=row.orphaned_since is not None,
        )
        if (machine := row.machine) is not None:
            cluster = machine.pool.cluster
            url = cluster_urls.get(cluster.pk)
            if url is None:
                url = cluster_urls[cluster.pk] = reverse("dashboard:cluster", args=[cluster.pk])
            instance.machine_url = f"{url}#machine-{machine.pk}"
            instance.machine_label = f"{cluster.name}/{machine.name}"
        card = by_card.get(row.gpu_id)
        (card.instances if card else unknown_card).append(instance)
    context: dict[str, Any] = {
        "location": location,
        "cards": cards,
        "unknown_card": unknown_card,
        "plan": location_plan(location, now=timezone.now()),
        "now": timezone.now(),
    }
    status = 200
    if not request.htmx:
        # Money moves by the hour: drawn with the page, not with each refresh of its body.
        money, status = money_section(
            request,
            location_reader(request, location),
            csv_url=lambda key: reverse("dashboard:location-money-csv", args=[location.pk, key]),
            api_query={"group_by": "cluster", "location": str(location.pk)},
        )
        context.update(money)
        # What its GPUs do moves with each read of the exporters: drawn with the page too.
        context.update(location_gpu_use_section(request, location))
    return page_or_fragment(request, TEMPLATE, context, fragments=["location-body"], status=status)


def location_gpu_use_section(request: HtmxHttpRequest, location: Location) -> dict[str, Any]:
    """Its GPU use, of the clusters the user sees (kube.gpu_use)."""
    clusters = visible(request.user, Cluster.objects.all())
    return {
        "location_gpu_use": location_gpu_use(location, clusters=clusters),
        "location_gpu_use_api": reverse("location-gpu-use", args=[location.pk]),
        "gpu_use_window": f"{settings.GPU_USE_WINDOW_HOURS:g}",
    }
