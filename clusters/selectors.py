"""Reading clusters."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

from capvco_web.models import PlanPass
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


def cluster_passes(cluster: Cluster) -> QuerySet[PlanPass]:
    """The cluster's last reconcile passes, those of its NICs and of its pool autoscaler,
    newest first."""
    scopes = [PlanPass.Scope.CLUSTER, PlanPass.Scope.NICS, PlanPass.Scope.POOLS]
    return PlanPass.objects.filter(scope__in=scopes, scope_id=cluster.pk).order_by(
        "-started_at", "-id"
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


def kube_observe_lock(cluster_id: int) -> str:
    """The lock (capvco_web.locks) a pass over the cluster's Kubernetes holds from the read
    of its cluster to its last write (kube.tasks). The cluster's rows are deleted only
    under it (services.cluster_rows_delete): no pass writes rows naming a cluster gone."""
    return f"observe-kube:{cluster_id}"
