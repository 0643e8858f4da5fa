"""A machine that failed is tried again after its backoff, not on every tick."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from clusters.models import Machine
from clusters.plan import cluster_plan
from clusters.reconcile import retry_delay
from tests.gpus.conftest import Plane


@override_settings(MACHINE_RETRY_BASE_SECONDS=30, MACHINE_RETRY_MAX_SECONDS=900)
def test_a_failed_machine_waits_for_its_next_try_then_is_tried_once(plane: Plane) -> None:
    cluster = plane.cluster()
    plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.observe()
    plane.sim.fault(operation="createVirtualMachine", status=400, times=1)
    plane.reconcile(cluster)
    machine = Machine.objects.get()
    assert machine.phase == Machine.Phase.FAILED
    assert machine.failures == 1 and machine.next_try_at is not None
    assert machine.next_try_at - timezone.now() > timedelta(seconds=25)

    plane.observe()
    plane.sim.clear_calls()
    result = plane.reconcile(cluster)  # the next tick, before its next try

    assert plane.sim.calls()["writes"] == 0
    (step,) = result.plan
    assert step.blocked_by == "backoff" and step.next_try_at == machine.next_try_at
    assert step.calls() == ()

    Machine.objects.filter(pk=machine.pk).update(next_try_at=timezone.now())
    plane.reconcile(cluster)  # after it: one try, which works

    creates = [c for c in plane.sim.calls()["calls"] if c["operation"] == "createVirtualMachine"]
    assert len(creates) == 1
    machine.refresh_from_db()
    assert machine.phase == Machine.Phase.RUNNING
    assert (machine.failures, machine.next_try_at) == (0, None)  # reset on success


@override_settings(MACHINE_RETRY_BASE_SECONDS=30, MACHINE_RETRY_MAX_SECONDS=900)
def test_the_backoff_doubles_per_failure_up_to_its_cap() -> None:
    assert [retry_delay(n).total_seconds() for n in (1, 2, 3, 6, 10)] == [30, 60, 120, 900, 900]


@override_settings(MACHINE_RETRY_BASE_SECONDS=30)
def test_the_api_and_the_plan_show_when_a_failed_machine_is_tried_again(
    plane: Plane, admin_user: User
) -> None:
    admin_api = APIClient()
    admin_api.force_authenticate(admin_user)
    cluster = plane.cluster()
    plane.pool(cluster, "h100", gpu_type="NVIDIA H100", gpu_count=1)  # no such card
    plane.observe()
    plane.reconcile(cluster)
    machine = Machine.objects.get()

    shown = admin_api.get(f"/api/v1/machines/{machine.pk}/").json()
    (step,) = admin_api.get(f"/api/v1/clusters/{cluster.pk}/plan/").json()

    assert shown["failures"] == 1 and shown["next_try_at"] is not None
    assert step["blocked_by"] == "backoff" and step["next_try_at"] == shown["next_try_at"]
    assert "next try at" in step["description"]
    assert cluster_plan(cluster).steps[0].calls() == ()


@override_settings(MACHINE_RETRY_BASE_SECONDS=30, MACHINE_RETRY_MAX_SECONDS=900)
def test_a_failed_teardown_waits_for_its_next_try_then_is_tried_once(plane: Plane) -> None:
    cluster = plane.cluster()
    pool = plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.converge(cluster)
    pool.replicas = 0
    pool.save()
    plane.observe()
    plane.sim.fault(operation="stopVirtualMachine", status=400, times=1)
    plane.reconcile(cluster)  # the deletion's first try, at once: refused

    machine = Machine.objects.get()
    assert machine.phase == Machine.Phase.DELETING and machine.failures == 1
    assert machine.next_try_at is not None
    assert machine.next_try_at - timezone.now() > timedelta(seconds=25)

    plane.observe()
    plane.sim.clear_calls()
    result = plane.reconcile(cluster)  # the next tick, before its next try

    assert plane.sim.calls()["writes"] == 0
    (step,) = result.plan
    assert (step.kind, step.blocked_by) == ("teardown", "backoff")
    assert step.next_try_at == machine.next_try_at and step.calls() == ()

    Machine.objects.filter(pk=machine.pk).update(next_try_at=timezone.now())
    plane.reconcile(cluster)  # after it: one try, which works

    stops = [c for c in plane.sim.calls()["calls"] if c["operation"] == "stopVirtualMachine"]
    assert len(stops) == 1
    assert not Machine.objects.exists() and plane.sim_vms() == [] and plane.sim_vgpus() == []


@override_settings(MACHINE_RETRY_BASE_SECONDS=30, MACHINE_RETRY_MAX_SECONDS=900)
def test_a_deletion_asked_for_is_tried_at_once_even_while_a_provisioning_backs_off(
    plane: Plane,
) -> None:
    cluster = plane.cluster()
    pool = plane.pool(cluster, "a100", gpu_type="NVIDIA A100", gpu_count=1)
    plane.observe()
    plane.sim.fault(operation="startVirtualMachine", status=400, times=1)
    plane.reconcile(cluster)
    machine = Machine.objects.get()
    assert machine.phase == Machine.Phase.FAILED and machine.next_try_at is not None
    assert machine.vm_id is not None and plane.sim_vgpus() != []
    pool.replicas = 0
    pool.save()
    plane.observe()

    (step,) = cluster_plan(cluster).steps
    assert step.kind == "teardown" and not step.blocked and step.calls()
    plane.reconcile(cluster)

    assert not Machine.objects.exists() and plane.sim_vms() == [] and plane.sim_vgpus() == []
