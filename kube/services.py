"""Changes to the Kubernetes mirror that are not a listing: forgetting a cluster's mirror
(its GPU verification Jobs as listed included) once its kubeconfig is gone. The mirror's
rows are written only here and by observe."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from clusters.models import Cluster
from kube.models import (
    ClusterObservation,
    GpuVerifyJob,
    KubeNode,
    KubePod,
    KubeWatch,
    MachineNode,
)


def kube_unobserved_with_mirror() -> QuerySet[Cluster]:
    """Clusters whose kubeconfig was removed and of whose Kubernetes something is still
    held: nodes, pods, or the state of an observation."""
    held = (
        Exists(KubeNode.objects.filter(cluster=OuterRef("pk")))
        | Exists(KubePod.objects.filter(cluster=OuterRef("pk")))
        | Exists(MachineNode.objects.filter(machine__pool__cluster=OuterRef("pk")))
        | Exists(ClusterObservation.objects.filter(cluster=OuterRef("pk")))
        | Exists(GpuVerifyJob.objects.filter(cluster=OuterRef("pk")))
    )
    return Cluster.objects.filter(held, kubeconfig="")


def cluster_mirror_forget(*, cluster: Cluster) -> None:
    """Drop what was mirrored from the cluster's Kubernetes, and the flags raised from it:
    without a kubeconfig nothing is observed, so nothing of it may be shown as current."""
    with transaction.atomic():
        KubeNode.objects.filter(cluster=cluster).delete()
        KubePod.objects.filter(cluster=cluster).delete()
        KubeWatch.objects.filter(cluster=cluster).delete()
        MachineNode.objects.filter(machine__pool__cluster=cluster).delete()
        ClusterObservation.objects.filter(cluster=cluster).delete()
        GpuVerifyJob.objects.filter(cluster=cluster).delete()
