"""An unchanged cluster is not planned again: a pass whose plan's inputs are as when its
last plan computed in full found nothing to do makes a few queries, however many machines,
and loads no model. Each input, changed, makes the next pass plan in full and act."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.db import connection
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone
from rest_framework import serializers

from capvco_web.audit import SystemActor
from cloud.whitesky import whitesky_client
from clusters.api.serializers import ClusterSerializer
from clusters.models import Cluster, ClusterStatus, Machine, MachinePool
from clusters.reconcile import ReconcileResult, cluster_reconcile
from clusters.services import machine_delete
from tests.gpus.conftest import Plane


@contextmanager
def models_loaded() -> Iterator[list[str]]:
    loaded: list[str] = []

    def note(sender: type, **kwargs: object) -> None:
        loaded.append(sender.__name__)

    post_init.connect(note)
    try:
        yield loaded
    finally:
        post_init.disconnect(note)


def idle_cluster(plane: Plane, replicas: int) -> Cluster:
    """A converged cluster of `replicas` one-GPU machines whose last pass planned nothing."""
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1, replicas=replicas)
    results = plane.converge(cluster)
    assert results[-1].plan == [] and results[-1].unchanged_since is None
    assert Machine.objects.filter(phase=Machine.Phase.RUNNING).count() == replicas
    return cluster


def unchanged_pass(plane: Plane, cluster: Cluster) -> tuple[ReconcileResult, int, list[str]]:
    """The pass, its queries and the model instances it loaded (the cluster row itself is
    read before, as the beat's task reads it)."""
    cluster = Cluster.objects.select_related("account").get(pk=cluster.pk)
    with (
        whitesky_client(plane.account) as client,
        CaptureQueriesContext(connection) as queries,
        models_loaded() as loaded,
    ):
        result = cluster_reconcile(client=client, cluster=cluster)
    return result, len(queries), loaded


def planned_in_full(result: ReconcileResult) -> bool:
    return result.unchanged_since is None


def test_an_unchanged_cluster_costs_the_same_few_queries_at_any_size_and_loads_no_model(
    plane: Plane,
) -> None:
    small = idle_cluster(plane, replicas=1)
    result, small_queries, loaded = unchanged_pass(plane, small)
    status = ClusterStatus.objects.get(cluster=small)
    # Honest: it says the plan was not computed again, and when it last was in full.
    assert result.plan == [] and result.unchanged_since == status.idle_planned_at
    shown = ClusterSerializer(Cluster.objects.get(pk=small.pk)).data["plan_unchanged_since"]
    assert status.idle_planned_at is not None
    assert shown == serializers.DateTimeField().to_representation(status.idle_planned_at)
    assert loaded == []
    MachinePool.objects.filter(cluster=small).update(replicas=4)
    plane.converge(small)
    assert Machine.objects.filter(phase=Machine.Phase.RUNNING).count() == 4
    result, large_queries, loaded = unchanged_pass(plane, small)

    assert not planned_in_full(result) and loaded == []
    assert large_queries == small_queries <= 8


def test_a_new_listing_that_changes_nothing_the_plan_reads_is_not_planned_again(
    plane: Plane,
) -> None:
    cluster = idle_cluster(plane, replicas=2)
    plane.observe()  # every location's stamp moves; its VMs and vGPUs are as they were

    assert not planned_in_full(plane.reconcile(cluster))


def test_a_machine_row_changed_is_planned_and_acted_on(plane: Plane) -> None:
    cluster = idle_cluster(plane, replicas=1)
    # A failed try recorded on its row (its VM runs, as whitesky lists it): tried again.
    Machine.objects.update(
        phase=Machine.Phase.FAILED, failure_message="start timed out", updated_at=timezone.now()
    )

    result = plane.reconcile(cluster)

    assert [step.kind for step in result.plan] == ["provision"]
    assert Cluster.objects.get(pk=cluster.pk).plan_unchanged_since is None  # planned in full
    machine = Machine.objects.get()
    assert (machine.phase, machine.failure_message) == (Machine.Phase.RUNNING, "")


def test_a_deletion_asked_is_planned_and_acted_on(plane: Plane) -> None:
    cluster = idle_cluster(plane, replicas=1)
    machine_delete(machine=Machine.objects.get(), actor=SystemActor.RECONCILER, reason="test")

    old = Machine.objects.get()

    result = plane.reconcile(cluster)

    assert [step.kind for step in result.plan] == ["teardown", "create"]
    assert not Machine.objects.filter(pk=old.pk).exists()
    assert [vm["name"] for vm in plane.sim_vms()] == ["capvco-demo-a100-1"]


def test_a_pools_replicas_changed_are_planned_and_acted_on(plane: Plane) -> None:
    cluster = idle_cluster(plane, replicas=1)
    MachinePool.objects.filter(cluster=cluster).update(replicas=2)

    result = plane.reconcile(cluster)

    assert [step.kind for step in result.plan] == ["create"]
    assert Machine.objects.count() == 2 and len(plane.sim_vms()) == 2


def test_a_new_listing_without_the_vm_is_planned_and_acted_on(plane: Plane) -> None:
    cluster = idle_cluster(plane, replicas=1)
    machine = Machine.objects.get()
    old_vm = machine.vm_id
    assert old_vm is not None
    with whitesky_client(plane.account) as client:
        client.stop_vm(cloudspace_id="cs-demo-nl", vm_id=old_vm)
        client.delete_vm(
            cloudspace_id="cs-demo-nl", vm_id=old_vm, permanently=True, detach_gpu=True
        )
    assert planned_in_full(plane.reconcile(cluster)) is False  # the old listing shows it
    plane.observe()  # a complete listing begun after the VM went lacks it

    result = plane.reconcile(cluster)

    assert [step.kind for step in result.plan] == ["replace_vm"]
    machine.refresh_from_db()
    assert machine.phase == Machine.Phase.RUNNING and machine.vm_id not in (None, old_vm)
    [vgpu] = plane.sim_vgpus()
    assert vgpu["vm_id"] == machine.vm_id


def test_a_new_listing_with_a_vgpu_detached_is_planned_in_full(plane: Plane) -> None:
    cluster = idle_cluster(plane, replicas=1)
    machine = Machine.objects.get()
    [vgpu] = plane.sim_vgpus()
    assert machine.vm_id is not None
    with whitesky_client(plane.account) as client:
        client.stop_vm(cloudspace_id="cs-demo-nl", vm_id=machine.vm_id)
        client.detach_vgpu(cloudspace_id="cs-demo-nl", vm_id=machine.vm_id, vgpu_id=vgpu["vgpu_id"])
    plane.observe()  # a complete listing begun after the detach shows it unattached

    # Planned from what the listing shows (the plan leaves a running machine's VM and
    # vGPUs as listed to the node's checks: it has no step for them).
    assert planned_in_full(plane.reconcile(cluster))


def test_a_next_try_falling_due_ends_the_skip(plane: Plane) -> None:
    cluster = idle_cluster(plane, replicas=1)
    soon = timezone.now() + timedelta(seconds=30)
    Machine.objects.update(next_try_at=soon, updated_at=timezone.now())
    assert planned_in_full(plane.reconcile(cluster))  # its row changed
    assert ClusterStatus.objects.get(cluster=cluster).idle_until == soon
    assert not planned_in_full(plane.reconcile(cluster))

    Machine.objects.update(next_try_at=timezone.now() - timedelta(seconds=1))
    ClusterStatus.objects.update(idle_until=timezone.now() - timedelta(seconds=1))

    assert planned_in_full(plane.reconcile(cluster))


def test_the_resync_plans_in_full_however_little_changed(plane: Plane) -> None:
    cluster = idle_cluster(plane, replicas=1)
    assert not planned_in_full(plane.reconcile(cluster))

    with override_settings(RECONCILE_RESYNC=timedelta(0)):
        assert planned_in_full(plane.reconcile(cluster))
