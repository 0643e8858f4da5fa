"""Reading clusters."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Prefetch, Q, QuerySet

from clusters.models import Cluster, Machine, MachinePool
from gpus.models import VgpuReservation

# Where `machines_with_vgpus` leaves each machine's vGPUs (`machine_vgpus_held`).
HELD_VGPUS = "held_vgpus"


def machine_vgpus_held() -> QuerySet[VgpuReservation]:
    """The vGPU reservations machines hold: every state but released, by name."""
    return VgpuReservation.objects.exclude(state=VgpuReservation.State.RELEASED).order_by(
        "name", "pk"
    )


def machines_with_vgpus(machines: QuerySet[Machine]) -> QuerySet[Machine]:
    """The machines, each with its held vGPUs read in one query for the whole page."""
    return machines.prefetch_related(
        Prefetch("reservations", queryset=machine_vgpus_held(), to_attr=HELD_VGPUS)
    )


def pools_by_cluster(account_id: int) -> dict[str, set[str]]:
    """Every cluster of an account with its pool names: what owner names are parsed against."""
    found: dict[str, set[str]] = {
        name: set()
        for name in Cluster.objects.filter(account_id=account_id).values_list("name", flat=True)
    }
    for cluster, pool in MachinePool.objects.filter(cluster__account_id=account_id).values_list(
        "cluster__name", "name"
    ):
        found[cluster].add(pool)
    return found


def kube_observed(queryset: QuerySet[Cluster] | None = None) -> QuerySet[Cluster]:
    """Clusters whose Kubernetes is observed: active ones with a kubeconfig."""
    clusters = Cluster.objects.all() if queryset is None else queryset
    return clusters.filter(state=Cluster.State.ACTIVE).exclude(kubeconfig="")


def kube_observation_failing(
    queryset: QuerySet[Cluster], *, now: datetime, interval: timedelta
) -> QuerySet[Cluster]:
    """The observed clusters whose last Kubernetes observation failed (an error, or a
    partial listing), or whose last complete one is older than two observe intervals.
    A cluster not observed yet is not failing: its first pass is due."""
    tried = Q(kube_observation_started_at__isnull=False) | ~Q(kube_observation_error="")
    stale = Q(kube_last_complete_observation_at__isnull=True) | Q(
        kube_last_complete_observation_at__lt=now - 2 * interval
    )
    failed = ~Q(kube_observation_error="") | Q(kube_observation_complete=False) | stale
    return kube_observed(queryset).filter(tried & failed)


def kube_observation_problem(cluster: Cluster, *, now: datetime, interval: timedelta) -> str:
    """What is wrong with the cluster's Kubernetes observation, in a few words ("": nothing,
    or it is not observed, or not yet)."""
    if cluster.state != Cluster.State.ACTIVE or not cluster.kubeconfig:
        return ""
    if cluster.kube_observation_error:
        return f"failing: {cluster.kube_observation_error}"
    if cluster.kube_observation_started_at is None:
        return ""
    if not cluster.kube_observation_complete:
        return "partial: the last listing of its nodes and pods did not complete"
    last = cluster.kube_last_complete_observation_at
    if last is None or last < now - 2 * interval:
        return "stale: no complete observation for two observe intervals"
    return ""
