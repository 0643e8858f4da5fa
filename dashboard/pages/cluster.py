"""The cluster page below its title, as one value: its sites, pools (how their GPU type
resolves), machines with their VMs and GPUs, its Kubernetes and its SR-IOV. The plan is not
here: it is its own fragment (dashboard:cluster-plan), drawn with the full page and loaded
on its own after each redraw of the body."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import CharField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Cast
from django.http import QueryDict
from django.urls import reverse
from django.utils import timezone

from autoscale.models import GpuShortfall
from capvco_web.keyset import AFTER, BEFORE, LAST, BadCursor, Sort, keyset_page
from capvco_web.models import AuditEvent
from capvco_web.permissions import User, allowed, visible
from cloud.models import Cloudspace, Image, VirtualMachine
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from dashboard.forms import NodeFilterForm
from dashboard.lists import NODE_COLUMNS
from dashboard.selectors import (
    KubeObservation,
    PoolGpus,
    held_by_machine,
    kube_observation,
    node_rows,
    pool_gpus,
)
from gpus.models import GpuProfile, VgpuReservation
from kube.models import KubeNode, KubePod
from kube.selectors import kube_nodes_with_requests, verifications_latest
from sriov.models import PodNic, SriovConfig

MACHINES_PER_PAGE = 50
NODES_PER_PAGE = 50
NODES_BY_NAME = Sort("name", False, "name")
# The node table pages by keyset with params of its own, beside the machines' page number.
NODE_CURSOR_PARAMS = {"nodes_after": AFTER, "nodes_before": BEFORE, "nodes_last": LAST}
# The node list's columns, less the cluster: every one (no chooser here).
CLUSTER_NODE_COLUMNS = tuple(column for column in NODE_COLUMNS if column.key != "cluster")
Phase = Machine.Phase
# The cluster's machines in a phase and pod NICs in a state, read with it (cluster_for_page).
PHASE_IN, NICS_IN = "machines_in_", "nics_in_"


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


@dataclass(frozen=True)
class HistoryRow:
    event: AuditEvent
    changes: list[tuple[str, str, str]]
    """Each field the event changed: its name, before, after."""


HISTORY_SHOWN = 50
HISTORY_OF = "history"  # the page's parameter: `pool:<id>` or `machine:<id>`


@dataclass(frozen=True)
class History:
    rows: list[HistoryRow]
    of: str  # whose history it is: "" for the cluster's, "pool gpu", "machine gpu-0"
    scope: str  # what its events are of, in words
    problem: str  # why the history asked for is not shown ("": it is)


def cluster_history(user: User, cluster: Cluster, asked: str = "") -> History:
    """The changelog of the cluster, or of one of its pools (with its machines') or
    machines (`asked`: `pool:<id>`, `machine:<id>`): its audit events (a machine's changes
    of phase among them, `machine.phase`), newest first (HISTORY_SHOWN of them; the audit
    log has the rest), each with what it changed."""
    as_text = Cast("pk", output_field=CharField())
    pools = MachinePool.objects.filter(cluster=cluster)
    machines = Machine.objects.filter(pool__cluster=cluster)
    of, scope, problem = "", "the cluster, its pools and its machines", ""
    kind, _, key = asked.partition(":")
    if asked:
        model = {"pool": MachinePool, "machine": Machine}.get(kind)
        found = (
            (pools if model is MachinePool else machines).filter(pk=key).first()
            if model is not None and key.isdecimal() and len(key) <= 18  # a bigint's digits
            else None
        )
        if found is None:
            problem = (
                f"{HISTORY_OF}={asked!r} names no pool or machine of this cluster "
                f"(pool:<id> or machine:<id>): the cluster's history is shown."
            )
        elif isinstance(found, MachinePool):
            of = f"pool {found.name}"
            scope = f"{of} and its machines"
            pools, machines = pools.filter(pk=found.pk), machines.filter(pool=found)
        else:
            of = scope = f"machine {found.name}"
            pools, machines = pools.none(), machines.filter(pk=found.pk)
    whose = Q(
        object_type=MachinePool._meta.label, object_id__in=pools.annotate(key=as_text).values("key")
    ) | Q(
        object_type=Machine._meta.label,
        object_id__in=machines.annotate(key=as_text).values("key"),
    )
    if not of:
        whose |= Q(object_type=Cluster._meta.label, object_id=str(cluster.pk))
    events = (
        visible(user, AuditEvent.objects.all())
        .filter(whose)
        .order_by("-created_at", "-pk")[:HISTORY_SHOWN]
    )
    rows = [HistoryRow(event, _changes(event)) for event in events]
    return History(rows, of, scope, problem)


def _changes(event: AuditEvent) -> list[tuple[str, str, str]]:
    before, after = event.before or {}, event.after or {}
    return [
        (key, _shown(before.get(key)), _shown(after.get(key)))
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key)
    ]


def _shown(value: object) -> str:
    return "—" if value is None else str(value)


@dataclass
class ClusterBody:
    """What the cluster page shows below its title; its plan is a fragment of its own
    (`cluster_plan_section`), so that redrawing the body (a scale click, the poll) plans
    nothing."""

    cluster: Cluster
    sites: list[ClusterSite]
    pools: list[PoolRow]
    machines: list[MachineRow]
    machine_page: Page[Machine]
    phases: dict[str, int]
    can_set_kubeconfig: bool
    can_delete_cluster: bool
    page_url: str
    back: str
    plan_url: str
    reservations_url: str
    kube: KubeObservation
    nodes_url: str
    flag_urls: dict[str, str]
    nodes: dict[str, Any]
    sriov: dict[str, Any]
    shortfalls: list[GpuShortfall]
    """GPU pods no autoscaled pool can take now (read only where a pool autoscales)."""
    history: History
    """The newest audit events of the cluster, its pools and its machines."""

    @property
    def can_scale_several(self) -> bool:
        """Whether the selection's scale is offered: two pools or more may be scaled."""
        return sum(row.can_scale for row in self.pools) > 1

    def context(self) -> dict[str, Any]:
        """As the template reads it: each field by its name, the node and SR-IOV sections'
        names at the top."""
        context = {f.name: getattr(self, f.name) for f in fields(self)}
        context["can_scale_several"] = self.can_scale_several
        return {**context, **context.pop("nodes"), **context.pop("sriov")}


def cluster_body(user: User, cluster: Cluster, params: QueryDict) -> ClusterBody:
    """What the cluster page shows below its title, as `params` (its query) asks."""
    sites = list(
        sites_with_names(visible(user, ClusterSite.objects.filter(cluster=cluster)))
        .select_related("location")
        .order_by("location__name")
    )
    cards = list(
        visible(user, GpuProfile.objects.filter(location__in=[s.location_id for s in sites]))
    )
    pools = list(
        visible(user, MachinePool.objects.filter(cluster=cluster))
        .select_related("site__location", "target")
        .order_by("name")
    )
    machines = visible(user, Machine.objects.filter(pool__cluster=cluster)).order_by(
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
    held = held_by_machine(visible(user, VgpuReservation.objects.all()), on_page)
    vms = {
        (vm.location_id, vm.vm_id): vm
        for vm in visible(
            user,
            VirtualMachine.objects.filter(
                location__in=[s.location_id for s in sites],
                vm_id__in=[m.vm_id for m in on_page if m.vm_id is not None],
            ),
        )
    }
    cluster_url = reverse("dashboard:cluster", args=[cluster.pk])
    page_url = f"{cluster_url}?{params.urlencode()}" if params else cluster_url
    back = "?" + urlencode({"next": page_url})
    nodes_url = reverse("dashboard:nodes") + "?" + urlencode({"cluster": cluster.pk})

    def offered(may_do: bool, name: str, pk: int) -> str:
        return reverse(name, args=[pk]) + back if may_do else ""

    shortfalls = (
        list(GpuShortfall.objects.filter(cluster=cluster).order_by("gpu_type", "gpus"))
        if any(pool.autoscale_enabled for pool in pools)
        else []
    )
    return ClusterBody(
        cluster=cluster,
        sites=sites,
        pools=[
            PoolRow(
                pool,
                pool_gpus(pool, cards),
                # Not while the cluster is deleted: pool_scale would refuse it (409); nor
                # while the autoscaler decides the machines.
                cluster.deleting_refusal() is None
                and not pool.autoscale_enabled
                and allowed(user, "clusters.scale_machinepool", pool),
                can_edit=not pool.imported_from
                and cluster.deleting_refusal() is None
                and allowed(user, "clusters.change_machinepool", pool),
            )
            for pool in pools
        ],
        machines=[
            MachineRow(
                machine=m,
                vm=vms.get((m.pool.site.location_id, m.vm_id)) if m.vm_id is not None else None,
                gpus=held.get(m.pk, []),
                delete_url=offered(
                    not m.deletion_asked and allowed(user, "clusters.delete_machine", m),
                    "dashboard:machine-delete",
                    m.pk,
                ),
                force_delete_url=offered(
                    allowed(user, "clusters.force_delete_machine", m),
                    "dashboard:machine-force-delete",
                    m.pk,
                ),
            )
            for m in on_page
        ],
        machine_page=page,
        phases=phases,
        can_set_kubeconfig=allowed(user, "clusters.change_cluster", cluster),
        can_delete_cluster=cluster.state == Cluster.State.ACTIVE
        and allowed(user, "clusters.delete_cluster", cluster),
        page_url=page_url,
        back=back,
        reservations_url=reverse("dashboard:reservations"),
        kube=kube_observation(cluster, now=timezone.now(), interval=settings.OBSERVE_INTERVAL),
        nodes_url=nodes_url,
        flag_urls={  # by names a template can look up
            flag.replace("-", "_"): f"{nodes_url}&{urlencode({'flag': flag})}"
            for flag in NodeFilterForm.FLAGS
        },
        plan_url=reverse("dashboard:cluster-plan", args=[cluster.pk]),
        nodes=_node_section(user, cluster, params, cluster_url),
        sriov=_sriov_section(cluster),
        shortfalls=shortfalls,
        history=cluster_history(user, cluster, params.get(HISTORY_OF, "")),
    )


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
    user: User, cluster: Cluster, params: QueryDict, cluster_url: str
) -> dict[str, Any]:
    """A page of the cluster's nodes, by name, and the links to the pages beside it. The
    count is the cluster's summary when it has one: no query for it, none at all for a
    cluster without nodes."""
    known = getattr(cluster, "summary_nodes", None)
    asked = QueryDict(mutable=True)
    for ours, cursor in NODE_CURSOR_PARAMS.items():
        if value := params.get(ours):
            asked[cursor] = value
    found: dict[str, Any] = {
        "node_columns": CLUSTER_NODE_COLUMNS,
        "node_shown": frozenset(column.key for column in CLUSTER_NODE_COLUMNS),
        "node_rows": [],
        "node_page": None,
        "node_error": "",
        "node_links": {},
    }
    if known == 0:
        return found
    nodes = verifications_latest(
        kube_nodes_with_requests(
            visible(user, KubeNode.objects.filter(cluster=cluster).select_related("machine"))
        )
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
    pods = visible(user, KubePod.objects.filter(cluster=cluster))

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
