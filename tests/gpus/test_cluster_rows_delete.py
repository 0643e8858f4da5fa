"""The end of a cluster's teardown: the cluster, its pools and its sites go together,
audited, and only once its machines are torn down; another cluster's rows stay."""

from __future__ import annotations

from typing import Any

from capvco_web.models import AuditEvent
from clusters.models import Cluster, ClusterSite, Machine, MachinePool
from clusters.services import cluster_delete
from tests.gpus.conftest import BE, NL, Plane


def test_cluster_teardown_ends_with_its_pools_and_sites_gone_and_audited(
    plane: Plane, admin_user: Any
) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "nl", location=NL, gpu_type="NVIDIA A100", gpu_count=1, replicas=2)
    plane.pool(cluster, "be", location=BE, gpu_type="NVIDIA T4", gpu_count=1)
    other = plane.cluster("other", sites=(NL,))
    plane.pool(other, "cpu", location=NL)
    plane.converge(cluster)
    plane.converge(other)

    cluster_delete(cluster=cluster, actor=admin_user, reason="end of project", confirm="demo")
    plane.converge(cluster)

    assert not Cluster.objects.filter(name="demo").exists()
    assert list(MachinePool.objects.values_list("name", flat=True)) == ["cpu"]
    assert list(ClusterSite.objects.values_list("cluster__name", flat=True)) == ["other"]
    assert list(Machine.objects.values_list("name", flat=True)) == ["cpu-0"]
    assert plane.sim_vgpus("capvco-demo-") == []
    event = AuditEvent.objects.get(action="cluster.delete")
    assert event.before == {
        "name": "demo",
        "account": "demo",
        "sites": [BE, NL],
        "pools": ["be", "nl"],
    }
