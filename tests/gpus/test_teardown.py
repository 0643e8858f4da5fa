"""Teardown, force delete, cluster delete: every reservation released, nothing billed."""

from __future__ import annotations

from capvco_web.models import AuditEvent
from clusters.models import Cluster, Machine
from clusters.services import cluster_delete, machine_force_delete
from gpus.models import VgpuReservation
from tests.gpus.conftest import BE, NL, Plane


def test_scale_down_stops_deletes_and_releases_and_bills_nothing_after(plane: Plane) -> None:
    cluster = plane.cluster()
    pool = plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=2, replicas=2)
    plane.converge(cluster)
    assert len(plane.sim_vgpus()) == 4

    pool.replicas = 1
    pool.save()
    plane.converge(cluster)

    assert [v["vgpu_name"] for v in sorted(plane.sim_vgpus(), key=lambda v: v["vgpu_name"])] == [
        "capvco-demo-a100-0-gpu-0",
        "capvco-demo-a100-0-gpu-1",
    ]
    assert list(Machine.objects.values_list("name", flat=True)) == ["a100-0"]
    assert [vm["name"] for vm in plane.sim_vms()] == ["capvco-demo-a100-0"]
    released = VgpuReservation.objects.filter(name__startswith="capvco-demo-a100-1-")
    assert set(released.values_list("state", flat=True)) == {"released"}
    assert AuditEvent.objects.filter(action="vgpu.release").count() == 2
    assert plane.unassigned_billed() == {}


def test_force_delete_then_cluster_delete_leaves_no_reservation_with_the_prefix(
    plane: Plane, admin_user
) -> None:  # type: ignore[no-untyped-def]
    cluster = plane.cluster()
    plane.pool(cluster, "nl", location=NL, gpu_type="NVIDIA A100", gpu_count=1, replicas=2)
    plane.pool(cluster, "be", location=BE, gpu_type="NVIDIA T4", gpu_count=2)
    plane.converge(cluster)
    assert len(plane.sim_vgpus("capvco-demo-")) == 4

    machine_force_delete(
        machine=Machine.objects.get(name="nl-1"), actor=admin_user, reason="stuck", confirm="nl-1"
    )
    assert len(plane.sim_vgpus("capvco-demo-")) == 4  # force: nothing torn down yet
    cluster_delete(cluster=cluster, actor=admin_user, reason="end of project", confirm=cluster.name)
    plane.converge(cluster)

    assert plane.sim_vgpus("capvco-demo-") == []
    assert plane.sim_vms("capvco-demo-") == []
    assert not Cluster.objects.filter(name="demo").exists()
    assert plane.unassigned_billed() == {}
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {
        "machine.force_delete",
        "cluster.delete_requested",
        "vgpu.release",
        "cluster.delete",
    } <= actions


def test_cluster_delete_releases_reservations_of_its_prefix_only(plane: Plane, admin_user) -> None:  # type: ignore[no-untyped-def]
    demo = plane.cluster("demo")
    plane.pool(demo, "a", gpu_type="NVIDIA A100", gpu_count=1)
    # "demo-a" (made before the naming rules) shares the prefix capvco-demo-a...: its
    # reservations are not demo's.
    other = plane.cluster("demo-a", legacy=True)
    plane.pool(other, "x", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(demo)
    plane.converge(other)

    cluster_delete(cluster=demo, actor=admin_user, reason="done", confirm=demo.name)
    plane.converge(demo)

    assert [v["vgpu_name"] for v in plane.sim_vgpus()] == ["capvco-demo-a-x-0-gpu-0"]


def test_cluster_stays_deleting_showing_what_blocks_while_a_listing_is_partial(
    plane: Plane, admin_user
) -> None:  # type: ignore[no-untyped-def]
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    cluster_delete(cluster=cluster, actor=admin_user, reason="done", confirm=cluster.name)
    plane.sim.fault(operation="listCustomerVGPUS", status=400)

    plane.converge(cluster, passes=2)

    cluster.refresh_from_db()
    assert cluster.state == Cluster.State.DELETING
    assert any("vGPU listing incomplete" in b for b in cluster.deletion_blockers)

    plane.sim.clear_faults()
    plane.converge(cluster)
    assert not Cluster.objects.filter(pk=cluster.pk).exists()
    assert plane.sim_vgpus() == []
