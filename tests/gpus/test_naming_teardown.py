"""Teardown by name, against the simulator: a cluster's deletion removes what its names
say is its own, and nothing whose name it cannot prove is its own."""

from __future__ import annotations

from typing import Any

from clusters.models import Cluster, Machine
from clusters.services import cluster_delete, machine_force_delete
from tests.gpus.conftest import Plane


def test_cluster_delete_removes_the_vm_a_force_deleted_machine_of_a_gpu_pool_left(
    plane: Plane, admin_user: Any
) -> None:
    # `capvco-c-gpu-0` ends like a vGPU name; it is the VM of machine gpu-0.
    cluster = plane.cluster("c")
    plane.pool(cluster, "gpu", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    assert [vm["name"] for vm in plane.sim_vms()] == ["capvco-c-gpu-0"]
    machine = Machine.objects.get()
    machine_force_delete(machine=machine, actor=admin_user, reason="stuck", confirm=machine.name)

    cluster_delete(cluster=cluster, actor=admin_user, reason="end of project", confirm=cluster.name)
    plane.converge(cluster)

    assert not Cluster.objects.exists()
    assert plane.sim_vms() == []
    assert plane.sim_vgpus() == []
    assert plane.unassigned_billed() == {}


def test_deleting_a_cluster_leaves_alone_the_vm_of_an_older_cluster_named_like_it(
    plane: Plane, admin_user: Any
) -> None:
    # Made before the naming rules (model validation refuses this pair now): cluster x
    # with pool y-z and cluster x-y with pool z both name a VM `capvco-x-y-z-0`.
    x, x_y = plane.cluster("x"), plane.cluster("x-y", legacy=True)
    plane.pool(x, "y-z")
    plane.pool(x_y, "z")
    plane.converge(x)
    plane.converge(x_y)
    kept = Machine.objects.get(pool__cluster=x)
    # A new machine skips an index whose name is already listed, so x-y's machine is z-1;
    # both names still read as either cluster's.
    assert sorted(vm["name"] for vm in plane.sim_vms()) == ["capvco-x-y-z-0", "capvco-x-y-z-1"]

    cluster_delete(cluster=x_y, actor=admin_user, reason="end of project", confirm=x_y.name)
    plane.converge(x_y)

    assert list(Cluster.objects.values_list("name", flat=True)) == ["x"]
    assert [vm["vm_id"] for vm in plane.sim_vms()] == [kept.vm_id]
    assert plane.sim_vms()[0]["status"] == "RUNNING"
