"""Clusters: the list with what each holds, and one cluster with its sites, pools (how
their GPU type resolves), machines with their VMs and GPUs, its plan (drift), and its
Kubernetes: how well it was observed, the GPU add-on, its nodes and what the mirror
flagged; and its SR-IOV: enabled or not, its pods' NICs per state."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.paginator import Paginator
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from capvco_web.htmx import HtmxHttpRequest, page_or_fragment
from capvco_web.keyset import AFTER, BEFORE, LAST, BadCursor, Sort, keyset_page
from capvco_web.permissions import allowed, visible
from cloud.models import Cloudspace, Image, VirtualMachine
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from clusters.plan import cluster_plan
from dashboard.filtersets import ClusterListFilterSet, filled, list_page, unknown_parameters
from dashboard.forms import NodeFilterForm
from dashboard.money import cluster_money
from dashboard.selectors import PoolGpus, held_by_machine, kube_observation, node_rows, pool_gpus
from dashboard.views.money import cluster_locations
from dashboard.views.setup import accounts_for_new_clusters
from gpus.models import BILLED_STATES, GpuProfile, VgpuReservation
from kube.models import KubeNode, KubePod
from kube.plan import kube_plan
from kube.selectors import (
    clusters_with_kube_summary,
    kube_nodes_with_requests,
    kube_observation_problem,
)
from sriov.models import PodNic, SriovConfig

CLUSTERS_PER_PAGE = 50
MACHINES_PER_PAGE = 50
NODES_PER_PAGE = 50
NODES_BY_NAME = Sort("name", False, "name")
# The node table pages by keyset with params of its own, beside the machines' page number.
NODE_CURSOR_PARAMS = {"nodes_after": AFTER, "nodes_before": BEFORE, "nodes_last": LAST}
Phase = Machine.Phase
# The cluster's machines in a phase and pod NICs in a state, read with it (cluster_for_page).
PHASE_IN, NICS_IN = "machines_in_", "nics_in_"


@dataclass
class ClusterSummary:
    cluster: Cluster
    locations: list[str]
    pools: int
    machines: int
    phases: dict[str, int]
    gpus: int
    kube_problem: str = ""
    """What is wrong with its Kubernetes observation ("": nothing)."""

    @property
    def failed(self) -> int:
        return self.phases.get(Phase.FAILED, 0)

    @property
    def kube_flags(self) -> int:
        """Flags the Kubernetes mirror raised in the cluster (see its page)."""
        c: Any = self.cluster
        return int(
            c.summary_machines_node_missing + c.summary_nodes_gpus_missing + c.summary_nodes_unowned
        )


@require_GET
@list_page(ClusterListFilterSet)
def cluster_list(request: HtmxHttpRequest) -> HttpResponse:
    clusters = clusters_with_kube_summary(
        visible(
            request.user,
            Cluster.objects.select_related("account", "kube_observation").order_by("name"),
        )
    )
    filterset = ClusterListFilterSet(filled(request.GET), queryset=clusters, request=request)
    errors = unknown_parameters(request.GET, [*filterset.filters, "page"])
    if not errors and not filterset.is_valid():
        errors = [f"{f}: {m}" for f, messages in filterset.form.errors.items() for m in messages]
    if errors:
        refused: dict[str, Any] = {"errors": errors, "page_url": request.get_full_path()}
        return page_or_fragment(
            request, "dashboard/clusters.html", refused, fragments=["cluster-table"], status=400
        )
    failed_only = filterset.form.cleaned_data.get("failed") is True
    page = Paginator(filterset.qs, CLUSTERS_PER_PAGE).get_page(request.GET.get("page"))
    ids = [c.pk for c in page]
    phases: dict[int, dict[str, int]] = defaultdict(dict)
    for cluster_id, phase, n in (
        visible(request.user, Machine.objects.filter(pool__cluster__in=ids))
        .values_list("pool__cluster_id", "phase")
        .annotate(n=Count("pk"))
        .values_list("pool__cluster_id", "phase", "n")
        .order_by()
    ):
        phases[cluster_id][phase] = n
    pools = dict(
        visible(request.user, MachinePool.objects.filter(cluster__in=ids))
        .values_list("cluster_id")
        .annotate(n=Count("pk"))
        .values_list("cluster_id", "n")
        .order_by()
    )
    gpus = dict(
        visible(
            request.user,
            VgpuReservation.objects.filter(machine__pool__cluster__in=ids, state__in=BILLED_STATES),
        )
        .values_list("machine__pool__cluster_id")
        .annotate(n=Count("pk"))
        .values_list("machine__pool__cluster_id", "n")
        .order_by()
    )
    locations: dict[int, list[str]] = defaultdict(list)
    for cluster_id, location in (
        visible(request.user, ClusterSite.objects.filter(cluster__in=ids))
        .order_by("location__name")
        .values_list("cluster_id", "location__name")
    ):
        locations[cluster_id].append(location)
    now, interval = timezone.now(), settings.OBSERVE_INTERVAL
    context = {
        "page": page,
        "failed_only": failed_only,
        "summaries": [
            ClusterSummary(
                cluster=c,
                locations=locations[c.pk],
                pools=pools.get(c.pk, 0),
                machines=sum(phases[c.pk].values()),
                phases=phases[c.pk],
                gpus=gpus.get(c.pk, 0),
                kube_problem=kube_observation_problem(c, now=now, interval=interval),
            )
            for c in page
        ],
        "page_url": request.get_full_path(),
        "can_add": not request.htmx and accounts_for_new_clusters(request).exists(),
    }
    return page_or_fragment(
        request, "dashboard/clusters.html", context, fragments=["cluster-table"]
    )


@dataclass
class PoolRow:
    pool: MachinePool
    gpus: PoolGpus | None
    can_scale: bool
    can_edit: bool = False


@dataclass
class MachineRow:
    machine: Machine
    vm: VirtualMachine | None
    gpus: list[VgpuReservation]
    delete_url: str  # empty: not offered
    force_delete_url: str


def cluster_body(request: HtmxHttpRequest, cluster: Cluster, params: QueryDict) -> dict[str, Any]:
    """What the cluster page shows below its title, as `params` (its query) asks."""
    sites = list(
        sites_with_names(visible(request.user, ClusterSite.objects.filter(cluster=cluster)))
        .select_related("location")
        .order_by("location__name")
    )
    cards = list(
        visible(
            request.user, GpuProfile.objects.filter(location__in=[s.location_id for s in sites])
        )
    )
    pools = list(
        visible(request.user, MachinePool.objects.filter(cluster=cluster))
        .select_related("site__location")
        .order_by("name")
    )
    machines = visible(request.user, Machine.objects.filter(pool__cluster=cluster)).order_by(
        "pool__name", "index"
    )
    phases = {p: n for p in Phase.values if (n := getattr(cluster, f"{PHASE_IN}{p}"))}
    paginator = Paginator(
        machines.select_related("pool", "deletion", "node_state"), MACHINES_PER_PAGE
    )
    paginator.count = sum(phases.values())  # known from the phases: no count query
    page = paginator.get_page(params.get("page"))
    on_page = list(page)
    pools_by_id = {p.pk: p for p in pools}
    for machine in on_page:
        # The page's pools are the machines' pools: no query per machine for its names.
        pool = pools_by_id.get(machine.pool_id, machine.pool)
        pool.cluster = cluster
        machine.pool = pool
    held = held_by_machine(visible(request.user, VgpuReservation.objects.all()), on_page)
    vms = {
        (vm.location_id, vm.vm_id): vm
        for vm in visible(
            request.user,
            VirtualMachine.objects.filter(
                location__in=[s.location_id for s in sites],
                vm_id__in=[m.vm_id for m in on_page if m.vm_id is not None],
            ),
        )
    }
    plan = cluster_plan(cluster, planners=(kube_plan,))
    cluster_url = reverse("dashboard:cluster", args=[cluster.pk])
    page_url = f"{cluster_url}?{params.urlencode()}" if params else cluster_url
    back = "?" + urlencode({"next": page_url})
    nodes_url = reverse("dashboard:nodes") + "?" + urlencode({"cluster": cluster.pk})

    def offered(may_do: bool, name: str, pk: int) -> str:
        return reverse(name, args=[pk]) + back if may_do else ""

    return {
        "cluster": cluster,
        "sites": sites,
        "pools": [
            PoolRow(
                pool,
                pool_gpus(pool, cards),
                # Not while the cluster is deleted: pool_scale would refuse it (409).
                cluster.deleting_refusal() is None
                and allowed(request.user, "clusters.scale_machinepool", pool),
                can_edit=not pool.imported_from
                and cluster.deleting_refusal() is None
                and allowed(request.user, "clusters.change_machinepool", pool),
            )
            for pool in pools
        ],
        "machines": [
            MachineRow(
                machine=m,
                vm=vms.get((m.pool.site.location_id, m.vm_id)) if m.vm_id is not None else None,
                gpus=held.get(m.pk, []),
                delete_url=offered(
                    not m.deletion_asked and allowed(request.user, "clusters.delete_machine", m),
                    "dashboard:machine-delete",
                    m.pk,
                ),
                force_delete_url=offered(
                    allowed(request.user, "clusters.force_delete_machine", m),
                    "dashboard:machine-force-delete",
                    m.pk,
                ),
            )
            for m in on_page
        ],
        "machine_page": page,
        "phases": phases,
        "plan": plan,
        "can_set_kubeconfig": allowed(request.user, "clusters.change_cluster", cluster),
        "can_delete_cluster": cluster.state == Cluster.State.ACTIVE
        and allowed(request.user, "clusters.delete_cluster", cluster),
        "page_url": page_url,
        "back": back,
        "reservations_url": reverse("dashboard:reservations"),
        "kube": kube_observation(cluster, now=timezone.now(), interval=settings.OBSERVE_INTERVAL),
        "nodes_url": nodes_url,
        "flag_urls": {  # by names a template can look up
            flag.replace("-", "_"): f"{nodes_url}&{urlencode({'flag': flag})}"
            for flag in NodeFilterForm.FLAGS
        },
        **_node_section(request, cluster, params, cluster_url),
        **_sriov_section(cluster),
    }


def sites_with_names(sites: QuerySet[ClusterSite]) -> QuerySet[ClusterSite]:
    """The sites with the names of their cloudspace and image as last mirrored ("" when
    not mirrored), read with them: no query apart."""
    same_location = {"location": OuterRef("location")}
    return sites.annotate(
        cloudspace_name=Subquery(
            Cloudspace.objects.filter(
                **same_location, cloudspace_id=OuterRef("cloudspace_id")
            ).values("name")[:1]
        ),
        image_name=Subquery(
            Image.objects.filter(**same_location, image_id=OuterRef("image_id")).values("name")[:1]
        ),
    )


def _sriov_section(cluster: Cluster) -> dict[str, Any]:
    """Whether the cluster's pods get NICs, and its pod NICs per state (all states, in
    their order, so a zero shows)."""
    # Read with the cluster (cluster_for_page): its account's roles see all or none.
    config: SriovConfig | None = getattr(cluster, "sriov", None)
    found = {state: getattr(cluster, f"{NICS_IN}{state}") for state in PodNic.State.values}
    nics_url = reverse("dashboard:nics") + "?" + urlencode({"cluster": cluster.pk})
    return {
        "sriov": config,
        "sriov_states": [
            (state, found.get(state, 0), f"{nics_url}&{urlencode({'state': state})}")
            for state in PodNic.State.values
        ],
        "nics_url": nics_url,
    }


def _node_section(
    request: HtmxHttpRequest, cluster: Cluster, params: QueryDict, cluster_url: str
) -> dict[str, Any]:
    """A page of the cluster's nodes, by name, and the links to the pages beside it. The
    count is the cluster's summary when it has one: no query for it, none at all for a
    cluster without nodes."""
    known = getattr(cluster, "summary_nodes", None)
    asked = QueryDict(mutable=True)
    for ours, cursor in NODE_CURSOR_PARAMS.items():
        if value := params.get(ours):
            asked[cursor] = value
    found: dict[str, Any] = {"node_rows": [], "node_page": None, "node_error": "", "node_links": {}}
    if known == 0:
        return found
    nodes = kube_nodes_with_requests(
        visible(request.user, KubeNode.objects.filter(cluster=cluster).select_related("machine"))
    )
    try:
        page = keyset_page(
            nodes, sort=NODES_BY_NAME, params=asked, size=NODES_PER_PAGE, count=known
        )
    except BadCursor as exc:
        found["node_error"] = str(exc)
        page = keyset_page(
            nodes, sort=NODES_BY_NAME, params=QueryDict(), size=NODES_PER_PAGE, count=known
        )
    pods = visible(request.user, KubePod.objects.filter(cluster=cluster))

    def link(**cursor: str) -> str:
        query = params.copy()
        for name in NODE_CURSOR_PARAMS:
            query.pop(name, None)
        query.update(cursor)
        return f"{cluster_url}?{query.urlencode()}#nodes" if query else f"{cluster_url}#nodes"

    found["node_page"] = page
    found["node_rows"] = node_rows(page.rows, pods)
    if page.has_previous:
        found["node_links"]["first"] = link()
        found["node_links"]["previous"] = link(nodes_before=page.previous_cursor)
    if page.has_next:
        found["node_links"]["next"] = link(nodes_after=page.next_cursor)
        found["node_links"]["last"] = link(nodes_last="1")
    return found


def cluster_for_page(request: HtmxHttpRequest, pk: int) -> Cluster:
    """The cluster as its page shows it, with its Kubernetes summary, its machines per
    phase and its pod NICs per state; 404 when the user does not see it."""
    # Every role that sees a cluster sees its machines and pod NICs (the `view` roles).
    machines = Machine.objects.filter(pool__cluster=OuterRef("pk"))
    nics = PodNic.objects.filter(cluster=OuterRef("pk"))
    return get_object_or_404(
        clusters_with_kube_summary(
            visible(
                request.user,
                Cluster.objects.select_related(
                    "account", "sriov", "status", "kube_observation", "gpu_addon_state"
                ),
            )
        ).annotate(
            **_counts(machines, "pool__cluster", "phase", PHASE_IN, Phase.values),
            **_counts(nics, "cluster", "state", NICS_IN, PodNic.State.values),
        ),
        pk=pk,
    )


def _counts(
    rows: QuerySet[Any], group: str, field: str, prefix: str, values: list[str]
) -> dict[str, Coalesce]:
    """`<prefix><value>`: how many of the outer cluster's rows (grouped by `group`) have
    `field` = value, as subqueries of the cluster's row: read with it, no query apart."""
    grouped = rows.order_by().values(group)
    return {
        f"{prefix}{value}": Coalesce(
            Subquery(grouped.filter(**{field: value}).annotate(n=Count("pk")).values("n")), 0
        )
        for value in values
    }


@require_GET
def cluster_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    cluster = cluster_for_page(request, pk)
    context = cluster_body(request, cluster, request.GET)
    if not request.htmx:
        # Money moves by the hour: drawn with the page, not with each refresh of its body.
        money = cluster_money(
            cluster=cluster, locations=cluster_locations(request, cluster), now=timezone.now()
        )
        for chart in money.charts:
            chart.csv_url = reverse("dashboard:cluster-money-csv", args=[cluster.pk, chart.key])
        context["money"] = money
    return page_or_fragment(request, "dashboard/cluster.html", context, fragments=["cluster-body"])
