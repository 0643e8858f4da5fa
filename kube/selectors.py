"""Reading the Kubernetes mirror: the clusters' summaries, the nodes with what their pods
request, the GPUs Kubernetes sees per location and type, and which kinds are watched."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    Count,
    IntegerField,
    JSONField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from capvco_web.integrations.kube import GPU_TYPE_LABEL
from clusters.capacity import KubeGpus
from clusters.models import Cluster
from clusters.selectors import kube_observed
from kube.models import (
    ClusterObservation,
    GpuVerification,
    KubeNode,
    KubePod,
    KubeWatch,
    MachineNode,
)

# Pods that hold (or wait for) what they request; finished ones hold nothing.
ACTIVE_POD_PHASES = (KubePod.Phase.PENDING, KubePod.Phase.RUNNING)


def _per_cluster(rows: QuerySet[Any], value: Any) -> Coalesce:
    """One figure of the rows of the outer cluster (`cluster=OuterRef("pk")` already in
    `rows`), 0 when there are none: a subquery, so that a list of clusters is one query."""
    grouped = rows.order_by().values("cluster").annotate(figure=value).values("figure")
    return Coalesce(Subquery(grouped, output_field=IntegerField()), 0)


def clusters_with_kube_summary(queryset: QuerySet[Cluster]) -> QuerySet[Cluster]:
    """The clusters with their Kubernetes summary, as last observed: nodes (ready), GPUs
    the nodes have and advertise as allocatable, GPUs requested by pods on a node and by
    pods not scheduled yet, and the flags raised (`summary_*` attributes)."""
    nodes = KubeNode.objects.filter(cluster=OuterRef("pk"))
    # Pods asking for no GPU add nothing: left out, the sums read an index of the few others.
    pods = KubePod.objects.filter(
        cluster=OuterRef("pk"), phase__in=ACTIVE_POD_PHASES, gpu_requests__gt=0
    )
    missing = MachineNode.objects.filter(machine__pool__cluster=OuterRef("pk"), missing=True)
    return queryset.annotate(
        summary_nodes=_per_cluster(nodes, Count("pk")),
        summary_nodes_ready=_per_cluster(nodes.filter(ready=True), Count("pk")),
        summary_gpu_capacity=_per_cluster(nodes, Sum("gpu_capacity")),
        summary_gpu_allocatable=_per_cluster(nodes, Sum("gpu_allocatable")),
        summary_gpu_requested=_per_cluster(pods.exclude(node_name=""), Sum("gpu_requests")),
        summary_gpu_unscheduled=_per_cluster(pods.filter(node_name=""), Sum("gpu_requests")),
        summary_nodes_unowned=_per_cluster(nodes.filter(unowned_since__isnull=False), Count("pk")),
        summary_nodes_gpus_missing=_per_cluster(nodes.filter(gpus_missing=True), Count("pk")),
        summary_machines_node_missing=Coalesce(
            Subquery(
                missing.order_by()
                .values("machine__pool__cluster")
                .annotate(figure=Count("pk"))
                .values("figure"),
                output_field=IntegerField(),
            ),
            0,
        ),
    )


def kube_nodes_with_requests(queryset: QuerySet[KubeNode]) -> QuerySet[KubeNode]:
    """The nodes with `gpu_requested`: the GPUs that pods placed on each ask for."""
    pods = KubePod.objects.filter(
        cluster=OuterRef("cluster"),
        node_name=OuterRef("name"),
        phase__in=ACTIVE_POD_PHASES,
        gpu_requests__gt=0,  # what adds nothing, left out: read from the index of GPU pods
    )
    requested = pods.order_by().values("cluster").annotate(figure=Sum("gpu_requests"))
    return queryset.annotate(
        gpu_requested=Coalesce(Subquery(requested.values("figure"), output_field=IntegerField()), 0)
    )


def verifications_latest(nodes: QuerySet[KubeNode]) -> QuerySet[KubeNode]:
    """The nodes with their incarnation's latest verification: `verify_status` (None:
    none), `verify_reasons` ([] then), `verify_finished_at`."""
    latest = GpuVerification.objects.filter(
        cluster=OuterRef("cluster"), node_uid=OuterRef("uid")
    ).order_by("-started_at", "-pk")
    return nodes.annotate(
        verify_status=Subquery(latest.values("status")[:1]),
        verify_reasons=Coalesce(
            Subquery(latest.values("reasons")[:1]), Value([], output_field=JSONField())
        ),
        verify_finished_at=Subquery(latest.values("finished_at")[:1]),
    )


def kube_gpus_by_location_and_type(
    nodes: QuerySet[KubeNode], *, requested: bool = True
) -> dict[tuple[int, str], KubeGpus]:
    """Per (location id, `capvco.io/gpu-type` label) of `nodes`: the GPUs they advertise
    and, unless `requested` is false (0 then), the GPUs their pods request; one query,
    summed in the database. Only nodes of our machines have a location; GPU nodes without
    a type label count under the label ""; nodes with no GPU, no GPU request and no label
    count nowhere. The requests cost a look-up of each node's pods (a few ms per thousand
    nodes): a page that does not show them leaves them out."""
    nodes = nodes.filter(machine__isnull=False)
    annotated: QuerySet[Any] = kube_nodes_with_requests(nodes) if requested else nodes
    sums = {"allocatable": Sum("gpu_allocatable")}
    if requested:
        sums["requested"] = Sum("gpu_requested")
    rows = (
        annotated.order_by()
        .values("machine__pool__site__location_id", label=KT(f"labels__{GPU_TYPE_LABEL}"))
        .annotate(**sums)
    )
    found = {}
    for row in rows:
        gpus = KubeGpus(allocatable=row["allocatable"] or 0, requested=row.get("requested") or 0)
        if row["label"] or gpus.allocatable or gpus.requested:
            found[row["machine__pool__site__location_id"], row["label"] or ""] = gpus
    return found


def kube_watched(cluster: Cluster, *, now: datetime) -> dict[str, datetime]:
    """The kinds (`nodes`, `pods`) of the cluster whose watch is healthy, each with its
    stamp: their mirror is whole and current as of then (KubeWatch)."""
    fresh = KubeWatch.objects.filter(cluster=cluster, watched_at__gte=KubeWatch.fresh_after(now))
    return {kind: at for kind, at in fresh.values_list("kind", "watched_at") if at is not None}


def cluster_observation(cluster: Cluster) -> ClusterObservation:
    """How the cluster's Kubernetes was last observed (unsaved and empty: not yet)."""
    try:
        return cluster.kube_observation
    except ClusterObservation.DoesNotExist:
        return ClusterObservation(cluster=cluster)


def kube_observation_failing(
    queryset: QuerySet[Cluster], *, now: datetime, interval: timedelta
) -> QuerySet[Cluster]:
    """The observed clusters whose last Kubernetes observation failed (an error, or a
    partial listing), or whose last complete one is older than two observe intervals.
    A cluster not observed yet is not failing: its first pass is due."""
    # No observation row: not observed yet, so not failing.
    tried = Q(kube_observation__started_at__isnull=False) | ~Q(kube_observation__error="")
    stale = Q(kube_observation__last_complete_at__isnull=True) | Q(
        kube_observation__last_complete_at__lt=now - 2 * interval
    )
    failed = ~Q(kube_observation__error="") | Q(kube_observation__complete=False) | stale
    observed = kube_observed(queryset).filter(kube_observation__isnull=False)
    return observed.filter(tried & failed).select_related("kube_observation")


def kube_observation_problem(cluster: Cluster, *, now: datetime, interval: timedelta) -> str:
    """What is wrong with the cluster's Kubernetes observation, in a few words ("": nothing,
    or it is not observed, or not yet)."""
    if cluster.state != Cluster.State.ACTIVE or not cluster.kubeconfig:
        return ""
    observation = cluster_observation(cluster)
    if observation.error:
        return f"failing: {observation.error}"
    if observation.started_at is None:
        return ""
    if not observation.complete:
        return "partial: the last listing of its nodes and pods did not complete"
    last = observation.last_complete_at
    if last is None or last < now - 2 * interval:
        return "stale: no complete observation for two observe intervals"
    return ""
